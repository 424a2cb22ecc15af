"""`qkv-grade --nbgrader` writes a course as one transaction: one run at a time, the gradebook
committed once, and the autograded notebooks put in place only once the gradebook holds their
scores. Real nbgrader commands and a real gradebook, on a small course without autograde."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import (ASSIGNMENT, IN_CI, NOTEBOOK, build_course, gradebook_scores, notebook_scores, read_only,
                     variant)

try:
    import nbgrader  # noqa: F401
except ImportError:
    if IN_CI:
        raise
    pytest.skip("nbgrader is not installed (pip install -e '.[nbgrader]')", allow_module_level=True)

# Under pytest-xdist, one worker runs the module: its course is built once.
pytestmark = pytest.mark.xdist_group("gradebook")

NO_SCALING = [("s = d / np.sqrt(d_k)  # [T, T]", "s = d  # [T, T]")]
STUDENTS = {"ann": [], "bo": NO_SCALING, "cy": [], "di": NO_SCALING}


def trusted_run(course: Path, env: dict, *more: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "autograder.cli", "--nbgrader", str(course), ASSIGNMENT,
                             "--timeout", "0.5", *more], cwd=course.parent, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def fresh_course(tmp_path_factory):
    """A course after generate_assignment, with four submitted notebooks and nothing graded."""
    return build_course(tmp_path_factory.mktemp("gradebook"),
                        {student: variant(replacements) for student, replacements in STUDENTS.items()})


@pytest.fixture
def course(fresh_course, tmp_path):
    path, env = fresh_course
    copy = tmp_path / "course"
    shutil.copytree(path, copy)
    return copy, env


def agree(course: Path) -> dict[str, dict[str, float]]:
    """Each student's gradebook scores, checked to be set and shown by their autograded notebook."""
    scores = gradebook_scores(course)
    assert sorted(scores) == sorted(STUDENTS)
    for student, steps in scores.items():
        assert None not in steps.values(), student
        assert notebook_scores(course / "autograded" / student / ASSIGNMENT / NOTEBOOK) == steps, student
    assert not list(course.glob(f".qkv-grade/{ASSIGNMENT}/pending/*"))
    return scores


def test_two_runs_at_once_on_a_fresh_gradebook_take_turns(course):
    path, env = course
    first, second = trusted_run(path, env), trusted_run(path, env)
    outputs = [process.communicate(timeout=300) for process in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outputs
    assert "Traceback" not in outputs[0][1] + outputs[1][1]
    waited = [err for _, err in outputs if "waiting for another run" in err]
    assert len(waited) == 1 and len(waited[0].strip().splitlines()) == 1
    scores = agree(path)
    assert scores["ann"] != scores["bo"]


def test_a_built_folder_replaces_the_old_one_only_if_the_gradebook_holds_what_its_record_says(course):
    import json

    import nbformat
    from nbgrader.api import Gradebook

    from autograder import nbgrader_trusted as trusted

    path, env = course
    done = trusted_run(path, env)
    assert done.wait(timeout=300) == 0, done.communicate()
    before = agree(path)
    coursedir, _ = trusted.course_directory(path)
    pending = {}
    with Gradebook(coursedir.db_url) as gradebook:
        views = {student: trusted._gradebook_view(gradebook, ASSIGNMENT, student) for student in ("ann", "bo")}
    views["bo"]["grades"]["check-scale"] = 99.0  # ann's record says what the gradebook holds, bo's does not
    for student in ("ann", "bo"):
        pending[student] = trusted._pending(coursedir, ASSIGNMENT, student)
        shutil.copytree(path / "autograded" / student / ASSIGNMENT, pending[student])
        target = pending[student] / NOTEBOOK
        notebook = nbformat.read(target, as_version=nbformat.NO_CONVERT)
        notebook.metadata["qkv"]["marker"] = student
        target.chmod(0o644)
        nbformat.write(notebook, target)
        (pending[student].parent / f"{pending[student].name}.json").write_text(json.dumps(
            {"student": student, "sha256": trusted._digest(target), "in_kernel": None,
             "trusted_scores": notebook.metadata["qkv"]["trusted_scores"],
             "files": trusted._contents(pending[student]), "gradebook": views[student]}))
    (pending["ann"].parent / "leftover").mkdir()  # a folder a killed run was building: no record
    settled = trusted.settle_pending(coursedir, ASSIGNMENT)
    assert settled == ["ann"]
    assert not list(pending["ann"].parent.iterdir())
    shown = {student: nbformat.read(path / "autograded" / student / ASSIGNMENT / NOTEBOOK, as_version=4)
             for student in ("ann", "bo")}
    assert shown["ann"].metadata["qkv"]["marker"] == "ann" and "marker" not in shown["bo"].metadata["qkv"]
    assert agree(path) == before


def test_a_read_only_course_gets_one_line_and_every_grade_on_stdout(course):
    path, env = course
    done = trusted_run(path, env, "--seed", "6")
    assert done.wait(timeout=300) == 0
    before = agree(path)
    with read_only(path):
        run = trusted_run(path, env, "--seed", "7")
        stdout, stderr = run.communicate(timeout=300)
    assert run.returncode == 3, stderr
    assert len(stderr.strip().splitlines()) == 1 and "could not write the course" in stderr
    assert "Traceback" not in stderr
    for student in STUDENTS:
        assert student in stdout
    assert "were left as they were" in stdout
    assert agree(path) == before
