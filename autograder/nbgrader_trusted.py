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
- puts each step's feedback in the output of its check cell in
  `autograded/<student>/<assignment>/attention_head.ipynb` and clears every other output the
  kernel left there (student code that ran in it could have printed anything, hidden cases
  included); when `nbgrader autograde` never produced that notebook (not run, or its kernel died)
  it writes one from the submission with nbgrader's own sanitizing steps, so feedback can still be
  generated;
- reports every notebook whose in-kernel result differs from the trusted one, and every notebook
  with no in-kernel result.

A notebook cell that exits ends only itself (the runner runs notebooks cell by cell), so a notebook that
killed its kernel is graded on every step its code reaches.
"""
from __future__ import annotations

import argparse
import errno
import logging
import math
import os
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
from .submission import cell_grade_id, qkv_metadata

NOTEBOOK_ID = Path(NOTEBOOK).stem
TOLERANCE = 0.005  # scores are kept to two decimals
READ_ONLY = 0o444  # what nbgrader autograde leaves on an autograded notebook
PENDING = ".qkv-pending"
LOCK_FILE = ".qkv-grade.lock"


@dataclass
class Graded:
    """One student's notebook: the trusted result and what the in-kernel run said."""

    student: str
    path: Path
    result: "SubmissionResult"
    """What the isolated grading found."""
    in_kernel: dict[str, float] | None
    """Step id -> the in-kernel score, or None when there is no in-kernel result."""
    feedback_notebook: str
    """What happened to the autograded notebook: "updated", "written" or why not."""

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
            raise TrustedError(f"the gradebook has no notebook {NOTEBOOK_ID} in assignment "
                               f"{assignment!r}: run `nbgrader generate_assignment {assignment}` "
                               f"in the course first") from None
        known = {cell.name for cell in notebook.grade_cells}
    cells = {step.id: check_cell_id(step.id) for step in STEPS if check_cell_id(step.id) in known}
    if not cells:
        raise TrustedError(f"assignment {assignment!r} has no check cells of this package's steps")
    return cells


def submissions(coursedir, assignment: str) -> tuple[list[tuple[Path, str]], list[tuple[str, str]]]:
    """(notebook path, student id) for every submission, sorted by student; and (student id,
    why) for every student whose assignment folder holds no notebook of that name.

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
        if entry.is_symlink() or (entry.is_dir(follow_symlinks=False) and (
                os.path.islink(notebook.parent) or os.path.lexists(notebook))):
            found.append((notebook, entry.name))
        elif entry.is_dir(follow_symlinks=False) and notebook.parent.is_dir():
            try:
                others = sorted(name for name in os.listdir(notebook.parent) if name.endswith(".ipynb"))
            except OSError:
                others = []
            missing.append((entry.name, f"its {pattern.name} folder holds no {NOTEBOOK}"
                            + (f" (only {', '.join(others[:3])}: rename the one to grade)" if others else "")))
    return found, missing


# --- grading ------------------------------------------------------------------------------------

def in_kernel_scores(notebook, step_ids: dict[str, str]) -> dict[str, float] | None:
    """What `nbgrader autograde` gave each step, read from its check cells' outputs.

    A notebook this command has already updated carries the in-kernel scores it found then.
    """
    from nbgrader import utils

    recorded = qkv_metadata(notebook)
    if "in_kernel" in recorded:
        # nbgrader carries a submitted notebook's metadata over: only scores of the shape written
        # here are read (they are shown beside the trusted ones, never graded); any other is none
        kept = recorded["in_kernel"]
        if isinstance(kept, dict) and all(isinstance(score, (int, float)) and not isinstance(score, bool)
                                          and math.isfinite(score) for score in kept.values()):
            return {step: float(score) for step, score in kept.items() if step in step_ids}
        return None
    steps_of = {grade_id: step for step, grade_id in step_ids.items()}
    scores = {}
    for cell in notebook.cells:
        grade_id = cell_grade_id(cell)
        if grade_id in steps_of and utils.is_grade(cell) and cell.cell_type == "code":
            try:
                score, _ = utils.determine_grade(cell)
            except (ValueError, KeyError):  # nbgrader itself fails on such a cell
                score = None
            scores[steps_of[grade_id]] = float(score) if score is not None else 0.0
    return scores


def _quiet_log() -> logging.Logger:
    """nbgrader's own steps warn about every hidden-test cell's checksum; keep their errors only."""
    log = logging.getLogger("qkv-grade.nbgrader")
    log.setLevel(logging.ERROR)
    return log


def _resources(coursedir, assignment: str, student: str) -> dict:
    return {"nbgrader": {"notebook": NOTEBOOK_ID, "assignment": assignment, "student": student,
                         "db_url": coursedir.db_url}}


def _sanitized(path: Path, coursedir, config, assignment: str, student: str):
    """The submission as `nbgrader autograde` prepares it, before it would run it."""
    import nbformat
    from nbgrader.preprocessors import (CheckCellMetadata, ClearOutput, DeduplicateIds,
                                        OverwriteCells, OverwriteKernelspec)

    from .submission import read_bytes

    # The bytes graded, read as grading read them: never through a link.
    notebook = nbformat.reads(read_bytes(path, f"{student}/{path.parent.name}/{path.name}").decode("utf-8"),
                              as_version=nbformat.NO_CONVERT)
    resources = _resources(coursedir, assignment, student)
    for step in (ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata):
        notebook, resources = step(config=config, log=_quiet_log()).preprocess(notebook, resources)
    return notebook


def _check_outputs(step) -> list:
    """A check cell's output: the step's feedback on stdout (its score is in the gradebook).

    What nbformat's new_output builds, without checking each output against the schema on its
    own: nbformat.write checks the whole notebook.
    """
    from nbformat import from_dict

    codes = f" [{', '.join(step.diagnoses)}]" if step.diagnoses else ""
    text = f"{step.id}: {step.score:g} / {step.max_score:g}, {step.status}{codes}\n{step.feedback}\n"
    return [from_dict({"output_type": "stream", "name": "stdout", "text": text})]


def _pictures(cell) -> list:
    """The heatmap cell's rendered pictures, and nothing else its kernel printed."""
    from .nbgrader_feedback import PLOT_CELL, PLOT_KEPT

    if cell.get("id") != PLOT_CELL:
        return []
    return [output for output in cell.get("outputs", []) if output.output_type == "display_data"
            and set(output.get("data", {})) & set(PLOT_KEPT)]


