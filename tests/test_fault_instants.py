"""Runs killed, or failing as on a full disk, at exact instants: just before or after a chosen
rename, fsync, swap or the gradebook's commit, in the real `qkv-grade` process.

tests/faultpoints/sitecustomize.py puts the fault there (see its docstring); the grader carries no
code of its own for it. After each fault the invariant holds:

- nothing half-made is visible: every autograded/<student>/<assignment>/ folder holds its
  notebook and its timestamp.txt, and no temporary file is anywhere nbgrader looks (autograded/,
  feedback/), even after `nbgrader generate_feedback`;
- everything a student or nbgrader reads describes one submission: once what a run committed is
  settled (the first thing the next run does), each student's autograded notebook, its scores,
  its timestamp.txt and the gradebook's scores and submission time are of the same submission,
  the previous one or the latest;
- a failure says so in one line and exits with status 3;

and the next run finishes cleanly, after which every file describes each student's latest
submission and the grader's state folder holds nothing pending. For folder runs: `latest` points
at a finished run, and after the next run at the newest, with no temporary link left.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from support import (ASSIGNMENT, IN_CI, NOTEBOOK, build_course, copy_sample_class, filled_notebook, gradebook_scores,
                     notebook_scores, submit_notebook, variant)

try:
    import nbgrader  # noqa: F401
except ImportError:
    if IN_CI:
        raise
    pytest.skip("nbgrader is not installed (pip install -e '.[nbgrader]')", allow_module_level=True)

from autograder import nbgrader_trusted as trusted  # noqa: E402
from autograder.store import INCOMPLETE, LATEST, MANIFEST  # noqa: E402

FAULTS = Path(__file__).resolve().parent / "faultpoints"
NO_SCALING = [("s = d / np.sqrt(d_k)  # [T, T]", "s = d  # [T, T]")]
COLUMN_NORMALIZED = [("shifted = s - s.max(axis=-1, keepdims=True)", "shifted = s - s.max(axis=-2, keepdims=True)"),
                     ("a = e / e.sum(axis=-1, keepdims=True)", "a = e / e.sum(axis=-2, keepdims=True)")]
# What each student hands in, in order: ann and bo hand in twice (their grades change), cy once.
VERSIONS = {"ann": [[], NO_SCALING], "bo": [NO_SCALING, []], "cy": [COLUMN_NORMALIZED]}
PENDING = f".qkv-grade/{ASSIGNMENT}/pending"
KEY = "?" * 32  # the file name of a student's record in the state folder


def mark(student: str, version: int) -> str:
    return f"# {student}, submission {version}"


def stamp(version: int) -> str:
    return f"2026-12-{version + 1:02d} 12:00:00.000000 UTC"


def hand_in(course: Path, student: str, version: int) -> None:
    """The student's submission `version` (counting from 1): a comment naming it in their softmax,
    and the timestamp.txt `nbgrader collect` writes."""
    folder = course / "submitted" / student / ASSIGNMENT
    if folder.exists():
        shutil.rmtree(folder)
    released = course / "release" / ASSIGNMENT / NOTEBOOK
    notebook = filled_notebook(released, variant(VERSIONS[student][version - 1]),
                               {"softmax_rows": mark(student, version) + "\n"})
    submit_notebook(course, student, notebook)
    (folder / "timestamp.txt").write_text(stamp(version))


def qkv_grade(course: Path, env: dict, fault: str = "") -> subprocess.CompletedProcess:
    env = {**env, "PYTHONPATH": str(FAULTS), "QKV_FAULT": fault}
    return subprocess.run([sys.executable, "-m", "autograder.cli", "--nbgrader", str(course), ASSIGNMENT,
                           "--timeout", "1"], cwd=course.parent, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def courses(tmp_path_factory):
    """A course where everyone has handed in once ("fresh"), the same graded ("graded"), then ann
    and bo handing in again ("again"); and the scores of a clean run on the first and the last."""
    root = tmp_path_factory.mktemp("fault-instants")
    fresh, env = build_course(root, {})
    for student in VERSIONS:
        hand_in(fresh, student, 1)
    graded, again, clean = root / "graded", root / "again", root / "clean"
    shutil.copytree(fresh, graded)
    done = qkv_grade(graded, env)
    assert done.returncode == 0, done.stderr
    shutil.copytree(graded, again)
    for student, versions in VERSIONS.items():
        if len(versions) > 1:
            hand_in(again, student, len(versions))
    shutil.copytree(again, clean)
    done = qkv_grade(clean, env)
    assert done.returncode == 0, done.stderr
    old, new = gradebook_scores(graded), gradebook_scores(clean)
    assert old["ann"] != new["ann"] and old["bo"] != new["bo"] and old["cy"] == new["cy"]
    return {"fresh": fresh, "again": again, "env": env, "old": old, "new": new}


# --- what is read -------------------------------------------------------------------------------

def nothing_half_made(course: Path) -> None:
    for folder in (course / "autograded").glob(f"*/{ASSIGNMENT}"):
        assert (folder / NOTEBOOK).is_file() and (folder / "timestamp.txt").is_file(), folder
    for where in ("autograded", "feedback"):
        for path in (course / where).rglob("*") if (course / where).exists() else []:
            assert not path.name.endswith(".tmp") and "pending" not in path.name, path


def described(course: Path) -> dict[str, tuple[int, dict, str] | None]:
    """Student -> (the submission their autograded notebook holds, its scores, its timestamp.txt),
    None where they have no autograded folder."""
    found = {}
    for student in VERSIONS:
        folder = course / "autograded" / student / ASSIGNMENT
        if not folder.exists():
            found[student] = None
            continue
        code = "\n".join(cell.source for cell in nbformat.read(folder / NOTEBOOK, as_version=4).cells)
        versions = [int(number) for number in re.findall(rf"# {student}, submission (\d+)", code)]
        assert len(versions) == 1, (student, versions)
        found[student] = (versions[0], notebook_scores(folder / NOTEBOOK), (folder / "timestamp.txt").read_text())
    return found


def recorded(course: Path) -> dict[str, tuple[dict, str]]:
    """Student -> (their scores in the gradebook, the submission's time as nbgrader collect writes it)."""
    from nbgrader.api import Gradebook

    scores = gradebook_scores(course)
    found = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student in scores:
            when = gradebook.find_submission(ASSIGNMENT, student).timestamp
            found[student] = (scores[student], when.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
    return found


def one_submission_each(course: Path, courses: dict, latest: dict[str, int] | None) -> None:
    """Every student's autograded folder and gradebook entry describe one submission, with the
    scores a clean run gives it: the one `latest` names, where given."""
    shown, kept = described(course), recorded(course)
    for student in VERSIONS:
        if student not in kept:  # never committed: nothing in autograded/ either
            assert latest is None and shown[student] is None, student
            continue
        scores, when = kept[student]
        assert shown[student] is not None, student
        version, notebook, timestamp = shown[student]
        assert (notebook, timestamp) == (scores, when) and when == stamp(version), student
        assert scores == (courses["old"] if version == 1 else courses["new"])[student], student
        if latest is not None:
            assert version == latest[student], student


def once_settled(course: Path, tmp_path: Path, courses: dict) -> None:
    """What nbgrader reads once the next run has settled what this one committed (the check is
    made on a copy, settled in this process, so that the next run starts from the state left)."""
    copy = tmp_path / "settled"
    shutil.copytree(course, copy, symlinks=True)
    coursedir, _ = trusted.course_directory(copy)
    trusted.settle_pending(coursedir, ASSIGNMENT)
    nothing_half_made(copy)
    one_submission_each(copy, courses, None)
    assert not list(copy.glob(f"{PENDING}/*"))


def feedback(course: Path, env: dict) -> None:
    done = subprocess.run([sys.executable, "-m", "nbgrader", "generate_feedback", ASSIGNMENT], cwd=course,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


# --- the instants -------------------------------------------------------------------------------

TMP_NOTEBOOK = f"*/{PENDING}/*/.{NOTEBOOK}.*.tmp"
BUILT_NOTEBOOK = f"*/{PENDING}/*/{NOTEBOOK}"
KILLED = -signal.SIGKILL
INSTANTS = {
    # name: (start, fault, exit status, whether the page from generate_feedback is checked too)
    "writing-a-pending-notebook": ("again", f"fsync:before:{TMP_NOTEBOOK}:2:kill", KILLED, True),
    "a-pending-notebook-written": ("again", f"replace:after:{BUILT_NOTEBOOK}:2:kill", KILLED, False),
    "a-record-written": ("again", f"replace:after:*/{PENDING}/*.json:1:kill", KILLED, False),
    "before-the-commit": ("again", "commit:before::1:kill", KILLED, False),
    "after-the-commit": ("again", "commit:after::1:kill", KILLED, True),
    "after-the-first-swap": ("again", "exchange:after:*/autograded/*:1:kill", KILLED, False),
    "syncing-after-a-swap": ("again", "fsync:after:*/autograded/*:2:kill", KILLED, False),
    "moving-a-record": ("again", f"replace:before:*/{ASSIGNMENT}/{KEY}.json:2:kill", KILLED, False),
    "moved-aside-without-exchange": ("again", "exchange:before:*:0:refuse;rename:after:*/pending/*.old:1:kill",
                                     KILLED, False),
    "put-in-place-without-exchange": ("again", "exchange:before:*:0:refuse;rename:after:*/autograded/*:1:kill",
                                      KILLED, False),
    "full-disk-building": ("again", f"replace:before:{BUILT_NOTEBOOK}:2:enospc", 3, False),
    "full-disk-after-the-commit": ("again", "exchange:before:*:1:enospc", 3, False),
    "fresh-building": ("fresh", f"replace:after:{BUILT_NOTEBOOK}:1:kill", KILLED, False),
    "fresh-full-disk-copying": ("fresh", f"replace:before:*/{PENDING}/*/timestamp.txt:2:enospc", 3, False),
    "fresh-after-the-commit": ("fresh", "commit:after::1:kill", KILLED, True),
    "fresh-first-folder-in-place": ("fresh", "rename:after:*/autograded/*:1:kill", KILLED, False),
}


@pytest.mark.parametrize("instant", list(INSTANTS))
def test_a_run_stopped_at_an_exact_instant_leaves_one_submission_in_every_file(courses, tmp_path, instant):
    start, fault, status, pages = INSTANTS[instant]
    course = tmp_path / "course"
    shutil.copytree(courses[start], course)
    env = courses["env"]
    done = qkv_grade(course, env, fault)
    assert done.returncode == status, (instant, done.returncode, done.stderr)  # the instant was reached
    assert "Traceback" not in done.stderr, done.stderr
    if status == 3:
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        for student in VERSIONS:
            assert student in done.stdout
        assert ("no grade changed" in done.stderr) != ("the next run puts it in place" in done.stderr), done.stderr
    nothing_half_made(course)
    if pages and (course / "autograded").exists():
        feedback(course, env)
        nothing_half_made(course)
    once_settled(course, tmp_path, courses)
    if "no grade changed" in done.stderr:  # nothing of the run is visible
        assert not list(course.glob(f"{PENDING}/*"))
        one_submission_each(course, courses, None)

    again = qkv_grade(course, env)
    assert again.returncode == 0, again.stderr
    nothing_half_made(course)
    latest = {student: 1 if start == "fresh" else len(versions) for student, versions in VERSIONS.items()}
    one_submission_each(course, courses, latest)
    assert not list(course.glob(f"{PENDING}/*"))
    if pages:
        feedback(course, env)
        nothing_half_made(course)
        for student, version in latest.items():
            folder = course / "feedback" / student / ASSIGNMENT
            page = (folder / NOTEBOOK).with_suffix(".html").read_text()
            assert mark(student, version) in page and (version == 1 or mark(student, 1) not in page), student
            assert (folder / "timestamp.txt").read_text() == stamp(version), student


# --- latest -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def folder_class(tmp_path_factory):
    return copy_sample_class(tmp_path_factory.mktemp("latest") / "class", 1)


def folder_run(folder: Path, out: Path, fault: str = "", *more: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(FAULTS), "QKV_FAULT": fault}
    return subprocess.run([sys.executable, "-m", "autograder.cli", str(folder), "--out", str(out), "--seed", "3",
                           "--jobs", "1", *more], env=env, capture_output=True, text=True, timeout=300)


def newest_finished(out: Path) -> str:
    runs = [(json.loads((run / MANIFEST).read_text())["finished"], run.name) for run in out.glob("run-*")
            if not run.name.endswith(INCOMPLETE)]
    return max(runs)[1]


@pytest.mark.parametrize("fault", [
    "rename:after:*/out/run-*[0-9]:1:kill",  # the run's folder finished, `latest` not yet switched
    f"replace:before:*/out/{LATEST}:1:kill",  # the new link made under a temporary name, not yet in place
])
def test_latest_is_a_finished_run_and_the_next_run_points_it_at_the_newest(folder_class, tmp_path, fault):
    out = tmp_path / "out"
    first = folder_run(folder_class, out)
    assert first.returncode == 0, first.stderr
    killed = folder_run(folder_class, out, fault)
    assert killed.returncode == KILLED, killed.stderr
    target = (out / LATEST).resolve()
    assert target.parent == out.resolve() and not target.name.endswith(INCOMPLETE) and (target / MANIFEST).is_file()
    resumed = folder_run(folder_class, out, "", "--resume")  # nothing to finish: it says so, and mends `latest`
    assert resumed.returncode == 2 and "no unfinished run" in resumed.stderr, resumed.stderr
    assert os.readlink(out / LATEST) == newest_finished(out)
    assert not [path for path in out.iterdir() if path.name.startswith(".")]
    assert len([run for run in out.glob("run-*") if not run.name.endswith(INCOMPLETE)]) == 2
