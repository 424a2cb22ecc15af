"""The nbgrader course, end to end with the real nbgrader, a real kernel and a real gradebook.

One course is shared by the module: `qkv-course`, `nbgrader generate_assignment`, five students
who fill the release notebook (correctly; with a column-normalized softmax; with a cell that patches
numpy and plants a fake grading module; with a cell that kills its kernel; correctly, leaving two
written answers as released), `nbgrader autograde`,
`qkv-grade --nbgrader`, `nbgrader generate_feedback` and `nbgrader export`, in that order. Jupyter's
folders and HOME point into the test's temporary directory.
"""
from __future__ import annotations

import csv
import html
import io
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import tokenize
from pathlib import Path

import nbformat
import pytest

from support import (FORMGRADE, IN_CI, REPO, filled_notebook, gradebook_scores, jupyter_env, reference_source,
                     released_course, submit_notebook, variant)

from autograder import cases, diagnoses, grading, judge, nbgrader_hook, release
from autograder.nbgrader_course import NOTEBOOK, find_course, write_course, CourseError
from autograder.steps import ANSWERS, BY_ID, MAX_SCORE, STEPS
from autograder.keys import local_key

try:
    import nbgrader  # noqa: F401
except ImportError:
    if IN_CI:
        raise
    pytest.skip("nbgrader is not installed (pip install -e '.[nbgrader]')", allow_module_level=True)

from nbgrader.api import Gradebook  # noqa: E402

from autograder.nbgrader_feedback import WRAP_CSS  # noqa: E402

# Under pytest-xdist, one worker runs the module: its course goes through nbgrader once.
pytestmark = pytest.mark.xdist_group("nbgrader-course")

SEED = 11
ASSIGNMENT = "ps1"
NOTEBOOK_ID = Path(NOTEBOOK).stem
COLUMN_NORMALIZED = [("shifted = s - s.max(axis=-1, keepdims=True)", "shifted = s - s.max(axis=-2, keepdims=True)"),
                     ("a = e / e.sum(axis=-1, keepdims=True)", "a = e / e.sum(axis=-2, keepdims=True)")]
# Patches numpy, then plants a grading module that hands out every step's points.
CHEAT = """\
import json, sys, types
import numpy as np
np.allclose = lambda *args, **kwargs: True
points = {step["id"]: step["points"] for step in json.load(open("steps.json"))["steps"]}
fake = types.ModuleType("autograder.nbgrader_hook")
fake.check = lambda step_id, *functions: points[step_id]
sys.modules["autograder.nbgrader_hook"] = fake"""
# Prints what the hidden graders expect on a hidden case, from inside the kernel during autograde.
LEAK = """\
from pathlib import Path
from autograder import cases, nbgrader_course
from solutions import attention_head as reference
course = nbgrader_course.find_course(Path.cwd())
seed, key = nbgrader_course.course_seed(course), nbgrader_course.course_key(course)
hidden = cases.build(seed, key)["softmax"][2].calls[0].args[0]
print("leaked:", [f"{x:.6g}" for x in reference.softmax_rows(hidden).ravel()])"""
GARBAGE_QKV = [("    q = x @ w_q  #", "    return x, x, x\n    q = x @ w_q  #")]
KILLER = "import os\nos._exit(0)\n"  # at the top of the exercise 3 cell, before its functions
UNANSWERED = [name for name, _ in ANSWERS[:2]]  # the written answers erin leaves as released


# --- building the course ------------------------------------------------------------------------

def _run(argv: list[str], cwd: Path, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _nbgrader(command: str, course: Path, env: dict, *more: str) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "nbgrader", command, ASSIGNMENT, *more], course, env)


