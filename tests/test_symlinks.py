"""No symbolic link out of the submissions: in every mode, a link (to a file or a folder) is that
submission's `unreadable` result, and its target is never opened.

The attacks: a link to a root-only token file (the token must show up nowhere), a link to the
reference solution (it must not score), a link to another student's folder, a FIFO (grading must
not block on it), and a linked extra file beside a real notebook (nbgrader's path copies no link).
"""
from __future__ import annotations

import csv
import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import (ASSIGNMENT, IN_CI, NOTEBOOK, REFERENCE, build_course, gradebook_scores, nested, qkv_grade,
                     reference_source)

FAST = ("--timeout", "0.5")


@pytest.fixture
def token(tmp_path) -> tuple[Path, str]:
    """A root-only file holding a secret."""
    value = secrets.token_hex(16)
    path = tmp_path / "token"
    path.write_text(value + "\n")
    path.chmod(0o600)
    return path, value


def everything_written(*folders: Path) -> str:
    return "\n".join(path.read_bytes().decode("utf-8", "replace")
                     for folder in folders for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


def test_a_linked_single_file_is_unreadable_and_never_opened(tmp_path, token):
    for target in (token[0], REFERENCE):
        link = tmp_path / f"{target.name}-link.py"
        link.symlink_to(target)
        done = qkv_grade(str(link), "--format", "json", "--seed", "1", *FAST)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["score"] == 0 and "symbolic link" in result["error"]
        assert {step["diagnoses"][0] for step in result["steps"]} == {"unreadable"}
        assert token[1] not in done.stdout + done.stderr


def test_links_in_a_folder_are_listed_or_unreadable_results_and_their_targets_stay_closed(tmp_path, token):
    folder, out, elsewhere = tmp_path / "class", tmp_path / "out", tmp_path / "elsewhere"
    (folder / "nested").mkdir(parents=True)
    elsewhere.mkdir()
    (elsewhere / "attention_head.py").write_text(reference_source())
    (folder / "ada.py").write_text(reference_source())
    (folder / "evil.py").symlink_to(token[0])
    (folder / "sol.py").symlink_to(REFERENCE)
    (folder / "nested" / "attention_head.py").symlink_to(REFERENCE)
    (folder / "borrowed").symlink_to(elsewhere, target_is_directory=True)
    (folder / "notes.txt").symlink_to(token[0])
    os.mkfifo(folder / "fifo.py")
    done = qkv_grade(str(folder), "--out", str(out), "--format", "json", "--seed", "1", *FAST, timeout=120)
    assert done.returncode == 0, done.stderr
    scores = {result["submission"]: (result["score"], result.get("error", "")) for result in json.loads(done.stdout)}
    assert scores["ada.py"] == (100, "")
    # in a student's folder, a link is that student's submission, unreadable; directly in the folder
    # graded, a link or a pipe named as a submission is no one's: listed, never graded as a student
    # (a classmate's million of them, at an inode each, would be as many results)
    assert scores["nested/attention_head.py"][0] == 0 and "symbolic link" in scores["nested/attention_head.py"][1]
    assert not any(name in scores for name in ("evil.py", "sol.py", "fifo.py")), scores
    assert not any("borrowed" in name for name in scores)
    summary = (out / "latest" / "summary.csv").read_text()
    assert "borrowed" in summary and "notes.txt" in summary and "symbolic link" in summary
    lines = {line.split(",")[0]: line for line in summary.splitlines()}
    for name in ("evil.py", "sol.py"):
        assert "a symbolic link: not followed, so nothing to grade" in lines[name], summary
    assert "not a regular file (a named pipe" in lines["fifo.py"], summary
    assert token[1] not in done.stdout + done.stderr + everything_written(out)


def test_a_linked_submission_on_gradescope_is_unreadable_and_never_opened(tmp_path, token):
    from test_gradescope import install, run_autograder

    bundle = tmp_path / "autograder.zip"
    assert qkv_grade("--gradescope-bundle", str(bundle), "--seed", "1", *FAST).returncode == 0
    for target in (token[0], REFERENCE):
        root = install(bundle, tmp_path / f"autograder-{target.name}")
        (root / "submission" / "attention_head.py").symlink_to(target)
        results, done = run_autograder(root)
        assert results["score"] == 0 and "symbolic link" in results["output"]
        assert token[1] not in done.stdout + done.stderr + everything_written(root / "results")


def test_links_in_an_nbgrader_course_score_nothing_and_are_never_copied_nor_deep_folders(tmp_path, token):
    try:
        import nbgrader  # noqa: F401
    except ImportError:
        if IN_CI:
            raise
        pytest.skip("nbgrader is not installed")
    course, env = build_course(tmp_path, {"ann": reference_source(), "bea": reference_source()})
    submitted = course / "submitted"
    solved = tmp_path / "solved.ipynb"  # the instructor's own filled-in notebook, outside the course
    shutil.copyfile(submitted / "ann" / ASSIGNMENT / NOTEBOOK, solved)
    (submitted / "mal" / ASSIGNMENT).mkdir(parents=True)
    (submitted / "mal" / ASSIGNMENT / NOTEBOOK).symlink_to(solved)
    (submitted / "zoe").symlink_to(submitted / "ann", target_is_directory=True)
    (submitted / "bea" / ASSIGNMENT / "secret.txt").symlink_to(token[0])
    (submitted / "bea" / ASSIGNMENT / "timestamp.txt").symlink_to(token[0])
    (submitted / "emp" / ASSIGNMENT).mkdir(parents=True)  # handed in nothing, or the notebook renamed
    (submitted / "ren" / ASSIGNMENT).mkdir(parents=True)
    shutil.copyfile(submitted / "ann" / ASSIGNMENT / NOTEBOOK, submitted / "ren" / ASSIGNMENT / "attention_head-Copy1.ipynb")
    (submitted / "bea" / ASSIGNMENT / "steps.json").unlink(missing_ok=True)
    (submitted / "bea" / ASSIGNMENT / "steps.json").mkdir()  # a folder where the source has a file
    (submitted / "bea" / ASSIGNMENT / "steps.json" / "mine.txt").write_text("x")
    (submitted / "bea" / ASSIGNMENT / "data").mkdir()
    (submitted / "bea" / ASSIGNMENT / "data" / "notes.txt").write_text("copied")
    # deeper than the recursion limit: copying stops at MAX_DEPTH and crashes nothing
    with nested(submitted / "bea" / ASSIGNMENT / "data", 1000, "deepest.txt"):
        done = subprocess.run([sys.executable, "-m", "autograder.cli", "--nbgrader", str(course), ASSIGNMENT,
                               *FAST], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    scores = {student: sum(steps.values()) for student, steps in gradebook_scores(course).items()}
    assert scores["ann"] == scores["bea"] == 100
    assert scores["mal"] == 0 and scores["zoe"] == 0
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    # handed in without the notebook: graded as nothing, with the reason (an earlier grade goes)
    assert lines["emp"].split()[1:3] == ["0", "/"] and lines["ren"].split()[1:3] == ["0", "/"], done.stdout
    assert f"its {ASSIGNMENT} folder holds no {NOTEBOOK}" in lines["emp:"], done.stdout
    assert "(only attention_head-Copy1.ipynb: rename the one to grade)" in lines["ren:"], done.stdout
    # and nbgrader export lists them, with 0, rather than leaving them out of grades.csv
    export = subprocess.run([sys.executable, "-m", "nbgrader", "export"], cwd=course, env=env,
                            capture_output=True, text=True, timeout=300)
    assert export.returncode == 0, export.stderr
    with open(course / "grades.csv", newline="") as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert float(rows["emp"]["score"]) == float(rows["ren"]["score"]) == 0.0 and rows["emp"]["timestamp"] == ""
    assert float(rows["ann"]["score"]) == 100.0
    autograded = course / "autograded"
    assert not (autograded / "bea" / ASSIGNMENT / "secret.txt").exists()
    assert (autograded / "bea" / ASSIGNMENT / "data" / "notes.txt").read_text() == "copied"
    assert not [path for path in (autograded / "bea").rglob("deepest.txt")]
    assert not [path for path in autograded.rglob("*") if path.is_symlink()]
    assert token[1] not in done.stdout + done.stderr + everything_written(autograded)
