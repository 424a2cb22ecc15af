"""qkv-course: write a ready nbgrader course for the attention-head assignment.

    qkv-course COURSE                   # COURSE/nbgrader_config.py, qkv_course.json, source/ps1/
    qkv-course COURSE --assignment hw3  # another assignment name
    qkv-course COURSE --seed 12345      # fix the hidden cases' seed of a new course yourself

The source notebook is the "nbgrader" variant of the single source (see `release.py`), written
beside the files its check cells read. `qkv_course.json` holds the seed of the hidden cases and
the course's grading key (keys.py), so that the in-kernel hook (`nbgrader_hook.py`) and the trusted grading (`qkv-grade --nbgrader`,
`nbgrader_trusted.py`) try the same cases; both find it by walking up from where they run.

This module also holds what those two share about a course: where its files are, its seed and key,
and what to say of an assignment name it does not have.
"""
from __future__ import annotations

import difflib
import json
import re
import secrets
import sys
from pathlib import Path

from . import keys
from .console import MAX_SEED, OneLineParser, seed_option

NOTEBOOK = "attention_head.ipynb"
COURSE_FILE = "qkv_course.json"
CONFIG_FILE = "nbgrader_config.py"
DEFAULT_ASSIGNMENT = "ps1"
DEFAULT_SEED = 0  # only for a notebook run outside any course (no qkv_course.json above it)
ASSIGNMENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

CONFIG = '''\
"""nbgrader's settings for this course, written by qkv-course. Edit freely."""
import os

c = get_config()  # noqa: F821 (nbgrader defines it while it reads this file)

# The course is the folder holding this file, so the commands work from here without flags.
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = {course_id!r}

# What students and graders read: no hidden-test line or score echo in autograded notebooks,
# formgrader or the feedback, step names in the feedback's contents, every line wrapped.
from autograder.nbgrader_feedback import configure  # noqa: E402

configure(c)

# grades.csv (nbgrader export) with every score to two places, as the feedback and formgrader show it.
c.ExportApp.plugin_class = "autograder.nbgrader_export.RoundedCsvExport"

# nbgrader collect copies a student's links as links, never the file one names (the source
# notebook, a classmate's, the course's key): qkv-grade --nbgrader grades no linked notebook.
c.ExchangeFactory.collect = "autograder.nbgrader_exchange.LinkSafeCollect"
'''

class CourseError(Exception):
    """The course cannot be written or read; the message says why."""


# --- what the hook and the trusted grading share -----------------------------------------------