def _unanswered(notebook, release_notebook: Path, names: list[str]):
    """The notebook with the written answers `names` put back as the release has them."""
    released = {cell.metadata.get("nbgrader", {}).get("grade_id"): cell.source
                for cell in nbformat.read(release_notebook, as_version=4).cells}
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") in {f"answer-{name}" for name in names}:
            cell.source = released[cell.metadata.nbgrader.grade_id]
    return notebook


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The course after the whole flow; each command's output is kept for the tests to read."""
    root = tmp_path_factory.mktemp("nbgrader")
    path, env, released = released_course(root, SEED)
    cheat = filled_notebook(released, variant(GARBAGE_QKV))
    cheat.cells[3:3] = [nbformat.v4.new_code_cell(CHEAT), nbformat.v4.new_code_cell(LEAK)]
    students = {
        "alice": filled_notebook(released, reference_source()),
        "bob": filled_notebook(released, variant(COLUMN_NORMALIZED)),
        "carol": cheat,
        "dave": filled_notebook(released, reference_source(), {"shifted_output": KILLER}),
        "erin": _unanswered(filled_notebook(released, reference_source()), released, UNANSWERED),
    }
    submitted = {student: submit_notebook(path, student, notebook) for student, notebook in students.items()}

    started = time.perf_counter()
    autograde = _nbgrader("autograde", path, env)
    autograde_seconds = time.perf_counter() - started
    in_kernel = gradebook_scores(path)
    answers_in_kernel = _answer_records(path)
    carol_in_kernel = (path / "autograded" / "carol" / ASSIGNMENT / NOTEBOOK).read_text()
    bob_in_kernel = (path / "autograded" / "bob" / ASSIGNMENT / NOTEBOOK).read_text()
    # The feedback of autograde alone, before the trusted grading rewrites anything.
    feedback = _nbgrader("generate_feedback", path, env, "--student", "bob")
    assert feedback.returncode == 0, feedback.stderr
    page = (path / "feedback" / "bob" / ASSIGNMENT / NOTEBOOK).with_suffix(".html")
    bob_feedback_in_kernel = page.read_text(encoding="utf-8")
    shutil.rmtree(path / "feedback")
    started = time.perf_counter()
    trusted = _run([sys.executable, "-m", "autograder.cli", "--nbgrader", str(path), ASSIGNMENT], root, env)
    trusted_seconds = time.perf_counter() - started
    assert trusted.returncode == 0, trusted.stderr
    feedback = _nbgrader("generate_feedback", path, env)
    assert feedback.returncode == 0, feedback.stderr
    export = _run([sys.executable, "-m", "nbgrader", "export"], path, env)
    assert export.returncode == 0, export.stderr
    return {"path": path, "root": root, "env": env, "submitted": submitted, "autograde": autograde,
            "in_kernel": in_kernel, "answers_in_kernel": answers_in_kernel, "carol_in_kernel": carol_in_kernel, "trusted": trusted, "seconds": (autograde_seconds, trusted_seconds),
            "bob_in_kernel": bob_in_kernel, "bob_feedback_in_kernel": bob_feedback_in_kernel}


def _answer_records(course: Path) -> dict[str, dict[str, tuple]]:
    """Student -> written answer -> (auto score, needs manual grade, auto comment) in the gradebook."""
    records = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for submission in gradebook.find_assignment(ASSIGNMENT).submissions:
            student = submission.student.id
            records[student] = {}
            for name, _ in ANSWERS:
                grade = gradebook.find_grade(f"answer-{name}", NOTEBOOK_ID, ASSIGNMENT, student)
                comment = gradebook.find_comment(f"answer-{name}", NOTEBOOK_ID, ASSIGNMENT, student)
                records[student][name] = (grade.auto_score, grade.needs_manual_grade, comment.auto_comment)
    return records


@pytest.fixture(scope="module")
def oracle(course):
    """What qkv-grade says, with the course's seed, about each submitted notebook."""
    done = _run([sys.executable, "-m", "autograder.cli", str(course["path"] / "submitted"), "--format", "json",
                 "--seed", str(SEED), "--out", str(course["root"] / "qkv-results")], course["root"], course["env"])
    assert done.returncode == 0, done.stderr
    return {result["submission"].split("/")[0]: {step["id"]: step for step in result["steps"]}
            for result in json.loads(done.stdout)}


def _feedback_text(course, student: str) -> str:
    page = (course["path"] / "feedback" / student / ASSIGNMENT / NOTEBOOK).with_suffix(".html")
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))


def _differing(report: str) -> set[str]:
    """The students the trusted report lists as having a different in-kernel result."""
    block = report.split("differ from these", 1)[1].split("\n\n", 1)[0] if "differ from these" in report else ""
    return {line.split(":")[0].strip() for line in block.splitlines()[1:] if line.startswith("  ")}


# --- the source notebook ------------------------------------------------------------------------

def _source_cells():
    return release.notebook_cells("nbgrader")