def _copy_files(folders: list[Path], target: Path) -> None:
    """What autograde puts beside the notebook: the submission's files, then the source's.

    Only regular files are copied, each read without following a link; a linked file or folder
    is left behind (its target is never opened), and so are hidden folders, `__pycache__` and
    folders nested deeper than `submission.MAX_DEPTH`.
    """
    from .submission import SubmissionError, read_bytes, walk

    for folder in folders:
        files = [(Path(entry.path), parts) for entry, parts, problem in walk(folder)
                 if not problem and entry.is_file(follow_symlinks=False) and not entry.name.endswith(".ipynb")]
        for path, parts in files:
            try:
                data = read_bytes(path, "/".join(parts))
            except SubmissionError:
                continue  # replaced by a link or a FIFO meanwhile: not copied
            try:
                (target / Path(*parts)).parent.mkdir(parents=True, exist_ok=True)
                write_atomically(target / Path(*parts), data)
            except (IsADirectoryError, NotADirectoryError, FileExistsError):
                pass  # a student's folder named as a file (its own, or the source's beside it): that
                # one file is not copied, which costs no one else's grade
            except OSError as error:
                if error.errno != errno.ENAMETOOLONG:  # a name one letter too long for autograded/
                    raise


def update_autograded(graded: Graded, coursedir, config, assignment: str, step_ids: dict[str, str],
                      seed: int):
    """Put the trusted feedback into the autograded notebook, writing one when there is none;
    returns the notebook as written (None when none was)."""
    import nbformat

    from .nbgrader_feedback import reader_view

    folder = Path(coursedir.format_path(coursedir.autograded_directory, graded.student, assignment))
    target = folder / NOTEBOOK
    if target.is_file():
        notebook = nbformat.read(str(target), as_version=nbformat.NO_CONVERT)
        graded.in_kernel = in_kernel_scores(notebook, step_ids)
        graded.feedback_notebook = "updated"
    else:
        if graded.result.error:
            graded.feedback_notebook = f"not written: {graded.result.error}"
            return None
        notebook = _sanitized(graded.path, coursedir, config, assignment, graded.student)
        graded.in_kernel = None
        graded.feedback_notebook = "written"
        folder.mkdir(parents=True, exist_ok=True)
        source = Path(coursedir.format_path(coursedir.source_directory, ".", assignment))
        _copy_files([graded.path.parent, source], folder)
    results = {step.id: step for step in graded.result.steps}
    steps_of = {grade_id: step for step, grade_id in step_ids.items()}
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        # Whatever the kernel printed goes, but the heatmap's picture: code that ran there could
        # print what no student may see.
        grade_id = cell_grade_id(cell)
        cell.outputs = (_check_outputs(results[steps_of[grade_id]]) if grade_id in steps_of
                        else _pictures(cell))
        cell.execution_count = None
    reader_view(notebook)
    notebook.metadata["qkv"] = {"in_kernel": graded.in_kernel, "trusted_seed": seed,
                                "trusted_scores": {step.id: step.score for step in graded.result.steps}}
    pending = _pending(target)
    write_atomically(pending, nbformat.writes(notebook))
    os.chmod(pending, READ_ONLY)
    return notebook


