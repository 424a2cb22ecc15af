"""Run the hidden graders with pytest against one submission: qkv-graders PATH (or, from the
project's root, python -m autograder.graders PATH)."""
from __future__ import annotations

import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-"):
        sys.stderr.write("usage: qkv-graders SUBMISSION [--seed N] [pytest options]\n")
        return 2
    submission, rest = Path(argv[0]), argv[1:]
    if not (submission.is_file() or submission.is_symlink()):
        sys.stderr.write(f"autograder.graders: error: {submission}: no such file\n")
        return 2
    from autograder.submission import SubmissionError, load

    try:  # read as qkv-grade reads it: a symbolic link is refused, never followed to its target
        load(submission)
    except SubmissionError as exc:
        sys.stderr.write(f"autograder.graders: error: {exc}\n")
        return 2
    os.environ["QKV_SUBMISSION"] = os.path.abspath(submission)  # absolute, its links left unresolved
    if "--seed" in rest:
        index = rest.index("--seed")
        os.environ["QKV_SEED"] = rest[index + 1]
        del rest[index:index + 2]
    import pytest

    here = Path(__file__).resolve().parent
    return pytest.main([str(here), "-p", "no:cacheprovider", "--rootdir", str(here), "-c", os.devnull, *rest])


if __name__ == "__main__":
    sys.exit(main())