def test_the_source_notebook_has_a_solution_cell_per_function_and_a_test_cell_per_step():
    cells = _source_cells()
    solutions = [c for c in cells if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"]
    names = [re.match(r"def (\w+)", c.source).group(1) for c in solutions]
    assert names == list(dict.fromkeys(name for step in STEPS for name in step.functions))
    assert all("### BEGIN SOLUTION" in c.source and "### END SOLUTION" in c.source for c in solutions)
    tests = {c.metadata["nbgrader"]["grade_id"]: c for c in cells
             if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"}
    assert list(tests) == [release.check_cell_id(step.id) for step in STEPS]
    for step in STEPS:
        cell = tests[release.check_cell_id(step.id)]
        assert cell.metadata["nbgrader"]["points"] == step.points and cell.metadata["nbgrader"]["locked"]
        hidden = cell.source.split("### BEGIN HIDDEN TESTS\n")[1].split("\n### END HIDDEN TESTS")[0]
        assert hidden == "from autograder.nbgrader_hook import check"
        assert cell.source.endswith(f'check("{step.id}", {", ".join(step.functions)})')


def test_the_source_notebook_has_a_locked_setup_and_five_answers_with_the_reference_as_rubric():
    cells = _source_cells()
    setup = next(c for c in cells if c.get("id") == "setup")
    assert setup.metadata["nbgrader"]["locked"] and not setup.metadata["nbgrader"]["grade"]
    answers = [c for c in cells if c.cell_type == "markdown" and c.metadata.get("nbgrader", {}).get("grade")]
    assert [c.metadata["nbgrader"]["grade_id"] for c in answers] == [f"answer-{name}" for name, _ in ANSWERS]
    reference = release.reference_answers(release.REFERENCE.read_text())
    for cell, (name, _) in zip(answers, ANSWERS):
        assert cell.metadata["nbgrader"]["solution"] and reference[name] in cell.source
    notebook = nbformat.reads(release.notebook_text(cells), as_version=4)
    assert notebook.metadata.kernelspec.name == "python3"


def test_qkv_course_keeps_a_course_seed_and_will_not_overwrite_an_assignment_by_accident(tmp_path):
    write_course(tmp_path, "hw1", seed=3)
    assert find_course(tmp_path / "source" / "hw1") == tmp_path
    with pytest.raises(CourseError, match="already exists"):
        write_course(tmp_path, "hw1")
    with pytest.raises(CourseError, match="already fixes the seed 3"):
        write_course(tmp_path, "hw2", seed=4)
    write_course(tmp_path, "hw2")
    assert json.loads((tmp_path / "qkv_course.json").read_text()) == {"seed": 3, "key": local_key().hex()}
    with pytest.raises(CourseError, match="not a usable assignment name"):
        write_course(tmp_path, "../escape")


def test_the_course_s_seed_and_key_are_readable_by_their_owner_alone(tmp_path):
    """The key and the seed give every hidden case: like the key in ~/.config, the course's copy
    is its owner's alone, whether written new or given its key later (an older course's file)."""
    import stat

    write_course(tmp_path / "new", "hw1", seed=3)
    assert stat.S_IMODE((tmp_path / "new" / "qkv_course.json").stat().st_mode) == 0o600
    older = tmp_path / "older"
    older.mkdir()
    (older / "qkv_course.json").write_text(json.dumps({"seed": 4}))
    (older / "qkv_course.json").chmod(0o644)
    write_course(older, "hw1")
    assert stat.S_IMODE((older / "qkv_course.json").stat().st_mode) == 0o600
    assert json.loads((older / "qkv_course.json").read_text()) == {"seed": 4, "key": local_key().hex()}


def test_a_new_course_is_its_owners_alone_and_an_older_config_is_told_what_to_add(tmp_path):
    """The gradebook and every student's work lie below the course folder; nbgrader's exchange is a
    folder of its own. A course whose nbgrader_config.py predates LinkSafeCollect is told the line."""
    import stat

    done = write_course(tmp_path / "new", "hw1", seed=3)
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    assert "LinkSafeCollect" in (tmp_path / "new" / "nbgrader_config.py").read_text()
    assert not any("predates" in line for line in done)
    older = tmp_path / "older"
    older.mkdir(mode=0o755)
    (older / "nbgrader_config.py").write_text("c = get_config()\n")
    done = write_course(older, "hw1", seed=4)
    assert stat.S_IMODE(older.stat().st_mode) == 0o755  # a folder it did not make is left as it is
    assert any("c.ExchangeFactory.collect = \"autograder.nbgrader_exchange.LinkSafeCollect\"" in line for line in done)


def test_the_hook_outside_a_kernel_prints_feedback_and_returns_a_number(capsys):
    try:
        score = nbgrader_hook.check("softmax")
        printed = capsys.readouterr()
        assert score == 0.0 and printed.err == ""
        assert printed.out.startswith("softmax: 0 / 10, not_implemented")
        assert nbgrader_hook.check("no-such-step") == 0.0
    finally:  # a kernel ends its worker when it exits; this test process lives on
        nbgrader_hook._close()


# --- the release --------------------------------------------------------------------------------

def test_the_release_holds_the_student_notebook_and_no_solution_or_hidden_test(course):
    released = nbformat.read(course["path"] / "release" / ASSIGNMENT / NOTEBOOK, as_version=4)
    student = release.notebook_cells("student")
    assert [c.source for c in released.cells] == [c.source for c in student]
    text = (course["path"] / "release" / ASSIGNMENT / NOTEBOOK).read_text()
    for marker in ("BEGIN SOLUTION", "HIDDEN TESTS", "nbgrader_hook", "autograder", "Reference answer"):
        assert marker not in text
    for line in _solution_lines():
        assert line not in text, line


def _solution_lines() -> list[str]:
    lines, inside = [], False
    for line in release.REFERENCE.read_text().splitlines():
        if line.strip() in ("### BEGIN SOLUTION", "### END SOLUTION"):
            inside = line.strip() == "### BEGIN SOLUTION"
        elif inside and len(line.strip()) > 12 and not line.strip().startswith("#"):
            lines.append(line.strip())
    return lines


# --- autograde and the gradebook ----------------------------------------------------------------

def test_a_correct_notebook_gets_every_auto_graded_point_in_the_gradebook(course):
    trusted = gradebook_scores(course["path"])["alice"]
    assert trusted == {step.id: step.points for step in STEPS}
    assert course["in_kernel"]["alice"] == trusted  # nbgrader autograde agreed
    assert sum(trusted.values()) == MAX_SCORE


def test_a_column_normalized_notebook_loses_the_softmax_points_the_grader_says(course, oracle):
    expected = oracle["bob"]["softmax"]
    assert "column-normalized" in expected["diagnoses"] and expected["score"] < BY_ID["softmax"].points
    assert course["in_kernel"]["bob"]["softmax"] == expected["score"]
    assert gradebook_scores(course["path"])["bob"]["softmax"] == expected["score"]
    assert "bob" not in _differing(course["trusted"].stdout)


def test_the_feedback_names_the_column_normalization_and_says_to_normalize_each_row(course):
    text = _feedback_text(course, "bob")
    assert "column-normalized" in text
    assert "normalize each row" in text


def test_every_test_cell_prints_its_steps_feedback_in_the_kernel(course):
    notebook = nbformat.read(course["path"] / "autograded" / "alice" / ASSIGNMENT / NOTEBOOK, as_version=4)
    outputs = {c.metadata.nbgrader.grade_id: c.outputs for c in notebook.cells
               if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"}
    for step in STEPS:
        cell = outputs[release.check_cell_id(step.id)]
        printed = "".join(o.text for o in cell if o.output_type == "stream" and o.name == "stdout")
        assert printed.startswith(f"{step.id}: {step.points:g} / {step.points:g}, passed")
        assert [o.output_type for o in cell if o.output_type != "stream"] == []  # no score echo


def _reader_leftovers(text: str) -> list[str]:
    """What no reader should meet in a graded notebook or its feedback."""
    return [marker for marker in ("HIDDEN TESTS", "nbgrader_hook", "Out[", "execute_result")
            if marker in text]


def test_autograde_alone_leaves_no_hidden_line_or_score_echo_for_formgrader_or_feedback(course):
    assert _reader_leftovers(course["bob_in_kernel"]) == []
    notebook = nbformat.reads(course["bob_in_kernel"], as_version=4)
    # ... while nbgrader still took the partial credit, and the comparison can still read it.
    assert notebook.metadata.qkv.in_kernel["softmax"] == course["in_kernel"]["bob"]["softmax"] < BY_ID["softmax"].points
    text = html.unescape(re.sub(r"<[^>]+>", "", course["bob_feedback_in_kernel"]))
    assert _reader_leftovers(text) == []
    assert "column-normalized" in text




def test_formgrader_wraps_the_feedback_of_autograde_alone_as_it_wraps_the_trusted_one(course, tmp_path):
    notebook = tmp_path / NOTEBOOK
    notebook.write_text(course["bob_in_kernel"], encoding="utf-8")
    done = _run([sys.executable, "-c", FORMGRADE, str(notebook)], course["path"], course["env"])
    assert done.returncode == 0, done.stderr
    head, body = done.stdout.split("<body", 1)
    assert WRAP_CSS in head
    # The in-kernel feedback sits in the output areas those styles wrap (the browser test measures
    # them on the trusted notebook, which formgrader renders the same way).
    assert re.search(r'<div class="output_area">\s*<div class="prompt"></div>\s*<div class="output_subarea[^"]*">'
                     r'\s*<pre>softmax: [\d.]+ / 10, partial \[column-normalized\]', body)


def test_the_feedback_names_each_step_in_its_contents_and_waits_for_a_person_on_answers(course):
    page = (course["path"] / "feedback" / "erin" / ASSIGNMENT / NOTEBOOK).with_suffix(".html")
    text = html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))
    assert _reader_leftovers(text) == []
    for number, step in enumerate(STEPS, 1):
        assert f"Step {number}: {step.title} ({step.id}) (Score: {step.points:g}.0 / {step.points:g}.0)" in text
    assert "Test cell" not in text
    for number in range(1, len(ANSWERS) + 1):  # each answer named by its exercise, once in the contents
        assert text.count(f"Exercise {number}: written answer (Score: ") == 1, number
    # One status per answer: the same in the contents and above the answer itself.
    assert text.count("(Score: not graded yet / 2.0)") == len(ANSWERS) - len(UNANSWERED)
    assert text.count("Score: not graded yet / 2.0 (Top)") == len(ANSWERS) - len(UNANSWERED)
    assert text.count("(Score: 0.0 / 2.0)") == len(UNANSWERED)  # left blank: nbgrader gives 0
    assert text.count("Score: 0.0 / 2.0 (Top)") == len(UNANSWERED)


def test_a_notebook_that_fakes_the_grader_wins_in_the_kernel_and_gains_nothing_trusted(course, oracle):
    assert sum(course["in_kernel"]["carol"].values()) == MAX_SCORE  # nbgrader autograde was fooled
    trusted = gradebook_scores(course["path"])["carol"]
    assert trusted == {step: result["score"] for step, result in oracle["carol"].items()}
    assert trusted["qkv"] == 0.0 and sum(trusted.values()) < MAX_SCORE
    assert "carol" in _differing(course["trusted"].stdout)

    # Without the cheating cell the notebook scores the same: the cheat gained nothing.
    honest = nbformat.read(course["submitted"]["carol"], as_version=4)
    honest.cells = [cell for cell in honest.cells if cell.source not in (CHEAT, LEAK)]
    path = course["root"] / "carol-honest.ipynb"
    nbformat.write(honest, path)
    done = _run([sys.executable, "-m", "autograder.cli", str(path), "--format", "json", "--seed", str(SEED)],
                course["root"], course["env"])
    assert {step["id"]: step["score"] for step in json.loads(done.stdout)["steps"]} == trusted


def test_a_notebook_that_kills_its_kernel_keeps_its_other_steps_points(course, oracle):
    # nbgrader graded nothing, and left no autograded notebook: the trusted grading wrote one.
    assert set(course["in_kernel"].get("dave", {}).values()) <= {None}
    assert "dave" in course["trusted"].stdout.split("No in-kernel result", 1)[1]
    assert (course["path"] / "autograded" / "dave" / ASSIGNMENT / NOTEBOOK).is_file()
    trusted = gradebook_scores(course["path"])["dave"]
    assert trusted["ex3_value_shift"] == 0.0
    assert trusted == {step.id: (0.0 if step.id == "ex3_value_shift" else step.points) for step in STEPS}
    assert trusted == {step: result["score"] for step, result in oracle["dave"].items()}  # qkv-grade agrees
    assert "ex3_value_shift: 0 / 8" in _feedback_text(course, "dave")


def test_nbgrader_export_reports_the_trusted_scores(course):
    rows = {row["student_id"]: row for row in csv.DictReader((course["path"] / "grades.csv").open())}
    for student, scores in gradebook_scores(course["path"]).items():
        assert float(rows[student]["raw_score"]) == pytest.approx(sum(scores.values()), abs=0.005)
        for column in ("raw_score", "score", "max_score"):  # to two places, as every other view shows it
            assert re.fullmatch(r"\d+(\.\d{1,2})?", rows[student][column]), rows[student]
    assert float(rows["carol"]["raw_score"]) < MAX_SCORE


def test_the_written_answers_wait_for_a_person(course):
    with Gradebook(f"sqlite:///{course['path'] / 'gradebook.db'}") as gradebook:
        for student in ("alice", "dave"):
            for name, _ in ANSWERS:
                grade = gradebook.find_grade(f"answer-{name}", NOTEBOOK_ID, ASSIGNMENT, student)
                assert grade.auto_score is None and grade.needs_manual_grade


def test_the_written_answers_are_recorded_as_nbgrader_autograde_records_them(course):
    records = _answer_records(course["path"])
    for name, _ in ANSWERS:  # an answer left as released gets no points and "No response."
        assert records["erin"][name] == ((0.0, False, "No response.") if name in UNANSWERED else (None, True, None))
    for student in ("alice", "bob", "carol", "erin"):  # those autograde ran to the end
        assert records[student] == course["answers_in_kernel"][student]
    assert records["dave"] == {name: (None, True, None) for name, _ in ANSWERS}


def test_a_graders_override_and_a_late_penalty_are_kept(course, tmp_path):
    """On a copy of the course: a manual score on a check cell, and a late submission."""
    path = tmp_path / "course"
    shutil.copytree(course["path"], path)
    with (path / "nbgrader_config.py").open("a") as config:
        config.write("c.LateSubmissionPlugin.penalty_method = 'zero'\n")
    (path / "submitted" / "bob" / ASSIGNMENT / "timestamp.txt").write_text("2024-01-11 09:00:00 UTC")
    (path / "submitted" / "alice" / ASSIGNMENT / "timestamp.txt").write_text("2024-01-09 09:00:00 UTC")
    url = f"sqlite:///{path / 'gradebook.db'}"
    with Gradebook(url) as gradebook:
        gradebook.update_or_create_assignment(ASSIGNMENT, duedate="2024-01-10 12:00:00 UTC")
        gradebook.find_grade(release.check_cell_id("softmax"), NOTEBOOK_ID, ASSIGNMENT, "alice").manual_score = 3.0
        gradebook.db.commit()
    for _ in range(2):
        done = _run([sys.executable, "-m", "autograder.cli", "--nbgrader", str(path), ASSIGNMENT],
                    course["root"], course["env"])
        assert done.returncode == 0, done.stderr
        with Gradebook(url) as gradebook:
            grade = gradebook.find_grade(release.check_cell_id("softmax"), NOTEBOOK_ID, ASSIGNMENT, "alice")
            assert (grade.auto_score, grade.manual_score, grade.needs_manual_grade) == (BY_ID["softmax"].points, 3.0, True)
            alice = gradebook.find_submission_notebook(NOTEBOOK_ID, ASSIGNMENT, "alice")
            bob = gradebook.find_submission_notebook(NOTEBOOK_ID, ASSIGNMENT, "bob")
            assert alice.late_submission_penalty is None
            assert alice.score == pytest.approx(MAX_SCORE - BY_ID["softmax"].points + 3.0)
            assert bob.late_submission_penalty == pytest.approx(bob.score) and bob.score > 0


def test_the_trusted_grading_is_faster_than_nbgrader_autograde(course):
    autograde_seconds, trusted_seconds = course["seconds"]
    assert trusted_seconds < autograde_seconds


# --- what students and the gradebook can see -----------------------------------------------------

def _judge_code_lines() -> set[str]:
    """Lines of grader code (no string literals: feedback quotes the diagnoses' wording), less
    the lines the reference solution shares with it (a student may well write those)."""
    lines, shared = set(), {line.strip() for line in release.REFERENCE.read_text().splitlines()}
    for module in (judge, cases, diagnoses, grading):
        source = Path(module.__file__).read_text()
        strings = {token.start[0] for token in tokenize.generate_tokens(io.StringIO(source).readline)
                   if token.type == tokenize.STRING}
        for number, line in enumerate(source.splitlines(), 1):
            text = line.strip()
            if len(text) > 24 and number not in strings and not text.startswith("#") and text not in shared:
                lines.add(text)
    return lines


def _hidden_values() -> set[str]:
    """Every expected value of every hidden case, as feedback would print it."""
    from solutions import attention_head as reference
    import numpy as np

    values = {False: set(), True: set()}  # by whether the case is the public example
    for step_cases in cases.build(SEED).values():
        for case in step_cases:
            for call in case.calls:
                result = getattr(reference, call.fn)(*call.args)
                parts = result.values() if isinstance(result, dict) else \
                    result if isinstance(result, tuple) else [result]
                for part in parts:
                    for x in np.ravel(np.asarray(part, dtype=float)):
                        text = f"{x:.6g}"
                        if len(text.strip("-0.")) >= 5:  # short numbers turn up anywhere
                            values[case.public].add(text)
    return values[False] - values[True]


def test_feedback_and_release_hold_no_hidden_case_value_and_no_judge_code(course):
    code, values = _judge_code_lines(), _hidden_values()
    assert len(values) > 100
    texts = {"release": (course["path"] / "release" / ASSIGNMENT / NOTEBOOK).read_text()}
    own = {"release": ""}  # what a student wrote may match grader code: that is no leak
    for student, path in course["submitted"].items():
        texts[student] = _feedback_text(course, student)
        own[student] = "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells)
    for name, text in texts.items():
        assert "Traceback (most recent call last)" not in text, name
        leaked = [line for line in code if line in text and line not in own[name]]
        assert not leaked, (name, leaked[:3])
        numbers = set(re.findall(r"-?\d+\.\d+(?:e[-+]\d+)?", text))
        assert not numbers & values, (name, sorted(numbers & values)[:5])


def test_what_student_code_printed_in_the_kernel_never_reaches_the_feedback(course):
    leaked = re.search(r"leaked: \[([^\]]*)\]", course["carol_in_kernel"])
    assert leaked, "the leaking cell should have printed in nbgrader autograde"
    values = set(re.findall(r"-?\d+\.\d+(?:e[-+]\d+)?", leaked.group(1)))
    assert values & _hidden_values()
    text = _feedback_text(course, "carol")
    assert "leaked: [" not in text and not values & set(re.findall(r"-?\d+\.\d+(?:e[-+]\d+)?", text))


def test_the_gradebook_stores_only_the_hook_line_as_hidden_test(course):
    with Gradebook(f"sqlite:///{course['path'] / 'gradebook.db'}") as gradebook:
        notebook = gradebook.find_notebook(NOTEBOOK_ID, ASSIGNMENT)
        sources = {cell.name: cell.source for cell in notebook.source_cells}
    for number, step in enumerate(STEPS, 1):
        assert sources[release.check_cell_id(step.id)] == (
            "### BEGIN HIDDEN TESTS\nfrom autograder.nbgrader_hook import check\n### END HIDDEN TESTS\n"
            f"# Check of step {number}, {step.id}: {step.title}\n"
            f'check("{step.id}", {", ".join(step.functions)})')


def test_a_second_trusted_run_changes_nothing_and_still_reports_the_in_kernel_differences(course):
    before = gradebook_scores(course["path"])
    again = _run([sys.executable, "-m", "autograder.cli", "--nbgrader", str(course["path"]), ASSIGNMENT],
                 course["root"], course["env"])
    assert again.returncode == 0, again.stderr
    assert gradebook_scores(course["path"]) == before
    assert _differing(again.stdout) == _differing(course["trusted"].stdout) == {"carol"}


def test_a_course_without_generate_assignment_is_refused_with_the_command_to_run(tmp_path):
    write_course(tmp_path / "fresh", seed=1)
    done = subprocess.run([sys.executable, "-m", "autograder.cli", "--nbgrader", str(tmp_path / "fresh"), ASSIGNMENT],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=jupyter_env(tmp_path))
    assert done.returncode == 2
    assert "nbgrader generate_assignment ps1" in done.stderr


def test_the_installed_command_finds_nbgraders_tools_without_an_activated_venv(tmp_path):
    """nbgrader runs `alembic` by name when it creates a gradebook; the venv is not on PATH here."""
    write_course(tmp_path / "fresh", seed=1)
    env = {**jupyter_env(tmp_path), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    command = Path(sysconfig.get_path("scripts")) / "qkv-grade"
    done = subprocess.run([str(command), "--nbgrader", str(tmp_path / "fresh"), ASSIGNMENT],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2 and "nbgrader generate_assignment ps1" in done.stderr
    assert (tmp_path / "fresh" / "gradebook.db").is_file()
