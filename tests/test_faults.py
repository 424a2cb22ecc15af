"""Faults on the instructor's side: runs killed (SIGKILL) or interrupted (SIGINT) at many instants,
concurrent runs, colliding names. After each, the invariant holds:

- nothing lost: a finished run holds every submission's result, and an unfinished one is marked
  (its folder's suffix) and finished by --resume; a killed gradebook run leaves each student's
  grade as it was before or as the run computed it, never empty;
- nothing mixed: a run folder holds results of its own seed only, and its summary lists exactly
  the results beside it; the autograded notebooks show what the gradebook holds (once a killed
  run's pending notebooks are settled);
- every grade on record is one that was computed: each stored result equals the result a clean
  run with the same seed gives.

Kill instants are spread over a run: by time (during start-up), and by progress (after the k-th
result is saved, once the summary is written, once a pending notebook appears, during the
gradebook's commit).
"""
from __future__ import annotations

import csv
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import (ASSIGNMENT, IN_CI, NOTEBOOK, build_course, copy_sample_class, gradebook_scores, notebook_scores,
                     reference_source, variant)

from autograder.nbgrader_trusted import STATE_FOLDER, _key
from autograder.store import INCOMPLETE, LATEST, MANIFEST, SUMMARY, result_file

# Under pytest-xdist, one worker runs the module: its class and its courses are graded once.
pytestmark = pytest.mark.xdist_group("faults")

SEED = 21
COPIES = 10  # of the sample class less its looping submission: 60 submissions, plus two colliding names


def _steps(document: dict) -> list[tuple]:
    return [(step["id"], step["score"], step["status"], tuple(step["diagnoses"])) for step in document["steps"]]


