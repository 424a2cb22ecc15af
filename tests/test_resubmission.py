"""A student who hands in again is graded on what they handed in last, in every file anyone reads.

A real course (real `nbgrader autograde` in a real kernel, the real gradebook, `qkv-grade
--nbgrader` and `nbgrader generate_feedback`): sam hands in three times and tia twice, and the
commands run in each order an instructor may take:

- sam: autograde then qkv-grade; resubmits, qkv-grade only; autograde afterwards (which has nothing
  new to do); resubmits, qkv-grade then autograde; resubmits, autograde then qkv-grade;
- tia (never autograded): qkv-grade only; resubmits, qkv-grade only;
- uma: resubmits a file that is not a notebook, so nothing of her first submission stays in
  autograded/.

After each, generate_feedback, and then the autograded notebook (its code and its scores), the
autograded timestamp.txt, the gradebook (its scores and the submission's time) and the feedback
page (its code) all describe the latest submission, and no temporary file is anywhere nbgrader
looks.
"""
from __future__ import annotations

import html
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from support import (ASSIGNMENT, IN_CI, NOTEBOOK, filled_notebook, gradebook_scores, notebook_scores,
                     released_course, submit_notebook, variant)

from autograder.steps import MAX_SCORE

try:
    import nbgrader  # noqa: F401
except ImportError:
    if IN_CI:
        raise
    pytest.skip("nbgrader is not installed (pip install -e '.[nbgrader]')", allow_module_level=True)

SEED = 17
COLUMN_NORMALIZED = [("shifted = s - s.max(axis=-1, keepdims=True)", "shifted = s - s.max(axis=-2, keepdims=True)"),
                     ("a = e / e.sum(axis=-1, keepdims=True)", "a = e / e.sum(axis=-2, keepdims=True)")]
NO_SCALING = [("s = d / np.sqrt(d_k)  # [T, T]", "s = d  # [T, T]")]


