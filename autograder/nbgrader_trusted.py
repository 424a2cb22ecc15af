"""qkv-grade --nbgrader COURSE ASSIGNMENT: the grades of an nbgrader course that can be trusted.

`nbgrader autograde` runs the hidden tests in the student's own kernel, so a submission can patch
numpy or plant a fake grading module and collect full marks, and a cell that kills its kernel
leaves the whole notebook ungraded. This command grades every submitted notebook
(`submitted/<student>/<assignment>/attention_head.ipynb`) in the isolated runner instead, with the
course's seed, and then, through nbgrader's own API:

- writes each step's score into the gradebook as the auto score of that step's check cell (a
  grader's manual override is kept and flagged for review, as nbgrader does), so formgrader,
  manual grading of the written answers, `nbgrader export` and `nbgrader generate_feedback` all
  use these scores;
- makes `autograded/<student>/<assignment>/` what autograde's copy steps would make of the
  submission graded (its files, timestamp.txt included, then the source's), with the notebook
  made from it by nbgrader's own sanitizing steps and each step's feedback in the output of its
  check cell, and no other output (student code that ran in autograde's kernel could have printed
  anything, hidden cases included), whether autograde ran or not, so the feedback describes the
  submission the gradebook scores, after any resubmission;
- reports every notebook whose in-kernel result differs from the trusted one, and every notebook
  with no in-kernel result.

What a student hands in is read as their work and nothing else. nbgrader's copy steps put every
file of `submitted/<student>/<assignment>/` into `autograded/`, and a notebook's metadata and
outputs are the student's too, so none of them is ever taken as a result: the grader keeps its own
state (folders being built, and what it recorded for each student) in STATE_FOLDER of the course,
which no nbgrader step copies into or out of; the in-kernel scores compared are the ones
`nbgrader autograde` wrote into the gradebook; each autograded notebook is rebuilt from the
submission by nbgrader's own sanitizing steps, with only this grader's feedback and the heatmap's
checked picture as outputs; and the written answers' records follow the gradebook's cells. A
student file that cannot be read (a notebook that is not JSON, a timestamp.txt no date fits) costs
that student alone, with one line saying why.

A notebook cell that exits ends only itself (the runner runs notebooks cell by cell), so a notebook that
killed its kernel is graded on every step its code reaches.
"""
from __future__ import annotations

import argparse
import errno
import hashlib
import itertools
import json
import logging
import os
import re
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .results import SubmissionResult

from .nbgrader_course import COURSE_FILE, CONFIG_FILE, NOTEBOOK, CourseError, course_key, course_seed
from .store import write_atomically
from .submission import MOST_ENTRIES, cell_grade_id

NOTEBOOK_ID = Path(NOTEBOOK).stem
TOLERANCE = 0.005  # scores are kept to two decimals
READ_ONLY = 0o444  # what nbgrader autograde leaves on an autograded notebook
LOCK_FILE = ".qkv-grade.lock"
# The grader's own state, in the course folder: nbgrader copies source/ to release/, exchange to
# submitted/ and submitted/ to autograded/, never this folder, so nothing a student hands in
# lands here. Per assignment: pending/<key>/ and pending/<key>.json (a student's whole autograded
# folder, built by a run, and its record, until it is put in place after the gradebook's commit),
# and <key>.json (each student's last recorded run), where <key> is a digest of the student id
# (any id makes a file name of the same length). The state folder must be on the file system of
# autograded/, so that a built folder is put in place by a rename.
STATE_FOLDER = ".qkv-grade"


@dataclass
class Graded:
    """One student's notebook: the trusted result and what the in-kernel run said."""

    student: str
    path: Path
    result: "SubmissionResult"
    """What the isolated grading found."""
    in_kernel: dict[str, float] | None
    """Step id -> the in-kernel score, from the gradebook autograde wrote, or None when there is
    no in-kernel result."""
    feedback_notebook: str
    """What happened to the autograded notebook: "updated", "written" or why not."""
    notes: list[str] | None = None
    """One line each on the student's files that could not be read (graded all the same)."""
    notebook: object = None
    """The submission as it was graded: made as autograde makes it (see `_as_autograde_runs`)."""
    built: dict | None = None
    """What its autograded folder, built aside, holds (see `update_autograded`)."""

    @property
    def differences(self) -> list[str]:
        if self.in_kernel is None:
            return []
        return [f"{step.id} {self.in_kernel.get(step.id, 0.0):g} -> {step.score:g}"
                for step in self.result.steps
                if abs(self.in_kernel.get(step.id, 0.0) - step.score) > TOLERANCE]


class TrustedError(Exception):
    """The course cannot be graded; the message says why."""


# --- the course, as nbgrader sees it ------------------------------------------------------------

def course_directory(course: Path):
    """nbgrader's CourseDirectory for the course, read from its nbgrader_config.py."""
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import ConfigFileNotFound, PyFileConfigLoader

    from .store import course_problem

    problem = course_problem(course, CONFIG_FILE)  # its nbgrader_config.py is about to run, as Python
    if problem is not None:
        raise TrustedError(f"{problem}: someone else could change the course's {CONFIG_FILE}, which nbgrader "
                           f"runs as Python, or where its grades are written; make it yours (chown, chmod o-w)")
    try:
        config = PyFileConfigLoader(CONFIG_FILE, path=str(course)).load_config()
    except ConfigFileNotFound:
        raise TrustedError(f"{course} has no {CONFIG_FILE}: is it an nbgrader course? "
                           f"(qkv-course writes one)") from None
    coursedir = CourseDirectory(config=config)
    coursedir.root = str(course.resolve())
    return coursedir, config


def step_cells(coursedir, assignment: str) -> dict[str, str]:
    """Step id -> grade id of its check cell, for the steps the gradebook knows."""
    from nbgrader.api import Gradebook, MissingEntry

    from .release import check_cell_id
    from .steps import STEPS

    with Gradebook(coursedir.db_url) as gradebook:
        try:
            notebook = gradebook.find_notebook(NOTEBOOK_ID, assignment)
        except MissingEntry:
            generated = [row.name for row in gradebook.assignments]
            if assignment not in generated:  # a misspelt name, or one never generated
                from .nbgrader_course import unknown_assignment

                raise TrustedError(unknown_assignment(Path(coursedir.root), assignment, generated,
                                                      coursedir.source_directory)) from None
            raise TrustedError(f"the gradebook has no notebook {NOTEBOOK_ID} in assignment "
                               f"{assignment!r}: run `nbgrader generate_assignment {assignment}` "
                               f"in the course first") from None
        known = {cell.name for cell in notebook.grade_cells}
    cells = {step.id: check_cell_id(step.id) for step in STEPS if check_cell_id(step.id) in known}
    if not cells:
        raise TrustedError(f"assignment {assignment!r} has no check cells of this package's steps")
    return cells


def odd_name(name: str) -> str:
    """Why a name a student chose (their folder's, which is their id, or a file's) cannot be passed
    on to nbgrader as it is, or "" when it can: nbgrader's gradebook holds only UTF-8 text (SQLite
    refuses the rest), nbgrader's own commands print names raw in their logs, where a control
    character would drive the terminal of whoever reads them, and formgrader puts a student's id
    into its pages unescaped (the grading view's bar, Manage Students), where markup would run as
    the grader's own script."""
    from .results import printable

    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "is not UTF-8 text, which nbgrader's gradebook cannot hold"
    if printable(name, one_line=True) != name:
        return "holds control characters or invisible marks, which nbgrader's commands print raw"
    if set(name) & set(HTML_MARKS):
        return f"holds HTML markup ({' '.join(sorted(set(name) & set(HTML_MARKS)))}), which formgrader's pages show unescaped"
    return ""


HTML_MARKS = "<>&\"'`"
"""Characters of HTML markup: no id a JupyterHub gives holds one."""


def submissions(coursedir, assignment: str) -> tuple[list[tuple[Path, str]], list[tuple[str, str]]]:
    """(notebook path, student id) for every submission, sorted by student (an assignment folder
    without the notebook too: see `unsubmitted`); and (student id, why) for every student who
    handed the assignment in and is not graded: their id is one nbgrader cannot take (`odd_name`).

    No symbolic link is followed: a student folder, assignment folder or notebook that is a link
    is still that student's submission, which reading then finds unreadable.
    """
    pattern = Path(coursedir.format_path(coursedir.submitted_directory, "*", assignment))
    submitted = pattern.parent.parent
    found, missing = [], []
    try:
        entries = sorted(os.scandir(submitted), key=lambda entry: entry.name)
    except FileNotFoundError:
        return [], []
    for entry in entries:
        if entry.name.startswith("."):
            continue
        notebook = Path(entry.path) / pattern.name / NOTEBOOK
        handed_in = entry.is_symlink() or entry.is_dir(follow_symlinks=False) and os.path.lexists(notebook.parent)
        if handed_in and (odd := odd_name(entry.name)):
            missing.append((entry.name, f"the folder's name {odd}: rename the folder to grade it"))
        elif handed_in:
            # the latest thing handed in is what is graded, notebook or not: an assignment "folder"
            # that is a file, or one without the notebook, is graded as nothing (`unsubmitted`
            # says why), and the earlier submission's grade and autograded notebook go
            found.append((notebook, entry.name))
    return found, missing