def grade(*args: str, cwd: Path | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "autograder.cli", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def folder_class(tmp_path_factory):
    """The class, and what a clean run with SEED gives each submission."""
    root = tmp_path_factory.mktemp("faults")
    folder = copy_sample_class(root / "class", COPIES)
    (folder / "a b.py").write_text(reference_source())
    (folder / "a_b.py").write_text(variant([("s = d / np.sqrt(d_k)  # [T, T]", "s = d  # [T, T]")]))
    clean = grade(str(folder), "--out", str(root / "clean"), "--seed", str(SEED), "--format", "json")
    stdout, stderr = clean.communicate(timeout=300)
    assert clean.returncode == 0, stderr
    expected = {document["submission"]: _steps(document) for document in json.loads(stdout)}
    assert len(expected) == 6 * COPIES + 2 and expected["a b.py"] != expected["a_b.py"]
    return folder, expected


# --- the results folder ----------------------------------------------------------------------------

def check_results_folder(out: Path, expected: dict[str, list], killed: bool) -> dict[str, list]:
    """The invariant on a results folder; returns every result on record, by submission."""
    on_record: dict[str, list] = {}
    if not out.exists():
        return on_record
    for run in sorted(out.iterdir()):
        if run.name == LATEST:
            target = run.resolve()
            assert target.parent == out.resolve() and not target.name.endswith(INCOMPLETE)
            assert (target / SUMMARY).is_file()
            continue
        if run.name.startswith("."):  # a killed run's half-made `latest` link: nothing to read
            assert killed and run.name.endswith(".tmp"), run
            continue
        assert run.name.startswith("run-") and run.is_dir(), run
        finished = not run.name.endswith(INCOMPLETE)
        manifest = json.loads((run / MANIFEST).read_text(encoding="utf-8"))
        assert manifest["seed"] == SEED
        results = {}
        for path in run.iterdir():
            if path.name.startswith("."):
                assert killed and not finished and path.name.endswith(".tmp"), path  # only a kill leaves one
                continue
            if path.name in (MANIFEST, SUMMARY):
                continue
            document = json.loads(path.read_text(encoding="utf-8"))  # whole, never half-written
            name = document["submission"]
            assert path.name == result_file(name) and document["seed"] == SEED
            assert _steps(document) == expected[name], name
            results[name] = document
        if finished or (run / SUMMARY).exists():
            rows = list(csv.DictReader((run / SUMMARY).open(encoding="utf-8")))
            assert {row["submission"]: row["score"] for row in rows} == \
                {name: f"{document['score']:g}" for name, document in results.items()}
        if finished:
            assert manifest["status"] == "finished" and sorted(results) == sorted(expected)
        on_record.update({name: _steps(document) for name, document in results.items()})
    return on_record


def wait_for(process: subprocess.Popen, ready, limit: float = 60) -> bool:
    """Poll until `ready()` holds or the process ends; True if it is still running."""
    deadline = time.monotonic() + limit
    while process.poll() is None and time.monotonic() < deadline:
        if ready():
            return True
        time.sleep(0.001)
    return process.poll() is None


def saved(out: Path, count: int):
    return lambda: len(list(out.glob(f"*{INCOMPLETE}/*.py.json"))) >= count


def after(seconds: float):
    start = time.monotonic()
    return lambda: time.monotonic() - start >= seconds


def exists(out: Path, pattern: str):
    return lambda: bool(list(out.glob(pattern)))


def loading(process: subprocess.Popen, library: str):
    """The grader has started its own imports: `library` is mapped into its process. (A signal
    at a fixed time after the start can land in Python's own start-up on a busy machine, before
    any of the grader's code runs, where no program can answer it but with a traceback.)"""
    def ready() -> bool:
        try:
            return library in Path(f"/proc/{process.pid}/maps").read_text()
        except OSError:
            return False
    return ready


FOLDER_INSTANTS = {
    "at-start": lambda out, process: after(0.0),
    "importing": lambda out, process: loading(process, "_multiarray_umath"),
    "building-cases": lambda out, process: after(0.25),
    "run-folder-made": lambda out, process: exists(out, f"*{INCOMPLETE}/{MANIFEST}"),
    **{f"after-{count}-saved": (lambda count: lambda out, process: saved(out, count))(count)
       for count in (1, 3, 8, 15, 25, 35, 45, 55, 61)},
    "summary-written": lambda out, process: exists(out, f"*{INCOMPLETE}/{SUMMARY}"),
    "renamed": lambda out, process: exists(out, f"run-*[0-9]/{SUMMARY}"),
}
LATE = ("after-61-saved", "summary-written", "renamed")  # the run may finish before the signal lands
INTERRUPTED = ("importing", "run-folder-made", "after-1-saved", "after-25-saved", "after-61-saved", "summary-written")


@pytest.mark.parametrize("number, instant", [(signal.SIGKILL, name) for name in FOLDER_INSTANTS]
                         + [(signal.SIGINT, name) for name in INTERRUPTED],
                         ids=lambda value: value.name if isinstance(value, signal.Signals) else value)
def test_a_folder_run_stopped_at_any_instant_loses_and_mixes_nothing(folder_class, tmp_path, number, instant):
    folder, expected = folder_class
    out = tmp_path / "out"
    process = grade(str(folder), "--out", str(out), "--seed", str(SEED), "--jobs", "2", "--format", "json")
    if wait_for(process, FOLDER_INSTANTS[instant](out, process)):
        process.send_signal(number)
    stdout, stderr = process.communicate(timeout=120)
    assert "Traceback" not in stderr, stderr
    stopped = process.returncode in (-signal.SIGKILL, 130)
    assert stopped or instant in LATE, (instant, process.returncode)  # the instant was hit, not missed
    if number == signal.SIGINT and process.returncode == 130:
        assert len(stderr.strip().splitlines()) == 1
        for document in json.loads(stdout) if stdout else []:  # the grades computed so far, each one right
            assert _steps(document) == expected[document["submission"]]
    on_record = check_results_folder(out, expected, killed=number == signal.SIGKILL)
    if not stopped:
        assert process.returncode == 0 and sorted(on_record) == sorted(expected)
        return
    # --resume finishes it (or, when the kill came before any run folder existed, says so).
    resumed = subprocess.run([sys.executable, "-m", "autograder.cli", str(folder), "--out", str(out), "--resume"],
                             capture_output=True, text=True, timeout=300)
    unfinished = list(out.glob(f"run-*{INCOMPLETE}")) if out.exists() else []
    assert not unfinished, resumed.stderr
    if resumed.returncode == 2:
        assert "no unfinished run" in resumed.stderr
        assert not [run for run in out.glob("run-*")] or instant in LATE  # it finished as the signal came
    else:
        assert resumed.returncode == 0, resumed.stderr
    final = check_results_folder(out, expected, killed=number == signal.SIGKILL)
    if out.exists() and list(out.glob("run-*")):
        assert sorted(final) == sorted(expected)


def test_concurrent_folder_runs_into_one_out_folder_stay_apart(folder_class, tmp_path):
    folder, expected = folder_class
    out = tmp_path / "out"
    processes = [grade(str(folder), "--out", str(out), "--seed", str(SEED), "--jobs", "1") for _ in range(3)]
    for process in processes:
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr
    runs = sorted(out.glob("run-*"))
    assert len(runs) == 3 and not [run for run in runs if run.name.endswith(INCOMPLETE)]
    check_results_folder(out, expected, killed=False)


# --- the nbgrader course -------------------------------------------------------------------------

# Two students whose scaling is right on some shapes only, so that the grade they get moves with the
# hidden cases a seed draws, and a run with the new seed records other grades than one with OLD_SEED
# (the first of NEW_SEEDS that does, under this machine's grading key).
STUDENTS = {"ann": [], "bo": [("s = d / np.sqrt(d_k)  # [T, T]", "s = d / np.sqrt(d_k) if d_k % 2 == 0 else d  # [T, T]")],
            "cy": [], "di": [("s = d / np.sqrt(d_k)  # [T, T]",
                              "s = d / np.sqrt(d_k) if d.shape[-1] % 2 else d / d_k  # [T, T]")],
            "ed": [], "flo": []}
OLD_SEED, NEW_SEEDS = 3, (4, 5, 6, 7, 8)


def trusted(course: Path, env: dict, seed: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "autograder.cli", "--nbgrader", str(course), ASSIGNMENT,
                             "--seed", str(seed), "--timeout", "1"], cwd=course.parent, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def courses(tmp_path_factory):
    """A fresh course, the same course graded once with OLD_SEED, and what a run with the new seed
    and one with OLD_SEED record."""
    try:
        import nbgrader  # noqa: F401
    except ImportError:
        if IN_CI:
            raise
        pytest.skip("nbgrader is not installed")
    root = tmp_path_factory.mktemp("course-faults")
    fresh, env = build_course(root, {student: variant(changes) for student, changes in STUDENTS.items()})
    graded = root / "graded"
    shutil.copytree(fresh, graded)
    scores = {}
    for seed in (OLD_SEED, *NEW_SEEDS):
        course = graded if seed == OLD_SEED else root / f"new-{seed}"
        if course != graded:
            shutil.copytree(fresh, course)
        process = trusted(course, env, seed)
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr
        scores[seed] = gradebook_scores(course)
        assert sorted(scores[seed]) == sorted(STUDENTS)
        if seed != OLD_SEED and scores[seed] != scores[OLD_SEED]:
            break
    assert scores[seed] != scores[OLD_SEED], "no seed of NEW_SEEDS draws cases that move a grade"
    return {"fresh": fresh, "graded": graded, "env": env, "old": scores[OLD_SEED], "new": scores[seed], "seed": seed}


def check_course(course: Path, previous: dict, new: dict, settled: bool) -> None:
    """Each student's grade is the previous one or the new one, never empty, and the autograded
    notebook (or, before a later run settles it, the pending one) shows it."""
    scores = gradebook_scores(course)
    for student in STUDENTS:
        got = scores.get(student)
        assert got in ([previous[student], new[student]] if student in previous else [None, new[student]]), student
        if got is None:
            continue
        assert None not in got.values(), student
        folder = course / "autograded" / student / ASSIGNMENT
        shown = notebook_scores(folder / NOTEBOOK) if (folder / NOTEBOOK).exists() else None
        pending = course / STATE_FOLDER / ASSIGNMENT / "pending" / _key(student) / NOTEBOOK
        if settled:
            assert shown == got and not pending.exists(), student
        else:
            assert shown == got or (pending.exists() and notebook_scores(pending) == got), student


def course_instant(course: Path, name: str):
    pending = f"{STATE_FOLDER}/{ASSIGNMENT}/pending/*/{NOTEBOOK}"
    return {
        "starting": after(0.3),
        "grading": after(1.2),
        "first-pending": exists(course, pending),
        "all-pending": lambda: len(list(course.glob(pending))) >= len(STUDENTS),
        "committing": exists(course, "gradebook.db-journal"),
        "renaming": lambda: 0 < len(list(course.glob(pending))) < len(STUDENTS),
    }[name]


@pytest.mark.parametrize("start, number, instant", [
    ("graded", signal.SIGKILL, "grading"), ("graded", signal.SIGKILL, "first-pending"),
    ("graded", signal.SIGKILL, "committing"), ("graded", signal.SIGKILL, "renaming"),
    ("fresh", signal.SIGKILL, "committing"),
    ("graded", signal.SIGINT, "all-pending"), ("fresh", signal.SIGINT, "committing"),
], ids=lambda value: value.name if isinstance(value, signal.Signals) else value)
def test_a_gradebook_run_stopped_at_any_instant_keeps_each_grade_whole(courses, tmp_path, start, number, instant):
    previous = courses["old"] if start == "graded" else {}
    # The instant is seen by polling: on a busy machine a signal sent as the commit's journal
    # appears can land once the run is over (it then ends 0, untouched). Such a try shows nothing,
    # and the run is tried afresh, a few times at most.
    for attempt in range(5):
        course = tmp_path / f"course{attempt}"
        shutil.copytree(courses[start], course)
        process = trusted(course, courses["env"], courses["seed"])
        if wait_for(process, course_instant(course, instant), limit=120):
            process.send_signal(number)
        _, stderr = process.communicate(timeout=300)
        assert "Traceback" not in stderr, stderr
        if process.returncode != 0 or instant == "renaming":
            break
    assert process.returncode != 0 or instant == "renaming", (instant, process.returncode)  # the instant was hit
    check_course(course, previous, courses["new"], settled=process.returncode == 0)
    again = trusted(course, courses["env"], courses["seed"])
    _, stderr = again.communicate(timeout=300)
    assert again.returncode == 0, stderr
    check_course(course, courses["new"], courses["new"], settled=True)