def _timestamp(graded: Graded):
    """When the student submitted, from the `timestamp.txt` nbgrader collect writes beside the
    notebook (None without one); read as submissions are, never through a link."""
    from nbgrader import utils

    from .submission import SubmissionError, read_bytes

    path = graded.path.parent / "timestamp.txt"
    try:
        return utils.parse_utc(read_bytes(path, f"{graded.student}/{path.parent.name}/{path.name}")
                               .decode("utf-8").strip())
    except (SubmissionError, UnicodeDecodeError, ValueError, TypeError):
        return None


def _pending(target: Path) -> Path:
    """Where a run leaves an autograded notebook until the gradebook holds its scores."""
    return target.with_name(f".{target.name}{PENDING}")


def settle_pending(coursedir, assignment: str, step_ids: dict[str, str]) -> list[str]:
    """Finish what a killed run left: each pending autograded notebook replaces the old one if the
    gradebook holds its scores (the run committed), and is removed if not. Returns the students
    whose notebook was put in place."""
    import nbformat
    from nbgrader.api import Gradebook, MissingEntry

    autograded = Path(coursedir.format_path(coursedir.autograded_directory, "*", assignment))
    found = sorted(autograded.parent.parent.glob(f"*/{autograded.name}/.{NOTEBOOK}{PENDING}"))
    if not found:
        return []
    settled = []
    with Gradebook(coursedir.db_url) as gradebook:
        for pending in found:
            student = pending.parent.parent.name
            try:
                wanted = nbformat.reads(pending.read_text(encoding="utf-8"), as_version=nbformat.NO_CONVERT) \
                    .metadata["qkv"]["trusted_scores"]
                recorded = {step: gradebook.find_grade(grade_id, NOTEBOOK_ID, assignment, student).auto_score
                            for step, grade_id in step_ids.items()}
            except (OSError, ValueError, KeyError, MissingEntry):
                recorded, wanted = None, {}
            if recorded is not None and all(recorded[step] is not None
                                            and abs(recorded[step] - wanted.get(step, -1)) <= TOLERANCE
                                            for step in step_ids):
                os.replace(pending, pending.with_name(NOTEBOOK))
                settled.append(student)
            else:
                pending.unlink()
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
        from nbgrader import utils
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
                    submissions[one.student].timestamp = utils.parse_utc(timestamp)
        self.submissions = submissions
        notebook = gradebook.find_notebook(NOTEBOOK_ID, self.assignment)
        task_cells = {cell.name: cell.id for cell in notebook.task_cells}
        self.cell_ids = {"grades": [{cell.name: cell.id for cell in notebook.grade_cells}, task_cells],
                         "comments": [{cell.name: cell.id for cell in notebook.solution_cells}, task_cells]}
        student_of = {submission.id: student for student, submission in submissions.items()}
        rows = gradebook.db.query(SubmittedNotebook) \
            .filter(SubmittedNotebook.notebook_id == notebook.id) \
            .options(selectinload(SubmittedNotebook.grades), selectinload(SubmittedNotebook.comments))
        self.notebooks = {student_of[row.assignment_id]: row for row in rows
                          if row.assignment_id in student_of}

    def _new_submission(self, student: str, timestamp: str | None):
        """What nbgrader's `add_submission` builds (the submission, its notebooks, an empty grade
        and comment per cell), without its commit: nothing reaches the gradebook until `commit`."""
        from nbgrader import utils
        from nbgrader.api import Comment, Grade, Student, SubmittedAssignment, SubmittedNotebook

        extra = {"timestamp": utils.parse_utc(timestamp)} if timestamp else {}
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
        from nbgrader import utils

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
            # The answer cells' "No response." and needs-manual-grade flags, as nbgrader's
            # SaveAutoGrades sets them, cell by cell.
            log = _quiet_log()
            for cell in notebook.cells:
                if utils.is_grade(cell):
                    grade = find("grades", cell.metadata["nbgrader"]["grade_id"])
                    auto_score, _ = utils.determine_grade(cell, log)
                    grade.auto_score = auto_score
                    grade.needs_manual_grade = grade.manual_score is not None or grade.auto_score is None
                if utils.is_solution(cell) or utils.is_task(cell):
                    comment = find("comments", cell.metadata["nbgrader"]["grade_id"])
                    unchanged = cell.metadata.nbgrader.get("checksum", None) == utils.compute_checksum(cell)
                    comment.auto_comment = "No response." if unchanged and not utils.is_task(cell) else None
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

    def commit(self) -> None:
        self.gradebook.db.commit()


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
    from .grading import Grader

    step_ids = step_cells(coursedir, assignment)
    settle_pending(coursedir, assignment, step_ids)
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
    results = grader.grade_many([(path, f"{student}/{assignment}/{NOTEBOOK}")
                                 for path, student in items], jobs=jobs, progress=progress)
    graded = [Graded(student, path, result, None, "")
              for (path, student), result in zip(items, results)]
    from sqlalchemy.exc import SQLAlchemyError

    try:
        record(graded, coursedir, config, assignment, step_ids, seed)
    except OSError as error:
        raise NotRecorded(graded, seed, f"{error.filename or course}: {error.strerror}") from None
    except SQLAlchemyError as error:
        reason = str(getattr(error, "orig", None) or error).splitlines()[0]
        raise NotRecorded(graded, seed, f"{coursedir.db_url}: {reason}") from None
    return graded, seed, missing


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

    Each new autograded notebook is written beside the old one under a pending name; then the
    gradebook's single commit makes every student's new grade count at once; then the pending
    notebooks replace the old ones. A kill before the commit changes no grade (the next run
    removes the pending notebooks); a kill after it leaves notebooks the next run puts in place
    (`settle_pending`). Ctrl-C or SIGTERM during the commit and the renames takes effect after them.
    """
    from .cli import interrupts_deferred

    written, committed = [], False
    try:
        with GradebookWriter(coursedir, config, assignment, step_ids) as writer:
            writer.prepare(graded)
            for one in graded:
                try:
                    notebook = update_autograded(one, coursedir, config, assignment, step_ids, seed)
                except OSError:
                    raise
                except Exception as error:  # nbgrader refuses the notebook: the scores still count
                    one.feedback_notebook = f"not written: {type(error).__name__}: {error}"
                    notebook = None
                if notebook is None:
                    notebook = _autograded(coursedir, assignment, one.student)
                else:
                    written.append(_autograded_path(coursedir, assignment, one.student))
                writer.record(one, notebook)
            with interrupts_deferred():  # Ctrl-C lands once the run is whole
                writer.commit()
                committed = True
                for target in written:
                    os.replace(_pending(target), target)
    except BaseException:
        if not committed:  # the old grades stand: so do the old notebooks
            for target in written:
                try:
                    os.unlink(_pending(target))
                except OSError:
                    pass
        raise  # committed, with renames left undone: the next run's settle_pending does them


def _autograded_path(coursedir, assignment: str, student: str) -> Path:
    return Path(coursedir.format_path(coursedir.autograded_directory, student, assignment)) / NOTEBOOK


def _autograded(coursedir, assignment: str, student: str):
    """The autograded notebook as it is on disk, or None when there is none."""
    import nbformat

    path = _autograded_path(coursedir, assignment, student)
    return nbformat.read(str(path), as_version=nbformat.NO_CONVERT) if path.is_file() else None


# --- the command --------------------------------------------------------------------------------

def report(graded: list[Graded], assignment: str, seed: int, seconds: float, recorded: bool = True,
           missing: list[tuple[str, str]] = ()) -> str:
    """`missing`: (student, why) for each student who submitted the assignment without its notebook."""
    from .results import printable

    # student ids and their files' names are the students' own: one line each, escapes escaped
    names = {student: printable(student, one_line=True) for student in [one.student for one in graded]
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
        lines.append(f"In-kernel results (nbgrader autograde) agree with these, step by step, on all "
                     f"{len(compared)} notebooks it graded.")
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
    unwritten = [one for one in graded if one.feedback_notebook.startswith("not written")]
    for one in unwritten:
        lines.append(f"{names[one.student]}: no autograded notebook, so no feedback file "
                     f"({printable(one.feedback_notebook, one_line=True)}).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from .cli import seed_option

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
    from .cli import EXIT_UNWRITTEN, interrupts_deferred, speak_utf8, use_own_tools

    speak_utf8()
    use_own_tools()  # nbgrader runs alembic by name when it creates or upgrades a gradebook
    if args.jobs is not None and args.jobs < 1:
        return _fail("--jobs must be at least 1")
    if args.timeout <= 0:
        return _fail("--timeout must be positive")
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