def unsubmitted(notebook: Path) -> str | None:
    """Why an assignment's handed-in folder holds no notebook to grade: it is no folder, or it
    holds none of that name; None where there is one (or a link, which reading then refuses)."""
    folder = notebook.parent
    if os.path.islink(folder.parent) or os.path.islink(folder) or os.path.lexists(notebook):
        return None
    if not folder.is_dir():
        return f"its {folder.name} is not a folder"
    try:  # named from the first entries of a folder the student filled, never read whole
        with os.scandir(folder) as listing:
            others = sorted(other.name for other in itertools.islice(listing, MOST_ENTRIES)
                            if other.name.endswith(".ipynb"))
    except OSError:
        others = []
    return (f"its {folder.name} folder holds no {NOTEBOOK}"
            + (f" (only {', '.join(others[:3])}: rename the one to grade)" if others else ""))


# --- grading ------------------------------------------------------------------------------------

def _key(student: str) -> str:
    return hashlib.sha256(student.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def state_folder(coursedir, assignment: str) -> Path:
    return Path(coursedir.root) / STATE_FOLDER / assignment


def _read_record(path: Path) -> dict | None:
    """A record this grader wrote (see STATE_FOLDER), or None where there is none of that shape."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not (isinstance(record, dict) and isinstance(record.get("student"), str)
            and isinstance(record.get("sha256"), str) and isinstance(record.get("trusted_scores"), dict)):
        return None
    return record


def _digest(path: Path) -> str | None:
    """The SHA-256 of the regular file at `path` (never through a link), None without one."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        import stat

        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None
        digest = hashlib.sha256()
        while chunk := os.read(descriptor, 1 << 20):
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(descriptor)


def in_kernel_results(coursedir, assignment: str, step_ids: dict[str, str],
                      students: list[str], sanitized: dict | None = None) -> dict[str, dict[str, float] | None]:
    """Student -> what `nbgrader autograde` gave each step, or None when it has no result.

    Read from the gradebook, where autograde saved it, never from a notebook (whose metadata and
    outputs are the student's). Once this grader has recorded a student, the gradebook holds the
    trusted scores: while the autograded notebook is still the one it wrote (same digest), the
    in-kernel scores are those it kept then; a notebook it did not write is autograde's since,
    whose scores the gradebook holds now. No autograded notebook, or one of other code than the
    submission's (`sanitized`, by student: the student handed in again since): no in-kernel result.
    """
    from nbgrader.api import Gradebook, MissingEntry

    found: dict[str, dict[str, float] | None] = {}
    state = state_folder(coursedir, assignment)
    with Gradebook(coursedir.db_url) as gradebook:
        for student in students:
            digest = _digest(_autograded_path(coursedir, assignment, student))
            record = _read_record(state / f"{_key(student)}.json")
            if digest is None or (sanitized is not None and
                                  _autograded_cells(coursedir, assignment, student, sanitized.get(student)) is None):
                found[student] = None
            elif record is not None and record["student"] == student and record["sha256"] == digest:
                kept = record.get("in_kernel")
                found[student] = ({step: float(kept[step]) for step in step_ids if step in kept}
                                  if isinstance(kept, dict) else None)
            else:
                try:
                    scores = {step: gradebook.find_grade(grade_id, NOTEBOOK_ID, assignment, student).auto_score
                              for step, grade_id in step_ids.items()}
                except MissingEntry:
                    scores = {}
                found[student] = ({step: float(score or 0.0) for step, score in scores.items()}
                                  if any(score is not None for score in scores.values()) else None)
    return found


def _code(cells) -> list[tuple[str, str]] | None:
    """What a notebook's cells say, as a person reads them: each cell's type and source (a check
    cell's hidden lines, which only the gradebook's copy holds, left out); None if unreadable."""
    from .nbgrader_feedback import without_hidden

    try:
        code = []
        for cell in cells:
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else source
            code.append((cell.get("cell_type"), without_hidden(source)))
        return code
    except (AttributeError, TypeError):
        return None


def _autograded_cells(coursedir, assignment: str, student: str, notebook) -> list | None:
    """The cells of the student's autograded notebook, read as JSON (never through nbformat, never
    through a link, within the intake's budgets), if it holds the same code as `notebook`, the
    submission as graded now; None if it does not (it was made from an earlier submission) or
    cannot be read."""
    from .submission import SubmissionError

    if notebook is None:
        return None
    path = _autograded_path(coursedir, assignment, student)
    try:
        cells = _document(path, f"{student}/{path.parent.name}/{path.name}").get("cells")
        cells = [cell for cell in cells if isinstance(cell, dict)]
    except (SubmissionError, ValueError, AttributeError, TypeError, OSError):
        return None
    code = _code(cells)
    return cells if code is not None and code == _code(notebook.cells) else None


def _quiet_log() -> logging.Logger:
    """nbgrader's own steps warn about every hidden-test cell's checksum; keep their errors only
    (written by the handler `route_logging` puts in place)."""
    log = logging.getLogger("qkv-grade.nbgrader")
    log.setLevel(logging.ERROR)
    return log


MOST_LOG_CHARACTERS = 2_000
"""Of one log record of the libraries the command drives, what is written at most: nbgrader's
metadata check logs its whole traceback, which quotes a student's cell."""


class PrintableLog(logging.StreamHandler):
    """Writes a log record as a terminal may show it: its text escaped where a character would act
    rather than show (a student's escape sequences), at most MOST_LOG_CHARACTERS of it, and each
    line after its first indented, so that no line of it passes for one of the command's own."""

    def format(self, record: logging.LogRecord) -> str:
        from .results import printable

        text = super().format(record)
        shown = printable(text[:MOST_LOG_CHARACTERS])
        if len(text) > MOST_LOG_CHARACTERS or len(shown) > MOST_LOG_CHARACTERS:  # escapes lengthen it
            shown = shown[:MOST_LOG_CHARACTERS] + "…"
        return shown.rstrip("\n").replace("\n", "\n    ")


def route_logging() -> None:
    """Write every log record of the libraries this command drives (nbgrader's steps, traitlets,
    SQLAlchemy) and every warning Python would print, warnings and worse, through `PrintableLog`
    on stderr: before, they reached stderr raw, escape sequences, line breaks and all."""
    handler = PrintableLog(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s (%(name)s): %(message)s"))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(logging.WARNING)
    logging.captureWarnings(True)


def _resources(coursedir, assignment: str, student: str) -> dict:
    return {"nbgrader": {"notebook": NOTEBOOK_ID, "assignment": assignment, "student": student,
                         "db_url": coursedir.db_url}}


def _sanitized(path: Path, coursedir, config, assignment: str, student: str):
    """The submission as `nbgrader autograde` prepares it, before it would run it."""
    from nbgrader.preprocessors import (CheckCellMetadata, ClearOutput, DeduplicateIds,
                                        OverwriteCells, OverwriteKernelspec)

    # The bytes graded, read as grading read them (never through a link, within the intake's
    # budgets), and only in the shape nbformat 4 allows: metadata of an unexpected shape, or
    # metadata that would hide a cell's source from a person, is gone before nbgrader's steps.
    notebook = _inert_notebook(path, f"{student}/{path.parent.name}/{path.name}")
    marked = _source_marks(notebook, config)
    if marked:
        raise ValueError(f"it holds the source notebook's `{marked}` marks, which a released notebook never "
                         f"does: a copy of the instructor's notebook, not the student's")
    resources = _resources(coursedir, assignment, student)
    for step in (ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata):
        notebook, resources = step(config=config, log=_quiet_log()).preprocess(notebook, resources)
    for cell in notebook.cells:  # a task cell whose grade id the source does not know, which OverwriteCells took away
        if "nbgrader" in cell.metadata and not _named_cell(cell.metadata["nbgrader"]):
            del cell.metadata["nbgrader"]
    return notebook


def _source_marks(notebook, config) -> str:
    """The first of nbgrader's solution, hidden-test and mark-scheme marks that a cell of
    `notebook` holds on a line of its own ("" for none). `nbgrader generate_assignment` takes them
    all out of what it releases; only the course's source notebook (or a copy of it) holds them."""
    marks = [config[section].get(name, default) for section, name, default in (
        ("ClearSolutions", "begin_solution_delimeter", "BEGIN SOLUTION"),
        ("ClearHiddenTests", "begin_test_delimeter", "BEGIN HIDDEN TESTS"),
        ("ClearMarkScheme", "begin_mark_scheme_delimeter", "BEGIN MARK SCHEME"))]
    marks = {str(mark): str(mark) for mark in marks}
    for cell in notebook.cells:
        source = cell.get("source", "") if isinstance(cell.get("source"), str) else ""
        if not any(mark in source for mark in marks):
            continue
        for line in source.split("\n"):  # a line at a time, in time linear in its length: never a
            found = marks.get(_inner(line))  # pattern that runs on past a line's end over the next ones
            if found:
                return found
    return ""


def _inner(line: str) -> str:
    """`line` without the characters other than letters, digits and `_` at either end (what `\\W*`
    takes there), found in one pass from each end."""
    start, end = 0, len(line)
    while start < end and not (line[start].isalnum() or line[start] == "_"):
        start += 1
    while end > start and not (line[end - 1].isalnum() or line[end - 1] == "_"):
        end -= 1
    return line[start:end]


def _as_autograde_runs(coursedir, config, assignment: str, students: dict[Path, str], kept: dict):
    """The loader of a course's submissions: the notebook read under the intake's budgets, then
    made as `nbgrader autograde` makes it before it runs it (locked and test cells as the source
    has them), so that what is graded is exactly what formgrader and the feedback show. Each
    sanitized notebook is kept in `kept`, by student, to be written into autograded/."""
    import nbformat

    from .results import clipped
    from .submission import Submission, SubmissionError, load, notebook_cells, shown_name

    def loader(path: Path, name: str) -> Submission:
        why = unsubmitted(path)
        if why:
            raise SubmissionError(f"{shown_name(name)}: {why}")
        load(path, name)  # the budgets, before nbformat and nbgrader read a byte of it
        student = students[path]
        try:
            notebook = _sanitized(path, coursedir, config, assignment, student)
            text = nbformat.writes(notebook)
        except Exception as error:  # nbgrader's own refusal: that student's, in one line
            # which may quote a value of the student's whole: a few hundred characters of it
            reason = clipped(str(error)) or type(error).__name__
            raise SubmissionError(f"{name}: nbgrader cannot take it as this assignment's notebook ({reason})") from None
        kept[student] = notebook
        numbered = notebook_cells(text, Path(name), numbered=True)
        return Submission(path, shown_name(name), tuple(code for _, code in numbered), True,
                          tuple(number for number, _ in numbered))

    return loader


def _document(path: Path, name: str) -> dict:
    """A notebook file's JSON, read without following a link and within the intake's budgets
    (bytes, values, nesting), before json.loads builds a thing."""
    import json

    from .submission import prescan, read_bytes

    data = read_bytes(path, name)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    prescan(data, Path(name))
    document = json.loads(data.decode("utf-8"))
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    return document


# The cell metadata kept: never what hides a cell's source from a person in nbconvert's pages or in
# JupyterLab (`transient.remove_source`, `jupyter.source_hidden`, `hide_input`, …).
_CELL_METADATA = {"nbgrader": dict, "qkv": dict, "tags": list, "editable": bool, "deletable": bool}
_CELL_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
# A tag is a word: nbconvert writes each into the cell's class attribute, where `x hidden` would hide
# a cell from every page and `alert navbar-fixed-top` dress it as the page's own banner.
_TAG = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _kept_metadata(metadata) -> dict:
    """Of a cell's metadata, what the rebuild keeps (_CELL_METADATA, tags that are words)."""
    metadata = metadata if isinstance(metadata, dict) else {}
    metadata = {key: value for key, value in metadata.items()
                if key in _CELL_METADATA and isinstance(value, _CELL_METADATA[key])}
    if "tags" in metadata:
        metadata["tags"] = [tag for tag in metadata["tags"] if isinstance(tag, str) and _TAG.fullmatch(tag)]
    if "nbgrader" in metadata and not _named_cell(metadata["nbgrader"]):
        del metadata["nbgrader"]  # nbgrader's later steps read every such cell's grade id
    return metadata


def _named_cell(nbgrader: dict) -> bool:
    """Does a cell's nbgrader metadata name a cell by a grade id? nbgrader's autograde, feedback
    and formgrader read `grade_id` of every cell marked a grade, solution or task cell, and fail
    for the whole class on one that has none."""
    return isinstance(nbgrader.get("grade_id"), str) and bool(_CELL_ID.fullmatch(nbgrader["grade_id"]))


MOST_CELLS = 1_000
"""Cells a notebook may hold (the release has some forty): formgrader renders a notebook in the
Jupyter server's only thread, and 25 000 one-letter cells, within every other budget, held it for
some 18 seconds a view."""


def _inert_notebook(path: Path, name: str):
    """The notebook at `path` rebuilt from what nbgrader and the pages need of it: each cell's type,
    id, source, the metadata nbgrader and the grader read, and the pictures a markdown cell refers
    to (`kept_attachments`); no output, no other key. So it is valid nbformat 4 whatever was handed in,
    and nbformat's validation, which nbgrader and the pages run on it again, stays cheap: its
    search for what is wrong in an invalid notebook can take minutes on a few hundred kilobytes."""
    import nbformat

    from .nbgrader_feedback import kept_attachments, shown_as_text

    document = _document(path, name)
    if document.get("nbformat") in (1, 2, 3) and not isinstance(document.get("nbformat"), bool):
        document = _converted(document)
    elif document.get("nbformat") != 4:
        raise ValueError(f"an nbformat {document.get('nbformat')!r} notebook, not nbformat 1 to 4")
    handed = document.get("cells", [])
    if isinstance(handed, list) and len(handed) > MOST_CELLS:
        # every cell costs formgrader and the feedback page their share of a render, whatever its size
        raise ValueError(f"{len(handed)} cells, more than the {MOST_CELLS} a notebook of this assignment may hold")
    cells = []
    for index, cell in enumerate(c for c in document.get("cells", []) if isinstance(c, dict)):
        kind = cell.get("cell_type")
        if kind not in ("code", "markdown", "raw"):
            continue
        source = cell.get("source", "")
        source = "".join(part for part in source if isinstance(part, str)) if isinstance(source, list) else source
        source = source if isinstance(source, str) else ""
        metadata = _kept_metadata(cell.get("metadata"))
        if kind == "raw":  # the release has none: a student's, shown as text, and nothing nbgrader grades
            # nbconvert puts a raw cell's HTML into the page as it stands (ids, classes and all, past
            # the markdown cleaner), where an element with a grade's id takes that grade's place
            kind, source, metadata = "markdown", shown_as_text(source), {}
        identifier = cell.get("id")
        rebuilt = {"cell_type": kind, "metadata": metadata, "source": source,
                   "id": identifier if isinstance(identifier, str) and _CELL_ID.fullmatch(identifier)
                   else f"cell-{index}"}
        if kind == "code":
            rebuilt.update(outputs=[], execution_count=None)
        attachments = kept_attachments(source, cell.get("attachments")) if kind == "markdown" else {}
        if attachments:
            rebuilt["attachments"] = attachments
        cells.append(rebuilt)
    return nbformat.from_dict({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells})


# What an older notebook's cell may hold that its conversion reads: its text (`input` or `code` of
# code, `source` or `text` of the rest), a heading's level, and its metadata.
_OLDER_TEXT = ("input", "code", "source", "text")


def _converted(document: dict):
    """An nbformat 1 to 3 notebook as nbformat 4, converted by nbformat as nbgrader converts it
    (nbformat.read with as_version=4), once cut down to each cell's type, text, heading level and
    the metadata the rebuild keeps, each of the shape the old format allows: the conversion and
    its validation then cost what the text costs, whatever else the file holds. Raises ValueError
    where there is no list of cells."""
    import json

    import nbformat

    sheets = document["worksheets"] if "worksheets" in document else [document]  # nbformat 1: no worksheets
    if not isinstance(sheets, list) or not all(isinstance(sheet, dict) and isinstance(sheet.get("cells"), list)
                                               for sheet in sheets):
        raise ValueError("an older notebook without a list of cells")
    cells = []
    for cell in (cell for sheet in sheets for cell in sheet["cells"] if isinstance(cell, dict)):
        kept = {"cell_type": cell.get("cell_type"), "metadata": _kept_metadata(cell.get("metadata"))}
        for key in _OLDER_TEXT:
            text = cell.get(key)
            text = "".join(text) if isinstance(text, list) and all(isinstance(part, str) for part in text) else text
            if isinstance(text, str):
                kept[key] = text
        if kept["cell_type"] == "code":
            kept.update(outputs=[], language="python")
        elif kept["cell_type"] == "heading":
            level = cell.get("level")
            kept["level"] = level if isinstance(level, int) and not isinstance(level, bool) and 1 <= level <= 6 else 1
        elif kept["cell_type"] not in ("markdown", "raw", "text", "html"):
            continue
        cells.append(kept)
    reduced = {"nbformat": document["nbformat"], "nbformat_minor": 0, "metadata": {"name": ""}}
    if "worksheets" in document:
        reduced["worksheets"] = [{"cells": cells, "metadata": {}}]
    else:
        reduced["cells"] = cells
    return nbformat.reads(json.dumps(reduced), as_version=4, capture_validation_error={})


def _check_outputs(step) -> list:
    """A check cell's output: the step's feedback on stdout (its score is in the gradebook).

    What nbformat's new_output builds, without checking each output against the schema on its
    own: nbformat.write checks the whole notebook.
    """
    from nbformat import from_dict

    from .results import printable

    codes = f" [{', '.join(step.diagnoses)}]" if step.diagnoses else ""
    # escaped as every other view escapes it: a stream's carriage returns and ANSI codes are
    # rendered by nbconvert (a line drawn over another, "full marks" in green), and the feedback
    # quotes what the submission printed and raised on the chapter's example
    text = printable(f"{step.id}: {step.score:g} / {step.max_score:g}, {step.status}{codes}\n{step.feedback}\n")
    return [from_dict({"output_type": "stream", "name": "stdout", "text": text})]


def _pictures(coursedir, assignment: str, student: str, notebook) -> list:
    """The heatmap's pictures as autograde's kernel drew them, each checked to be a PNG and kept
    alone (no text, HTML or script beside it); none without an autograded notebook of the same
    code as `notebook` (the submission as graded now), so no picture of an earlier submission's
    code is shown beside a later one."""
    from .nbgrader_feedback import PLOT_CELL, pictures

    cells = _autograded_cells(coursedir, assignment, student, notebook)
    cell = next((cell for cell in cells or [] if cell.get("id") == PLOT_CELL), None)
    try:
        return pictures(cell.get("outputs")) if cell is not None and cell.get("cell_type") == "code" else []
    except (ValueError, AttributeError, TypeError):
        return []


COPIED_FILES = 200
COPIED_BYTES = 16 << 20
"""What of a student's own files is copied into autograded/ beside their notebook, at most: the
notebook needs none of them, and a folder of links to one large file would fill the disk."""


# What of a student's own files is copied into autograded/, from where `nbgrader generate_feedback`
# copies every file into the feedback folder it releases: text, data and pictures. Not a page a
# browser would run (.html, .xht, .svg, .atom and the rest), nor code Python would import: a kernel
# started for the autograded notebook (formgrader's "open live notebook") runs `python -m
# ipykernel_launcher` there, which imports a module of that name from the notebook's folder first,
# as the instructor. Nor anything else unknown.
COPIED_KINDS = (".txt", ".md", ".csv", ".tsv", ".json", ".npy", ".npz", ".png", ".jpg", ".jpeg", ".gif")
# The files nbgrader's own commands read beside the notebook, as they come from `nbgrader submit`:
# `release_feedback` opens both in the feedback folder for every student in turn (a folder so named
# ends it for the whole class) and prints the timestamp raw. Never copied as the student left
# them: `_nbgrader_files` writes them, checked.
NBGRADER_FILES = ("timestamp.txt", "submission_secret.txt")
SECRET = re.compile(r"[0-9A-Za-z]{1,512}")
"""A submission_secret.txt's text (`nbgrader submit` writes 128 hexadecimal digits)."""
# Nor anything below a folder named as nbgrader names what it reads and writes there:
# generate_feedback converts every `*.ipynb` it finds (a folder so named too), and writes the page
# `<notebook>.html`, failing where a folder of that name stands.
NBGRADER_NAMES = (".ipynb", ".html", ".htm")


def _copy_files(submitted: Path, source: Path, target: Path) -> int:
    """What autograde puts beside the notebook: the submission's files, then the source's; returns
    how many of the student's files were left out. Only the student's files of COPIED_KINDS are
    copied, none below a folder named like a notebook or a page (NBGRADER_NAMES), and none whose
    path holds a name nbgrader's logs would print raw or not as UTF-8 (`odd_name`).

    Only regular files are copied, each read without following a link; a linked file or folder
    is left behind (its target is never opened), and so are hidden folders, `__pycache__` and
    folders nested deeper than `submission.MAX_DEPTH`. Of the student's own files, at most
    COPIED_FILES files and COPIED_BYTES bytes are copied, and no file with another name (a hard link).
    """
    from .submission import SubmissionError, read_bytes, walk

    left_out = 0
    for folder, budgeted in ((submitted, True), (source, False)):
        count, size, files = 0, 0, []
        for seen, (entry, parts, problem) in enumerate(walk(folder)):
            if problem or not entry.is_file(follow_symlinks=False) or entry.name.endswith(".ipynb"):
                continue
            if budgeted and parts[0] in NBGRADER_FILES:
                continue  # written by `_nbgrader_files`, or not at all
            if budgeted and (not entry.name.lower().endswith(COPIED_KINDS)
                             or any(part.lower().endswith(NBGRADER_NAMES) or odd_name(part) for part in parts)):
                # a page of the student's making, say, which generate_feedback would publish; a file
                # the release ships (pytest.ini) is written from the source anyway
                left_out += not os.path.lexists(source / Path(*parts))
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if budgeted:
                if (count >= COPIED_FILES or size + info.st_size > COPIED_BYTES or info.st_nlink > 1
                        or seen > 10 * COPIED_FILES):
                    left_out += 1
                    if seen > 10 * COPIED_FILES:
                        break  # a folder of thousands: not walked to its end
                    continue
                count, size = count + 1, size + info.st_size
            # a file not everyone may read stays so (the course's key, collected through a link by
            # an older collect, is 0600 in submitted/): never made readable to all by the copy
            files.append((Path(entry.path), parts, 0o644 if info.st_mode & 0o004 else 0o600))
        for path, parts, mode in files:
            try:
                data = read_bytes(path, "/".join(parts))
            except SubmissionError:
                continue  # replaced by a link or a FIFO meanwhile: not copied
            try:
                (target / Path(*parts)).parent.mkdir(parents=True, exist_ok=True)
                write_atomically(target / Path(*parts), data, mode=mode)
            except (IsADirectoryError, NotADirectoryError, FileExistsError):
                pass  # a student's folder named as a file (its own, or the source's beside it): that
                # one file is not copied, which costs no one else's grade
            except OSError as error:
                if error.errno != errno.ENAMETOOLONG:  # a name one letter too long for autograded/
                    raise
    return left_out


def update_autograded(graded: Graded, coursedir, config, assignment: str, step_ids: dict[str, str],
                      seed: int):
    """Build the student's whole autograded folder from their submission, aside, in the grader's
    state folder (`_pending`): what autograde's copy steps put there (the submission's files,
    timestamp.txt included, then the source's) and the notebook with the trusted feedback. Returns
    the notebook (None when none was built, the reason in `graded.feedback_notebook`); what the
    folder holds is left in `graded.built`, for its record.

    The notebook is the submission as nbgrader's sanitizing steps make it, whether or not autograde
    ran: nothing of the student's notebook or of autograde's copy of it is kept but the source of
    its cells and, from an autograde run on the same code, the heatmap's checked pictures.
    """
    import nbformat

    from .nbgrader_feedback import PLOT_CELL, forget_reader_marks, reader_view

    if graded.result.error:
        graded.feedback_notebook = f"not written: {graded.result.error}"
        return None
    notebook = graded.notebook or _sanitized(graded.path, coursedir, config, assignment, graded.student)
    forget_reader_marks(notebook)
    pictures = _pictures(coursedir, assignment, graded.student, notebook)
    graded.feedback_notebook = ("updated" if os.path.lexists(_autograded_path(coursedir, assignment, graded.student))
                                else "written")
    folder = _pending(coursedir, assignment, graded.student)
    _remove(folder)
    folder.mkdir(parents=True)
    source = Path(coursedir.format_path(coursedir.source_directory, ".", assignment))
    left_out = _copy_files(graded.path.parent, source, folder)
    _nbgrader_files(graded, folder)
    if left_out:
        graded.notes = [*(graded.notes or []), f"{left_out} of the files beside the notebook not copied into "
                        f"autograded/ (code, text, data and pictures only, none in a folder named like a notebook "
                        f"or a page, no name with control characters: at most {COPIED_FILES} files and "
                        f"{COPIED_BYTES >> 20} MiB, no hard links)"]
    results = {step.id: step for step in graded.result.steps}
    steps_of = {grade_id: step for step, grade_id in step_ids.items()}
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        grade_id = cell_grade_id(cell)
        cell.outputs = (_check_outputs(results[steps_of[grade_id]]) if grade_id in steps_of
                        else pictures if cell.get("id") == PLOT_CELL else [])
        cell.execution_count = None
    reader_view(notebook)
    trusted_scores = {step.id: step.score for step in graded.result.steps}
    notebook.metadata["qkv"] = {"in_kernel": graded.in_kernel, "trusted_seed": seed,
                                "trusted_scores": trusted_scores}
    text = nbformat.writes(notebook).encode("utf-8")
    if os.path.lexists(folder / NOTEBOOK):  # a student's folder named like the notebook
        _remove(folder / NOTEBOOK)
    write_atomically(folder / NOTEBOOK, text)
    os.chmod(folder / NOTEBOOK, READ_ONLY)
    graded.built = {"sha256": hashlib.sha256(text).hexdigest(), "trusted_scores": trusted_scores,
                    "files": _contents(folder)}
    _sync_tree(folder)
    return notebook


def _nbgrader_files(graded: Graded, folder: Path) -> None:
    """timestamp.txt and submission_secret.txt in the autograded folder, where the submission has
    them, as nbgrader's commands read them there: each the student's own when it is a regular file
    that reads as `nbgrader submit` writes it (a date `_timestamp` reads; letters and digits); else
    a stand-in, so that `nbgrader release_feedback`, which opens both for every student in turn and
    prints the timestamp, goes on past this one. The stand-in timestamp is empty, which nbgrader
    reads as none; the stand-in secret a fresh one, under which the feedback is released where
    that student's `nbgrader fetch_feedback` cannot find it (noted: the timestamp has its own note).
    A submission with no secret at all (handed in past `nbgrader submit`) gets a fresh one too:
    release_feedback stopped at it, and every student after it got no feedback."""
    import secrets

    from .submission import SubmissionError, read_bytes

    for name in NBGRADER_FILES:
        path = graded.path.parent / name
        if not os.path.lexists(path):
            if name == "submission_secret.txt":  # handed in past `nbgrader submit` (a folder made by hand in
                write_atomically(folder / name, secrets.token_hex(64))  # inbound/): release_feedback opens one
            continue
        if name == "timestamp.txt":
            try:
                written = _read_timestamp(graded)[0]
            except Exception:  # already noted by `_timestamp`, as the gradebook's time
                written = ""
        else:
            try:
                text = read_bytes(path, f"{graded.student}/{path.parent.name}/{name}").decode("utf-8")
            except (SubmissionError, OSError, UnicodeDecodeError):
                text = None
            written = text if text is not None and SECRET.fullmatch(text) else secrets.token_hex(64)
            if written != text:
                graded.notes = [*(graded.notes or []), "submission_secret.txt is not what nbgrader submit "
                                "writes: the feedback is released under a fresh one, which this student's "
                                "nbgrader fetch_feedback cannot find"]
        write_atomically(folder / name, written)


def _contents(folder: Path) -> dict[str, str] | None:
    """Relative path -> SHA-256 of every file below `folder` (folders as "/"), never through a
    link (a link is listed by its target's name, "->target"); None if `folder` is not a folder."""
    if os.path.islink(folder) or not folder.is_dir():
        return None
    found: dict[str, str] = {}
    for here, folders, files in os.walk(folder):
        for name in folders + files:
            path = Path(here) / name
            relative = path.relative_to(folder).as_posix()
            if os.path.islink(path):
                found[relative] = "->" + os.readlink(path)
            elif name in folders:
                found[relative] = "/"
            else:
                found[relative] = _digest(path) or "?"
    return found


def _sync_tree(folder: Path) -> None:
    """Flush every folder below `folder` (its files were flushed as they were written), so the
    folder's record never outlives what it describes."""
    for here, _, _ in os.walk(folder):
        _sync_folder(Path(here))


def _remove(path: Path) -> None:
    """Remove whatever is at `path` (a folder and all below it, a file, a link), if anything."""
    import shutil

    if os.path.isdir(path) and not os.path.islink(path):
        def writable(function, name, _):  # a read-only folder in it, made by a kernel's code
            os.chmod(os.path.dirname(name), 0o700)
            function(name)

        shutil.rmtree(path, onerror=writable)
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


MAX_TIMESTAMP_BYTES = 200  # `nbgrader collect` writes some thirty


def _read_timestamp(graded: Graded) -> tuple:
    """(the text of the submission's `timestamp.txt`, the date it names), read as submissions are,
    never through a link; raises where it holds none (ValueError, or whatever a date parser raises
    on a student's text), or characters no date holds (a terminal's controls, which nbgrader's
    release_feedback would print)."""
    from .submission import read_bytes

    path = graded.path.parent / "timestamp.txt"
    data = read_bytes(path, f"{graded.student}/{path.parent.name}/{path.name}")
    if len(data) > MAX_TIMESTAMP_BYTES:
        raise ValueError(f"{len(data)} bytes")
    text = data.decode("utf-8")
    if not text.strip().isprintable():
        raise ValueError("characters no date holds")
    when = _parse_timestamp(text.strip())
    if when is None:
        raise ValueError("empty")
    return text, when


def _timestamp(graded: Graded):
    """When the student submitted, from the `timestamp.txt` nbgrader collect writes beside the
    notebook (None without one, as nbgrader reads it). Where it holds no date that can be read,
    the submission is taken as made when its files last changed (their ctime, which the kernel
    keeps, and which a collect's copy sets to when it copied them), with a note for that student:
    a time that cannot be read never counts as on time (as no time, or an earlier submission's,
    would in the gradebook)."""
    if not os.path.lexists(graded.path.parent / "timestamp.txt"):
        return None
    try:
        return _read_timestamp(graded)[1]
    except Exception as error:  # whatever the student's text makes a date parser raise: this student's note
        import datetime

        from .results import printable

        changed = 0.0
        for path in (graded.path.parent, graded.path, graded.path.parent / "timestamp.txt"):
            try:
                changed = max(changed, os.lstat(path).st_ctime)
            except OSError:
                pass
        when = datetime.datetime.fromtimestamp(changed or time.time(), datetime.timezone.utc).replace(tzinfo=None)
        reason = printable(str(error), one_line=True)[:80]
        graded.notes = [*(graded.notes or []), f"timestamp.txt holds no date that can be read ({reason}); "
                        f"the submission is taken as made when its files last changed, {when:%Y-%m-%d %H:%M:%S} UTC"]
        return when


# A time zone as nbgrader's timestamps name one: an offset, or a zone's name (`UTC`, `CET`,
# `Europe/Paris`, `Etc/GMT+5`). nbgrader's parse_utc hands the word to dateutil's gettz, which opens
# a file of that name, anywhere (`/proc/self/mem`, `../x`): no dot, no leading slash, so it can only
# name a file of the system's time-zone folders.
_ZONE = re.compile(r"[+-]?\d+|[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9_+-]+)*")


def _parse_timestamp(text: str):
    """nbgrader's reading of a `timestamp.txt` (its parse_utc: a naive UTC datetime), on a time zone
    that can only be a zone's name. The parser's warnings are not shown: the caller notes a text no
    date fits."""
    import warnings

    from nbgrader import utils

    parts = text.split(" ")
    if len(parts) == 3 and not _ZONE.fullmatch(parts[2]):
        raise ValueError("its time zone is no zone's name")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return utils.parse_utc(text)


def _pending(coursedir, assignment: str, student: str) -> Path:
    """Where a run builds a student's whole autograded folder, until the gradebook holds its scores
    and it is put in place (its record beside it: the same name and `.json`)."""
    return state_folder(coursedir, assignment) / "pending" / _key(student)


def _autograded_folder(coursedir, assignment: str, student: str) -> Path:
    return Path(coursedir.format_path(coursedir.autograded_directory, student, assignment))


def _gradebook_view(gradebook, assignment: str, student: str) -> dict | None:
    """What a run writes into the gradebook for one student, as the gradebook holds it now: the
    submission's time, every cell's auto score and auto comment, the late penalty. (A grader's
    manual scores and comments are not in it: formgrader changes them at any time.)"""
    from nbgrader.api import MissingEntry

    try:
        row = gradebook.find_submission_notebook(NOTEBOOK_ID, assignment, student)
    except MissingEntry:
        return None
    when = row.assignment.timestamp
    if when is not None and when.tzinfo is not None:
        from datetime import timezone

        when = when.astimezone(timezone.utc).replace(tzinfo=None)
    return {"timestamp": when.isoformat() if when is not None else None,
            "late": row.late_submission_penalty,
            "grades": {grade.name: grade.auto_score for grade in row.grades},
            "comments": {comment.name: comment.auto_comment for comment in row.comments}}


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one step (Linux's renameat2 with RENAME_EXCHANGE); False where the system
    or the file system cannot, so the caller moves the old one aside instead."""
    import ctypes

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    number = ctypes.get_errno()
    if number in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(number, os.strerror(number), str(first), None, str(second))


def _sync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _place(coursedir, assignment: str, student: str) -> None:
    """Put a student's built folder (see `update_autograded`) in place of their autograded folder,
    once the gradebook holds its scores, then its record in place of the student's last one, then
    remove the old folder. Where both exist, the folders are swapped in one step, so autograded/
    never lacks the student's folder; where they cannot be, the old one is first moved aside into
    the state folder (a kill then leaves no folder for a moment, and the next run finishes).
    Where nothing was built (the submission made no notebook), the old folder is removed: it
    describes an earlier submission."""
    built = _pending(coursedir, assignment, student)
    aside = built.with_name(built.name + ".old")
    record = built.with_name(built.name + ".json")
    target = _autograded_folder(coursedir, assignment, student)
    if os.path.lexists(built):
        target.parent.mkdir(parents=True, exist_ok=True)
        if not os.path.lexists(target):
            os.rename(built, target)
        elif not _exchange(built, target):
            _remove(aside)
            os.rename(target, aside)
            os.rename(built, target)
        _sync_folder(target.parent)
        os.replace(record, built.parent.parent / record.name)
    else:
        if os.path.lexists(target):
            _remove(aside)
            os.rename(target, aside)
            _sync_folder(target.parent)
        _remove(built.parent.parent / record.name)
        os.unlink(record)
    _remove(built)  # the old folder, after a swap
    _remove(aside)


def settle_pending(coursedir, assignment: str) -> list[str]:
    """Finish what a killed run left in the state folder: each built folder whose record says what
    the gradebook holds now (the run committed) is put in place of the student's autograded folder
    (or, where the swap was done, only the old folder removed); every other one, and everything in
    the pending folder no record describes, is removed (a folder moved aside is put back first).
    Returns the students whose folder was put in place. Nothing outside the state folder is taken
    from: a file in autograded/ named like anything here is the student's."""
    from nbgrader.api import Gradebook

    folder = state_folder(coursedir, assignment) / "pending"
    if not folder.is_dir():
        return []
    settled = []
    with Gradebook(coursedir.db_url) as gradebook:
        for path in sorted(folder.glob("*.json")):
            record, key = _read_record(path), path.stem
            built, aside = folder / key, folder / f"{key}.old"
            student = record["student"] if record is not None else None
            valid = (student is not None and _key(student) == key and "gradebook" in record
                     and (record.get("files") is None or isinstance(record.get("files"), dict)))
            target = _autograded_folder(coursedir, assignment, student) if valid else None
            committed = valid and _gradebook_view(gradebook, assignment, student) == record["gradebook"]
            if committed and _contents(built) == record["files"]:
                _place(coursedir, assignment, student)
                settled.append(student)
            elif committed and _contents(target) == record["files"]:  # swapped; the rest was left
                os.replace(path, folder.parent / path.name)
                _remove(built)
                _remove(aside)
            else:  # not committed: the old grade stands, and so does the old folder
                if target is not None and os.path.lexists(aside) and not os.path.lexists(target):
                    os.rename(aside, target)
                for leftover in (built, aside, path):
                    _remove(leftover)
        for leftover in folder.iterdir():  # a folder no record describes: a run killed building it
            _remove(leftover)
    return settled


class GradebookWriter:
    """Writes the trusted scores, and what autograde would have saved, into the gradebook.

    One nbgrader Gradebook session serves the whole run: every submitted notebook's grades and
    comments are loaded together, set in memory and committed once, at the end, where nbgrader's
    own steps (SaveAutoGrades, AssignLatePenalties) would each open a gradebook for every notebook,
    look up each cell on its own and commit it.
    """

    def __init__(self, coursedir, config, assignment: str, step_ids: dict[str, str]):
        from nbgrader.api import Gradebook

        self.coursedir, self.config, self.assignment, self.step_ids = coursedir, config, assignment, step_ids
        self.gradebook = Gradebook(coursedir.db_url)
        self.submissions: dict = {}
        """Student id -> their SubmittedAssignment."""
        self.notebooks: dict = {}
        """Student id -> their SubmittedNotebook, its grades and comments loaded."""
        self.cell_ids: dict[str, list[dict[str, str]]] = {}
        """"grades"/"comments" -> cell name -> cell id, one dict per kind of cell, in the order in
        which nbgrader's find_grade and find_comment try them."""
        self.late_penalties = None

    def __enter__(self) -> "GradebookWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.gradebook.close()

    def prepare(self, graded: list[Graded]) -> None:
        """Do what `update_or_create_student` and `update_or_create_submission` do for each
        student, then load every submitted notebook of the run with its grades and comments."""
        from nbgrader.api import Student, SubmittedNotebook
        from sqlalchemy.exc import SAWarning
        from sqlalchemy.orm import selectinload

        gradebook = self.gradebook
        known = {student.id for student in gradebook.students}
        submissions = {submission.student_id: submission
                       for submission in gradebook.find_assignment(self.assignment).submissions}
        with warnings.catch_warnings():
            # nbgrader 0.9.6 adds a submission in a way SQLAlchemy 2 warns about; the rows are right.
            warnings.simplefilter("ignore", SAWarning)
            for one in graded:
                if one.student not in known:
                    gradebook.db.add(Student(id=one.student))
                    known.add(one.student)
                timestamp = _timestamp(one)
                if one.student not in submissions:
                    submissions[one.student] = self._new_submission(one.student, timestamp)
                elif timestamp:
                    submissions[one.student].timestamp = timestamp
        self.submissions = submissions
        notebook = gradebook.find_notebook(NOTEBOOK_ID, self.assignment)
        task_cells = {cell.name: cell.id for cell in notebook.task_cells}
        self.checksums = {cell.name: cell.checksum for cell in notebook.source_cells}
        self.graded = {cell.name for cell in notebook.grade_cells} | set(task_cells)
        self.solutions = {cell.name for cell in notebook.solution_cells}
        self.tasks = set(task_cells)
        self.cell_ids = {"grades": [{cell.name: cell.id for cell in notebook.grade_cells}, task_cells],
                         "comments": [{cell.name: cell.id for cell in notebook.solution_cells}, task_cells]}
        student_of = {submission.id: student for student, submission in submissions.items()}
        rows = gradebook.db.query(SubmittedNotebook) \
            .filter(SubmittedNotebook.notebook_id == notebook.id) \
            .options(selectinload(SubmittedNotebook.grades), selectinload(SubmittedNotebook.comments))
        self.notebooks = {student_of[row.assignment_id]: row for row in rows
                          if row.assignment_id in student_of}

    def _new_submission(self, student: str, timestamp):
        """What nbgrader's `add_submission` builds (the submission, its notebooks, an empty grade
        and comment per cell), without its commit: nothing reaches the gradebook until `commit`."""
        from nbgrader.api import Comment, Grade, Student, SubmittedAssignment, SubmittedNotebook

        extra = {"timestamp": timestamp} if timestamp else {}
        gradebook = self.gradebook
        assignment = gradebook.find_assignment(self.assignment)
        row = gradebook.db.query(Student).filter(Student.id == student).one()
        submission = SubmittedAssignment(assignment=assignment, student=row, **extra)
        for notebook in assignment.notebooks:
            submitted = SubmittedNotebook(notebook=notebook, assignment=submission)
            for cell in notebook.grade_cells:
                Grade(cell_id=cell.id, notebook=submitted)
            for cell in notebook.solution_cells:
                Comment(cell_id=cell.id, notebook=submitted)
            for cell in notebook.task_cells:
                Comment(cell_id=cell.id, notebook=submitted)
                Grade(cell_id=cell.id, notebook=submitted)
        gradebook.db.add(submission)
        return submission

    def record(self, graded: Graded, notebook) -> None:
        """One student's scores; `notebook` is their autograded notebook (None when there is none)."""

        student = graded.student
        row = self.notebooks.get(student)
        found = {kind: {entry.cell_id: entry for entry in getattr(row, kind)} if row is not None else {}
                 for kind in ("grades", "comments")}

        def find(kind: str, name: str):
            for cell_ids in self.cell_ids[kind]:
                if cell_ids.get(name) in found[kind]:
                    return found[kind][cell_ids[name]]
            # Not in this submission: nbgrader's own look-up says so (MissingEntry).
            look_up = self.gradebook.find_grade if kind == "grades" else self.gradebook.find_comment
            return look_up(name, NOTEBOOK_ID, self.assignment, student)

        if notebook is not None:
            # The written answers' records, as nbgrader's SaveAutoGrades sets them, but from the
            # gradebook's cells (which are graded, which are answers, each one's checksum as
            # released): of the notebook only the content of the first cell with each grade id
            # counts, never its metadata's points or flags.
            cells: dict = {}
            for cell in notebook.cells:
                cells.setdefault(cell_grade_id(cell), cell)
            steps = set(self.step_ids.values())
            for name in sorted((self.graded | self.solutions) - steps):
                if name not in cells:
                    continue  # no such cell handed in: left as nbgrader left it
                unchanged = _unchanged(cells[name], self.checksums.get(name))
                if name in self.graded:
                    grade = find("grades", name)
                    grade.auto_score = 0.0 if unchanged and name in self.solutions else None
                    grade.needs_manual_grade = grade.manual_score is not None or grade.auto_score is None
                if name in self.solutions or name in self.tasks:
                    comment = find("comments", name)
                    comment.auto_comment = "No response." if unchanged and name not in self.tasks else None
        results = {step.id: step for step in graded.result.steps}
        for step_id, grade_id in self.step_ids.items():
            grade = find("grades", grade_id)
            grade.auto_score = results[step_id].score
            grade.needs_manual_grade = grade.manual_score is not None  # a grader's override stays
        if notebook is not None:
            self._assign_late_penalty(student)

    def _assign_late_penalty(self, student: str) -> None:
        """What nbgrader's AssignLatePenalties does, with the plugin the course configures."""
        row = self.notebooks.get(student)
        if row is None:
            row = self.gradebook.find_submission_notebook(NOTEBOOK_ID, self.assignment, student)
        row.late_submission_penalty = None
        late = self.submissions[student].total_seconds_late
        if late > 0:
            if self.late_penalties is None:
                from nbgrader.preprocessors import AssignLatePenalties

                self.late_penalties = AssignLatePenalties(config=self.config, log=_quiet_log())
                self.late_penalties.init_plugin()
            # The notebook's score is summed in the database, from the grades just set.
            self.gradebook.db.flush()
            self.gradebook.db.expire(row, ["score"])
            penalty = self.late_penalties.plugin_inst.late_submission_penalty(student, row.score, late)
            if penalty is not None:  # kept between 0 and the score, by nbgrader's own check
                row.late_submission_penalty = self.late_penalties._check_late_penalty(row, penalty)

    def views(self, students: list[str]) -> dict[str, dict | None]:
        """Student -> what the gradebook will hold for them once committed (`_gradebook_view`),
        read back from the database inside this run's transaction."""
        self.gradebook.db.flush()
        self.gradebook.db.expire_all()
        return {student: _gradebook_view(self.gradebook, self.assignment, student) for student in students}

    def commit(self) -> None:
        self.gradebook.db.commit()


def _unchanged(cell, checksum: str | None) -> bool:
    """Whether an answer cell is as released: its checksum, computed as nbgrader does, is the one
    the gradebook holds. A cell nbgrader cannot checksum is taken as changed (a person looks)."""
    from nbgrader import utils

    try:
        return checksum is not None and utils.compute_checksum(cell) == checksum
    except (KeyError, TypeError, ValueError, AttributeError):
        return False


def grade_course(course: Path, assignment: str, seed: int | None = None, jobs: int | None = None,
                 limits=None, progress=None, waiting=None, carry_forward: bool = True) -> tuple[list[Graded], int]:
    """Grade every submitted notebook of `assignment` and record the results; returns them and
    the seed used. One run at a time per course: `waiting(pid)` is called if another holds it.
    `carry_forward`: as qkv-grade's default; False grades every step on its own.
    Raises NotRecorded, holding the results, when the course could not be written."""
    coursedir, config = course_directory(course)
    with course_lock(course, waiting):
        return _grade_course(course, coursedir, config, assignment, seed, jobs, limits, progress, carry_forward)


def _grade_course(course, coursedir, config, assignment, seed, jobs, limits, progress, carry_forward=True):
    from sqlalchemy.exc import SQLAlchemyError

    from .grading import Grader

    try:
        step_ids = step_cells(coursedir, assignment)
        settle_pending(coursedir, assignment)
    except SQLAlchemyError as error:  # locked past its wait, or no database at all: nothing graded yet
        raise TrustedError(f"could not read the course: {coursedir.db_url}: {_first_line(error)}") from None
    items, missing = submissions(coursedir, assignment)
    if not items:
        raise TrustedError(f"no submitted notebooks: expected "
                           f"{coursedir.submitted_directory}/<student>/{assignment}/{NOTEBOOK} "
                           f"in {course}")
    if seed is None:
        if not (course / COURSE_FILE).is_file():
            raise TrustedError(f"{course} has no {COURSE_FILE}, which fixes the seed of the hidden "
                               f"cases: pass --seed, or write the course with qkv-course")
        seed = course_seed(course)
    grader = Grader(seed, limits, course_key(course if (course / COURSE_FILE).is_file() else None), carry_forward)
    sanitized: dict = {}
    loader = _as_autograde_runs(coursedir, config, assignment, {path: student for path, student in items}, sanitized)
    results = grader.grade_many([(path, f"{student}/{assignment}/{NOTEBOOK}") for path, student in items],
                                jobs=jobs, progress=progress, loader=loader)
    try:
        in_kernel = in_kernel_results(coursedir, assignment, step_ids, [student for _, student in items], sanitized)
    except SQLAlchemyError as error:  # the grades stand, printed, and the course is left as it was
        raise NotRecorded([Graded(student, path, result, None, "", notebook=sanitized.get(student))
                           for (path, student), result in zip(items, results)], seed,
                          f"{coursedir.db_url}: {_first_line(error)}") from None
    graded = [Graded(student, path, result, in_kernel[student], "", notebook=sanitized.get(student))
              for (path, student), result in zip(items, results)]
    try:
        record(graded, coursedir, config, assignment, step_ids, seed)
    except NotPlaced as error:
        error.graded, error.seed, error.missing = graded, seed, missing
        raise
    except OSError as error:
        raise NotRecorded(graded, seed, f"{error.filename or course}: {error.strerror}") from None
    except SQLAlchemyError as error:
        raise NotRecorded(graded, seed, f"{coursedir.db_url}: {_first_line(error)}") from None
    try:
        _enrol(coursedir, [student for student, _ in missing if not odd_name(student)])
    except (OSError, SQLAlchemyError, ValueError):  # nbgrader's InvalidEntry (a locked database) too
        pass  # every grade is recorded; stdout still names each of them as not graded
    return graded, seed, missing


def _first_line(error: Exception) -> str:
    """What a database error says, in its first line (SQLAlchemy's own adds the statement)."""
    return (str(getattr(error, "orig", None) or error).splitlines() or [type(error).__name__])[0]


def _enrol(coursedir, students: list[str]) -> None:
    """Students who handed the assignment in without its notebook, made students of the gradebook:
    `nbgrader export` then lists each with 0, as it lists anyone with nothing graded, rather than
    leaving them out of grades.csv. Nothing of theirs is recorded as a submission."""
    if not students:
        return
    from nbgrader.api import Gradebook

    with Gradebook(coursedir.db_url) as gradebook:
        for student in students:
            gradebook.update_or_create_student(student)


class NotRecorded(Exception):
    """Grading finished but the course could not be written; the grades are here all the same."""

    def __init__(self, graded: list[Graded], seed: int, reason: str):
        super().__init__(reason)
        self.graded, self.seed = graded, seed


@contextmanager
def course_lock(course: Path, waiting=None):
    """Hold the course's lock file (LOCK_FILE) for a whole run: a second run on the same course
    waits here, after calling `waiting` with the holder's process id."""
    import errno
    import fcntl

    try:
        descriptor = os.open(course / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        if error.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        try:  # flock needs no write access
            descriptor = os.open(course / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            # Nothing can write this course, this run included: it grades, then reports that
            # it could not record the grades.
            yield
            return
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None:
                waiting(os.pread(descriptor, 32, 0).decode("ascii", "replace").strip() or "unknown")
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        try:
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError:
            pass  # the pid only makes the waiting message clearer
        yield
    finally:
        os.close(descriptor)


def record(graded: list[Graded], coursedir, config, assignment: str, step_ids: dict[str, str],
           seed: int) -> None:
    """Write the run into the course as one transaction.

    Each student's new autograded folder is built whole in the grader's state folder, with a
    record of what it holds and of what the gradebook will hold for that student; then the
    gradebook's single commit makes every student's new grade count at once; then each built
    folder is swapped into place. A kill before the commit changes no grade and no folder (the
    next run removes what was built); a kill after it leaves folders the next run puts in place
    (`settle_pending`). Ctrl-C or SIGTERM during the commit and the swaps takes effect after them.
    Raises NotPlaced when, after the commit, a folder could not be put in place.
    """
    from .console import interrupts_deferred

    committed = False
    state = state_folder(coursedir, assignment)
    try:
        with GradebookWriter(coursedir, config, assignment, step_ids) as writer:
            writer.prepare(graded)
            written = []
            for one in graded:
                try:
                    notebook = update_autograded(one, coursedir, config, assignment, step_ids, seed)
                except OSError:
                    raise
                except Exception as error:  # nbgrader refuses the notebook: the scores still count
                    from .results import clipped

                    one.feedback_notebook = f"not written: {type(error).__name__}: {clipped(str(error))}"
                    _remove(_pending(coursedir, assignment, one.student))
                    notebook = None
                if notebook is not None:
                    written.append(one)
                writer.record(one, notebook)
            # A student whose submission made no notebook keeps no folder of an earlier one.
            withdrawn = [one for one in graded if one not in written
                         and os.path.lexists(_autograded_folder(coursedir, assignment, one.student))]
            views = writer.views([one.student for one in written + withdrawn])
            for one in written + withdrawn:
                built = one.built if one in written else {"sha256": "", "trusted_scores": {}, "files": None}
                pending = _pending(coursedir, assignment, one.student)
                pending.parent.mkdir(parents=True, exist_ok=True)
                write_atomically(pending.with_name(pending.name + ".json"), json.dumps(
                    {"student": one.student, "sha256": built["sha256"],
                     "trusted_scores": built["trusted_scores"], "in_kernel": one.in_kernel,
                     "files": built["files"], "gradebook": views[one.student]}, indent=1))
            written += withdrawn
            if written:
                _sync_folder(state / "pending")
            with interrupts_deferred():  # Ctrl-C lands once the run is whole
                writer.commit()
                committed = True
                failed = []
                for one in written:
                    try:
                        _place(coursedir, assignment, one.student)
                    except OSError as error:
                        failed.append(f"{error.filename or one.student}: {error.strerror}")
                if failed:
                    raise NotPlaced(len(failed), failed[0])
    except BaseException:
        if not committed:  # the old grades stand: so do the old folders
            for one in graded:
                pending = _pending(coursedir, assignment, one.student)
                for leftover in (pending, pending.with_name(pending.name + ".json")):
                    try:
                        _remove(leftover)
                    except OSError:
                        pass
        raise  # committed, with folders left unplaced: the next run's settle_pending places them


class NotPlaced(Exception):
    """The gradebook holds the run's grades, but some autograded folders could not be put in
    place; the next run does it."""

    def __init__(self, count: int, reason: str):
        super().__init__(reason)
        self.count, self.reason = count, reason
        self.graded, self.seed = [], None


def _autograded_path(coursedir, assignment: str, student: str) -> Path:
    return _autograded_folder(coursedir, assignment, student) / NOTEBOOK


# --- the command --------------------------------------------------------------------------------

def report(graded: list[Graded], assignment: str, seed: int, seconds: float, recorded: bool = True,
           missing: list[tuple[str, str]] = ()) -> str:
    """`missing`: (student, why) for each student who handed the assignment in and is not graded."""
    from .results import printable, printable_name
    from .submission import shown_name

    # student ids and their files' names are the students' own: one line each, escapes escaped, and
    # bytes that are not UTF-8 (kept by Python as lone surrogates) shown as their escapes
    names = {student: printable_name(shown_name(student)) for student in [one.student for one in graded]
             + [student for student, _ in missing]}
    width = max(len(name) for name in names.values())
    lines = []
    for one in graded:
        flags = sorted({code for step in one.result.steps for code in step.diagnoses})
        lines.append(f"{names[one.student]:<{width}}  {one.result.score:>6g} / {one.result.max_score:g}"
                     + (f"  {', '.join(flags)}" if flags else ""))
    for student, why in missing:
        lines.append(f"{names[student]:<{width}}  not graded: {printable(why, one_line=True)}")
    lines.append("")
    lines.append(f"{len(graded)} notebook{'' if len(graded) == 1 else 's'} of {assignment} graded with seed {seed} "
                 f"in {seconds:.1f} s; "
                 + ("the gradebook holds these scores." if recorded else
                    "the gradebook and the autograded notebooks were left as they were."))
    differing = [one for one in graded if one.differences]
    compared = [one for one in graded if one.in_kernel is not None]
    if compared and not differing:
        lines.append("")
        lines.append("In-kernel results (nbgrader autograde) agree with these, step by step, on "
                     + (f"all {len(compared)} notebooks" if len(compared) > 1 else "the one notebook") + " it graded.")
    if differing:
        lines.append("")
        lines.append("In-kernel results (nbgrader autograde) that differ from these, step by step "
                     "(in-kernel -> trusted):")
        for one in differing:
            lines.append(f"  {names[one.student]}: in-kernel {sum(one.in_kernel.values()):g}, trusted "
                         f"{one.result.score:g}; {'; '.join(one.differences)}")
    no_kernel = [names[one.student] for one in graded if one.in_kernel is None]
    if no_kernel and len(no_kernel) == len(graded):
        lines.append("")
        lines.append("No in-kernel results to compare: nbgrader autograde has not run on these "
                     "notebooks (these scores do not need it).")
    elif no_kernel:
        lines.append("")
        lines.append(f"No in-kernel result (autograde not run, or its kernel died): "
                     f"{', '.join(no_kernel)}")
    for one in graded:
        for note in one.notes or []:
            lines.append(f"{names[one.student]}: {printable(note, one_line=True)}")
    unwritten = [one for one in graded if one.feedback_notebook.startswith("not written")]
    for one in unwritten:
        lines.append(f"{names[one.student]}: no autograded notebook, so no feedback file "
                     f"({printable(one.feedback_notebook, one_line=True)}).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from .console import seed_option

    parser = argparse.ArgumentParser(
        prog="qkv-grade --nbgrader",
        description="Grade every submitted notebook of an nbgrader course in the isolated runner "
                    "and write the scores and feedback into its gradebook and autograded "
                    "notebooks. Use this instead of trusting `nbgrader autograde`.")
    parser.add_argument("course", type=Path, help="the course folder (holding nbgrader_config.py)")
    parser.add_argument("assignment", help="the assignment's name in nbgrader, e.g. ps1")
    parser.add_argument("--seed", type=seed_option, default=None,
                        help="seed of the hidden cases (default: the course's, from qkv_course.json)")
    parser.add_argument("--jobs", type=int, default=None, help="parallel workers (default: one per core)")
    parser.add_argument("--timeout", type=float, default=1.0, help="seconds allowed per call (default: 1)")
    parser.add_argument("--no-carry-forward", dest="carry_forward", action="store_false",
                        help="grade every step on its own (by default an earlier step's verified mistake "
                             "costs only that step)")
    args = parser.parse_args(argv)
    from .console import EXIT_UNWRITTEN, interrupts_deferred, speak_utf8, use_own_tools

    speak_utf8()
    route_logging()
    use_own_tools()  # nbgrader runs alembic by name when it creates or upgrades a gradebook
    if args.jobs is not None and args.jobs < 1:
        return _fail("--jobs must be at least 1")
    from .console import timeout_problem

    problem = timeout_problem(args.timeout)
    if problem:
        return _fail(f"--timeout {args.timeout:g}: {problem}")
    if not args.course.is_dir():
        return _fail(f"{args.course}: no such folder")
    try:
        with interrupts_deferred():
            try:
                import nbgrader.api  # noqa: F401
            except ImportError:
                return _fail("nbgrader is not installed (pip install 'qkv-attention[nbgrader]')")
            from . import grading  # noqa: F401
            from .runner import Limits, WorkerFailed
            from .sandbox import SandboxUnavailable
    except KeyboardInterrupt:
        return _fail("interrupted", 130)

    def waiting(pid: str) -> None:
        sys.stderr.write(f"qkv-grade --nbgrader: waiting for another run on {args.course} "
                         f"(process {pid}) to finish\n")
        sys.stderr.flush()

    started = time.perf_counter()
    try:
        graded, seed, missing = grade_course(args.course, args.assignment, args.seed, args.jobs,
                                             Limits(call_timeout=args.timeout), waiting=waiting,
                                             carry_forward=args.carry_forward)
    except (TrustedError, CourseError, SandboxUnavailable, WorkerFailed) as error:
        return _fail(str(error))
    except NotRecorded as error:
        sys.stdout.write(report(error.graded, args.assignment, error.seed, time.perf_counter() - started,
                                recorded=False))
        return _fail(f"could not write the course: {error}; no grade changed", EXIT_UNWRITTEN)
    except NotPlaced as error:
        sys.stdout.write(report(error.graded, args.assignment, error.seed, time.perf_counter() - started,
                                missing=error.missing))
        return _fail(f"the gradebook holds these grades, but {error.count} autograded "
                     f"folder{'' if error.count == 1 else 's'} could not be put in place ({error.reason}); "
                     f"the next run puts {'it' if error.count == 1 else 'them'} in place", EXIT_UNWRITTEN)
    except OSError as error:
        return _fail(f"could not write the course: {error.filename or args.course}: {error.strerror}",
                     EXIT_UNWRITTEN)
    except KeyboardInterrupt:
        return _fail("interrupted (each student's grade is the one before this run, or this run's)", 130)
    sys.stdout.write(report(graded, args.assignment, seed, time.perf_counter() - started, missing=missing))
    return 0


def _fail(message: str, code: int = 2) -> int:
    sys.stderr.write(f"qkv-grade --nbgrader: error: {message}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
