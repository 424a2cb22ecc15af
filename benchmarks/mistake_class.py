"""A mistake-heavy class: four submissions in five with at least one mistake, the same every time.

The mistakes are those of the test suite: the hand-written ones (tests/submissions/variants.py,
realistic.py and unlisted.py, each the reference with a line or two changed) and compositions of
the grammar of slips (autograder/slips.py, one or two slips, as tests/submissions/grammar.py writes
them). Every fifth submission is correct (the reference, or one of the unusual correct solutions).
A submission that loops until its time limit is left out: it would measure the limit, not the
grader.

    python benchmarks/mistake_class.py OUT [COUNT]     # writes COUNT submissions (default 200) into OUT
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _pools() -> tuple[list[str], list[str], list[str]]:
    """(hand-written mistakes, grammar compositions, correct solutions) as module sources."""
    sys.path.insert(0, str(REPO / "tests"))
    from submissions import grammar, unlisted, variants
    from submissions.realistic import MISTAKES, UNUSUAL

    hand = {**variants.WRONG, **MISTAKES, **unlisted.UNLISTED}
    written = [submission.text() for _, submission in sorted(hand.items())
               if "timeout" not in submission.status.values()]
    compositions = grammar.singles() + grammar.sample(grammar.pairs(), 200)
    composed = [grammar.source(choice) for choice in sorted(compositions, key=grammar.name)]
    correct = [variants.reference_source()] + [submission.text() for _, submission in
                                               sorted({**variants.CORRECT, **UNUSUAL}.items())]
    return written, composed, correct


def sources(count: int, seed: int = 0) -> list[str]:
    """`count` submissions: every fifth correct, the others a mistake, drawn alternately from the
    hand-written set and the grammar's compositions."""
    written, composed, correct = _pools()
    pick = random.Random(seed)
    found = []
    for index in range(count):
        if index % 5 == 4:
            found.append(pick.choice(correct))
        else:
            found.append(pick.choice(written if index % 2 == 0 else composed))
    return found


def make_class(folder: Path, count: int, seed: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for index, text in enumerate(sources(count, seed)):
        (folder / f"student{index:05d}.py").write_text(text)


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "mistake-class")
    make_class(out, int(sys.argv[2]) if len(sys.argv) > 2 else 200)
    print(f"written to {out}/")
