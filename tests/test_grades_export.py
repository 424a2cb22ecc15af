"""`nbgrader export` in a course written by qkv-course: grades.csv's scores to two places."""
from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from support import IN_CI, jupyter_env

try:
    from nbgrader.api import Gradebook
except ImportError:
    if IN_CI:
        raise
    pytest.skip("nbgrader is not installed (pip install -e '.[nbgrader]')", allow_module_level=True)

# Step points whose float sum is not what a person adds up: 8 + 8 + 7 + 1.11 + ... prints as 57.769999999999996.
POINTS = [8.0, 8.0, 7.0, 1.11, 7.0, 1.0, 1.0, 1.33, 0.0, 8.0, 8.0, 6.0, 1.33]


def test_grades_csv_shows_every_score_to_two_places_and_a_comma_in_a_name_stays_in_its_cell(tmp_path):
    env = jupyter_env(tmp_path)
    course = tmp_path / "course"
    done = subprocess.run([sys.executable, "-m", "autograder.nbgrader_course", str(course), "--seed", "3"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sum(POINTS) != round(sum(POINTS), 2)  # the case this test is about
    # nbgrader makes the gradebook (running its migrations with the venv's alembic)
    done = subprocess.run([sys.executable, "-m", "nbgrader", "db", "student", "add", "ada",
                           "--last-name=Lovelace, Countess", "--first-name==cmd|' /C calc'!A0"],
                          cwd=course, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        gradebook.add_assignment("ps1")
        gradebook.add_notebook("attention_head", "ps1")
        for index, points in enumerate(POINTS):
            gradebook.add_grade_cell(f"check-{index}", "attention_head", "ps1", max_score=10.0, cell_type="code")
        gradebook.add_submission("ps1", "ada")
        for index, points in enumerate(POINTS):
            gradebook.find_grade(f"check-{index}", "attention_head", "ps1", "ada").auto_score = points
        gradebook.db.commit()
    done = subprocess.run([sys.executable, "-m", "nbgrader", "export"], cwd=course, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader((course / "grades.csv").open(encoding="utf-8", newline="")))
    assert len(rows) == 1
    row = rows[0]
    assert row["raw_score"] == row["score"] == f"{round(sum(POINTS), 2):g}" == "57.77"
    assert row["max_score"] == "130"
    assert row["last_name"] == "Lovelace, Countess" and row["first_name"].startswith("'=")