def _run(argv: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def autograde(course: Path, env: dict, student: str) -> None:
    """nbgrader autograde, its kernel drawing the heatmap inline (as in JupyterLab), not into Agg."""
    env = {name: value for name, value in env.items() if name != "MPLBACKEND"}
    _run([sys.executable, "-m", "nbgrader", "autograde", ASSIGNMENT, "--student", student], course, env)


def qkv_grade(course: Path, env: dict) -> str:
    return _run([sys.executable, "-m", "autograder.cli", "--nbgrader", str(course), ASSIGNMENT, "--timeout", "1"],
                course.parent, env).stdout


def feedback(course: Path, env: dict) -> None:
    _run([sys.executable, "-m", "nbgrader", "generate_feedback", ASSIGNMENT], course, env)


def hand_in(course: Path, student: str, version: int, changes: list, day: int) -> str:
    """The student's submission `version`, a comment naming it in their softmax, at noon on `day`
    of December (timestamp.txt as `nbgrader collect` writes it); returns the comment."""
    folder = course / "submitted" / student / ASSIGNMENT
    if folder.exists():
        shutil.rmtree(folder)
    mark = f"# {student}, submission {version}"
    released = course / "release" / ASSIGNMENT / NOTEBOOK
    submit_notebook(course, student, filled_notebook(released, variant(changes), {"softmax_rows": mark + "\n"}))
    (folder / "timestamp.txt").write_text(f"2026-12-{day:02d} 12:00:00.000000 UTC")
    return mark


def nothing_temporary(course: Path) -> None:
    for where in ("autograded", "feedback", "submitted"):
        for path in (course / where).rglob("*"):
            assert not path.name.endswith(".tmp") and "qkv-pending" not in path.name, path
    assert not [path for path in course.glob(f".qkv-grade/{ASSIGNMENT}/pending/*")]


def agree(course: Path, student: str, mark: str, earlier: list[str], total: float | None = None) -> dict:
    """Everything read about `student` describes the submission carrying `mark`, none the ones
    carrying `earlier`; returns the gradebook's scores."""
    from nbgrader import utils
    from nbgrader.api import Gradebook

    submitted = course / "submitted" / student / ASSIGNMENT
    autograded = course / "autograded" / student / ASSIGNMENT
    page = (course / "feedback" / student / ASSIGNMENT / NOTEBOOK).with_suffix(".html")
    stamp = (submitted / "timestamp.txt").read_text()

    notebook = nbformat.read(autograded / NOTEBOOK, as_version=4)
    code = "\n".join(cell.source for cell in notebook.cells)
    assert mark in code and not [old for old in earlier if old in code], student
    scores = gradebook_scores(course)[student]
    assert notebook_scores(autograded / NOTEBOOK) == scores, student
    if total is not None:
        assert sum(scores.values()) == pytest.approx(total), student
    assert (autograded / "timestamp.txt").read_text() == stamp, student
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        when = gradebook.find_submission(ASSIGNMENT, student).timestamp
    assert utils.parse_utc(when) == utils.parse_utc(stamp), student

    shown = html.unescape(page.read_text(encoding="utf-8"))
    assert mark in shown and not [old for old in earlier if old in shown], student
    for step, score in scores.items():  # each check cell's feedback line, as the gradebook scores it
        assert f"{step}: {score:g} / " in shown, (student, step)
    assert (page.parent / "timestamp.txt").read_text() == stamp, student
    nothing_temporary(course)
    return scores


def heatmap(course: Path, student: str) -> int:
    """How many pictures the heatmap cell of the student's autograded notebook shows."""
    from autograder.nbgrader_feedback import PLOT_CELL

    notebook = nbformat.read(course / "autograded" / student / ASSIGNMENT / NOTEBOOK, as_version=4)
    return sum(1 for cell in notebook.cells if cell.get("id") == PLOT_CELL
               for output in cell.outputs if "image/png" in output.get("data", {}))


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("resubmission")
    path, env, _ = released_course(root, SEED)
    return path, env


def test_each_order_of_commands_leaves_every_file_on_the_latest_submission(course):
    path, env = course
    sam, tia = [], []

    # sam: autograde then qkv-grade
    sam.append(hand_in(path, "sam", 1, COLUMN_NORMALIZED, 1))
    tia.append(hand_in(path, "tia", 1, NO_SCALING, 1))
    autograde(path, env, "sam")
    drawn = heatmap(path, "sam")
    report = qkv_grade(path, env)
    feedback(path, env)
    first = agree(path, "sam", sam[-1], [])
    assert sum(first.values()) < MAX_SCORE
    assert drawn and heatmap(path, "sam") == drawn  # autograde's picture of the same code is kept
    assert "No in-kernel result" in report and "tia" in report and "sam" not in report.split("No in-kernel")[1]
    # tia: qkv-grade only, never autograded
    agree(path, "tia", tia[-1], [])

    # sam resubmits: qkv-grade only (autograde has never seen this submission)
    sam.append(hand_in(path, "sam", 2, [], 2))
    tia.append(hand_in(path, "tia", 2, [], 2))
    report = qkv_grade(path, env)
    feedback(path, env)
    agree(path, "sam", sam[-1], sam[:-1], MAX_SCORE)
    agree(path, "tia", tia[-1], tia[:-1], MAX_SCORE)
    assert heatmap(path, "sam") == 0  # no picture of the first submission's code beside the second's
    assert "differ" not in report and "nbgrader autograde has not run on these" in report  # nor its in-kernel scores

    # autograde afterwards: the autograded folder already holds this submission, so it skips it
    autograde(path, env, "sam")
    feedback(path, env)
    agree(path, "sam", sam[-1], sam[:-1], MAX_SCORE)

    # sam resubmits: qkv-grade then autograde
    sam.append(hand_in(path, "sam", 3, NO_SCALING, 3))
    qkv_grade(path, env)
    autograde(path, env, "sam")
    feedback(path, env)
    third = agree(path, "sam", sam[-1], sam[:-1])
    assert sum(third.values()) < MAX_SCORE and third != first

    # sam resubmits: autograde then qkv-grade
    sam.append(hand_in(path, "sam", 4, [], 4))
    autograde(path, env, "sam")
    qkv_grade(path, env)
    feedback(path, env)
    agree(path, "sam", sam[-1], sam[:-1], MAX_SCORE)
    agree(path, "tia", tia[-1], tia[:-1], MAX_SCORE)


def test_a_resubmission_that_makes_no_notebook_leaves_no_folder_of_the_one_before(course):
    from nbgrader import utils
    from nbgrader.api import Gradebook

    path, env = course
    hand_in(path, "uma", 1, [], 1)
    qkv_grade(path, env)
    assert (path / "autograded" / "uma" / ASSIGNMENT / NOTEBOOK).exists()
    (path / "submitted" / "uma" / ASSIGNMENT / NOTEBOOK).write_text("{ not a notebook")
    (path / "submitted" / "uma" / ASSIGNMENT / "timestamp.txt").write_text("2026-12-09 12:00:00.000000 UTC")
    report = qkv_grade(path, env)
    assert "uma" in report
    assert not (path / "autograded" / "uma" / ASSIGNMENT).exists()
    assert sum(gradebook_scores(path)["uma"].values()) == 0
    with Gradebook(f"sqlite:///{path / 'gradebook.db'}") as gradebook:
        when = gradebook.find_submission(ASSIGNMENT, "uma").timestamp
    assert utils.parse_utc(when) == utils.parse_utc("2026-12-09 12:00:00.000000 UTC")
    nothing_temporary(path)