def find_course(start: Path) -> Path | None:
    """The course folder at or above `start`: the first one holding qkv_course.json."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / COURSE_FILE).is_file():
            return folder
    return None


def course_seed(course: Path | None) -> int:
    """The seed of the course's hidden cases (DEFAULT_SEED outside a course)."""
    if course is None:
        return DEFAULT_SEED
    try:
        seed = json.loads((course / COURSE_FILE).read_text(encoding="utf-8"))["seed"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CourseError(f"{course / COURSE_FILE} holds no seed ({exc})") from None
    if type(seed) is not int or not 0 <= seed < MAX_SEED:
        raise CourseError(f"{course / COURSE_FILE}: the seed must be a whole number from 0 to 2**63 - 1")
    return seed


def _own_key() -> str:
    """The key a new course keeps: this user's, so that `qkv-grade --seed` on the course's notebooks
    reproduces its grades here; other machines grading the course read it from the course."""
    try:
        return keys.local_key().hex()
    except keys.CaseKeyError as exc:
        raise CourseError(str(exc)) from None


def course_key(course: Path | None) -> bytes:
    """The grading key of the course's hidden cases: its own, kept in qkv_course.json beside the
    seed, where no submission is copied; this user's key for a course written without one."""
    if course is None:
        return keys.local_key()
    try:
        settings = json.loads((course / COURSE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CourseError(f"{course / COURSE_FILE} cannot be read ({exc})") from None
    if not isinstance(settings, dict) or "key" not in settings:
        return keys.local_key()
    try:
        return keys.parse_key(settings["key"], str(course / COURSE_FILE))
    except keys.CaseKeyError as exc:
        raise CourseError(str(exc)) from None


def assignments_in(course: Path, source_directory: str = "source") -> list[str]:
    """The assignments the course has a source folder for, sorted by name."""
    try:
        return sorted(entry.name for entry in (course / source_directory).iterdir()
                      if entry.is_dir() and not entry.name.startswith("."))
    except OSError:
        return []


def close_assignment(assignment: str, known) -> str | None:
    """The one of `known` that `assignment` most likely misspells, or None when none is close."""
    close = difflib.get_close_matches(assignment, [name for name in known if name != assignment], n=1)
    return close[0] if close else None


def unknown_assignment(course: Path, assignment: str, generated, source_directory: str = "source") -> str:
    """Why `course` cannot grade an assignment its gradebook lacks (`generated` are those it has),
    in one line: the name it most likely misspells, or the commands that make it."""
    sources = assignments_in(course, source_directory)
    generate = f"`nbgrader generate_assignment {assignment}`"
    if assignment in sources:
        return f"assignment {assignment!r} is not generated yet: run {generate} in the course first"
    known = sorted({*generated, *sources})
    close = close_assignment(assignment, known)
    if close is None:
        has = f" (it has {', '.join(known)})" if known else ""
        return (f"the course has no assignment {assignment!r}{has}: write it with `qkv-course {course} "
                f"--assignment {assignment}`, then run {generate} in the course")
    if close in generated:
        return f"the course has no assignment {assignment!r}; did you mean {close!r}?"
    return (f"the course has no assignment {assignment!r}; did you mean {close!r}? "
            f"(run `nbgrader generate_assignment {close}` in the course first)")


# --- writing a course ---------------------------------------------------------------------------

def source_files() -> dict[str, bytes]:
    """source/<assignment>/: the nbgrader variant of the notebook and the files it reads."""
    from .release import BESIDE_NOTEBOOK, build_release, notebook_cells, notebook_text, Sources

    sources = Sources.read()
    release = build_release(sources)
    files = {NOTEBOOK: notebook_text(notebook_cells("nbgrader", sources)).encode("utf-8")}
    files.update({name: release[name] for name in BESIDE_NOTEBOOK})
    return files


def _write_private(path: Path, text: str) -> None:
    """Write `path` readable by its owner alone, as the grading key in ~/.config is: the key and
    the seed give every hidden case, and a course folder on a shared machine may be in students'
    reach. Written whole, through a rename, so rights set once apply to every byte."""
    from .store import write_atomically

    write_atomically(path, text, mode=0o600)


def write_course(course: Path, assignment: str = DEFAULT_ASSIGNMENT, seed: int | None = None,
                 force: bool = False) -> list[str]:
    """Write (or add an assignment to) a course; returns what it did, one line per file."""
    if not ASSIGNMENT_NAME.match(assignment):
        raise CourseError(f"{assignment!r} is not a usable assignment name "
                          f"(letters, digits, '_', '.' and '-')")
    from .store import course_problem

    problem = course_problem(course, CONFIG_FILE)
    if problem is not None:
        raise CourseError(f"{problem}: someone else could change the course's {CONFIG_FILE}, which nbgrader "
                          f"runs as Python, or its key; make it yours (chown, chmod o-w) or name another folder")
    folder = course / "source" / assignment
    if folder.exists() and not force:
        raise CourseError(f"{folder} already exists; pass --force to regenerate it")
    files = source_files()
    done = []
    close = None if folder.exists() else close_assignment(assignment, assignments_in(course))
    if not course.exists():
        # only its owner: the gradebook, every student's submission, grades and feedback lie below
        course.mkdir(parents=True, mode=0o700)
        done.append(f"made {course} (only you may read it; nbgrader's exchange is a folder of its own)")
    config = course / CONFIG_FILE
    if not config.exists():
        config.write_text(CONFIG.format(course_id=course.resolve().name), encoding="utf-8")
        done.append(f"wrote {config}")
    elif "nbgrader_exchange.LinkSafeCollect" not in config.read_text(encoding="utf-8", errors="replace"):
        done.append(f"{config} predates a setting: add `c.ExchangeFactory.collect = "
                    f"\"autograder.nbgrader_exchange.LinkSafeCollect\"` to it, so that nbgrader collect "
                    f"copies a student's links as links rather than the files they name")
    settings = course / COURSE_FILE
    if settings.exists():
        kept = course_seed(course)
        if seed is not None and seed != kept:
            raise CourseError(f"{settings} already fixes the seed {kept}; the hidden cases of a "
                              f"course never change (drop --seed)")
        kept_settings = json.loads(settings.read_text(encoding="utf-8"))
        if isinstance(kept_settings, dict) and "key" not in kept_settings:
            _write_private(settings, json.dumps({**kept_settings, "key": _own_key()}, indent=1) + "\n")
            done.append(f"kept {settings} (seed {kept}) and gave the course its grading key")
        else:
            done.append(f"kept {settings} (seed {kept})")
    else:
        seed = seed if seed is not None else secrets.randbelow(2**31)
        _write_private(settings, json.dumps({"seed": seed, "key": _own_key()}, indent=1) + "\n")
        done.append(f"wrote {settings} (seed {seed}, and the course's grading key)")
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (folder / name).write_bytes(content)
    done.append(f"wrote {folder}/ ({', '.join(files)})")
    if close is not None:  # a new assignment named like one the course has: perhaps a typo
        done.append(f"the course also has {close!r}: if you meant that one, delete {folder} and rerun "
                    f"with --assignment {close}")
    return done


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="qkv-course",
        description="Write an nbgrader course for the Chapter 15 attention-head assignment: its "
                    "nbgrader_config.py, the seed of its hidden cases and source/<assignment>/.")
    parser.add_argument("course", type=Path, help="the course folder (created if missing)")
    parser.add_argument("--assignment", default=DEFAULT_ASSIGNMENT,
                        help="the assignment's name in nbgrader (default: %(default)s)")
    parser.add_argument("--seed", type=seed_option, default=None,
                        help="seed of the hidden cases, fixed for the course's life "
                             "(default: a fresh one)")
    parser.add_argument("--force", action="store_true",
                        help="regenerate source/<assignment>/ when it exists")
    args = parser.parse_args(argv)
    from .release import ReleaseError

    try:
        done = write_course(args.course, args.assignment, args.seed, args.force)
    except (CourseError, ReleaseError) as error:
        print(f"qkv-course: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a read-only or full disk: nothing half-written is left to trust
        print(f"qkv-course: error: cannot write {error.filename or args.course} ({error.strerror})",
              file=sys.stderr)
        return 3
    print("\n".join(f"qkv-course: {line}" for line in done))
    print(f"Next, in {args.course}: nbgrader generate_assignment {args.assignment}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
