"""The README's promises: its first two commands, its step table matching the step table, its
quote of nbgrader, the sample notebook it pictures running where it is shipped, its figures and
pictures being what the code now gives, and the routes a
newcomer follows (the student's, the nbgrader instructor's, the Gradescope one and the class
report) running as written. Each route's command lines are taken from the README's own code
blocks and run literally, one shell per block, with the venv not activated and PATH cut to the
system's folders. (The first two commands are run by .ci/run itself, and the other grading lines
by test_cli.py.)"""
from __future__ import annotations

import html
import importlib.util
import json
import logging
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import REPO, jupyter_env, readme_figures, require_readme_shows, require_sandbox

from autograder import release
from autograder.steps import ANSWERS, MAX_SCORE, STEPS

# Under pytest-xdist, one worker runs the module: the README's nbgrader route runs once.
pytestmark = pytest.mark.xdist_group("readme")

README = (REPO / "README.md").read_text()
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MARK = "::readme-line"  # what the shell prints between two of the README's commands


def test_the_readme_opens_with_the_run_command_then_the_test_command():
    commands = re.findall(r"```sh\n(.*?)\n```", README, re.S)
    assert commands[0].endswith("qkv-grade data/sample-class")
    assert commands[1].endswith("python -m pytest")
    ci = (REPO / ".ci" / "run").read_text()
    assert commands[1] in ci


def test_the_readme_step_table_matches_the_step_table():
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| ([0-9.]+) \| (§[0-9.]+) \|", README, re.M)
    assert rows == [(s.id, f"{s.points:g}", s.section) for s in STEPS]


def test_the_quoted_checksum_warning_is_the_one_nbgrader_prints():
    """The README quotes what autograde logs for each check cell; nbgrader's own code says it,
    with the grade id and both checksums elided."""
    from nbgrader.preprocessors import OverwriteCells

    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    overwrite = OverwriteCells()
    overwrite.log.addHandler(handler)
    try:
        overwrite.report_change("check-…", "checksum", "…", "…")
    finally:
        overwrite.log.removeHandler(handler)
    quoted = re.search(r"Autograde prints `([^`]*)`", README).group(1)
    assert said == [quoted]


# --- the routes, run literally -----------------------------------------------------------------

@dataclass
class Ran:
    command: str
    """The README's line, as written."""
    status: int
    output: str
    """Its stdout and stderr, interleaved."""


def _blocks_after(heading: str, count: int = 1) -> str:
    """The first `count` ```sh blocks after `heading` in the README, as one script."""
    return "\n".join(re.findall(r"```sh\n(.*?)\n```", README[README.index(heading):], re.S)[:count])


def _commands(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def run_literally(script: str, cwd: Path, env: dict[str, str]) -> list[Ran]:
    """Every command line of `script`, in order, in one bash (so a `cd` or an `export` holds for
    the lines after it), each with its own exit status and output."""
    commands = _commands(script)
    lines = ["exec 2>&1"]
    for number, command in enumerate(commands):
        lines += [f"printf '\\n{MARK} %s\\n' {number}", command, f"printf '\\n{MARK} %s %s\\n' {number} $?"]
    done = subprocess.run(["bash", "-uc", "\n".join(lines)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    found = re.findall(rf"\n{MARK} (\d+)\n(.*?)\n{MARK} \1 (\d+)\n", "\n" + done.stdout, re.S)
    assert len(found) == len(commands), done.stdout[-3000:] + done.stderr[-3000:]
    return [Ran(command, int(status), output) for command, (_, output, status) in zip(commands, found)]


def _ran(runs: list[Ran], words: str) -> list[Ran]:
    """The runs of the README's lines that hold `words`; there must be at least one."""
    found = [run for run in runs if words in run.command]
    assert found, f"no line of the README's block holds {words!r}"
    return found


def _succeeded(runs: list[Ran], but: tuple[str, ...] = ()) -> None:
    for run in runs:
        if not any(words in run.command for words in but):
            assert run.status == 0, f"{run.command}\n{run.output[-3000:]}"


def _validate_failed(run: Ran) -> list[str]:
    """The step ids of the check cells `nbgrader validate` reports failing; it must report failure."""
    assert run.status == 0, run.output[-3000:]  # nbgrader validate says what failed, not its status
    assert "Success!" not in run.output, run.output[-3000:]
    reported = re.search(r"VALIDATION FAILED ON (\d+) CELL\(S\)", run.output)
    assert reported, run.output[-3000:]
    # each cell's report, up to nbgrader's own log lines after the last one (where a kernel shutting
    # down may log a traceback of its own, no cell's)
    cells = [cell.split("\n[ValidateApp")[0] for cell in run.output.split("The following cell failed:")[1:]]
    assert len(cells) == int(reported.group(1))
    for cell in cells:
        for unexpected in ("ModuleNotFoundError", "NameError", "Traceback"):
            assert unexpected not in cell, cell
    return [step for cell in cells for step in re.findall(r'check\("(\w+)"', cell)]


def _root(tmp_path: Path, *linked: str) -> dict[str, str]:
    """tmp_path laid out like the repository's root (the venv and `linked` as links to the real
    ones) and the environment a reader's shell has: the venv not activated, PATH the system's."""
    (tmp_path / ".venv").symlink_to(Path(sysconfig.get_path("scripts")).parent)
    for name in linked:
        (tmp_path / name).symlink_to(REPO / name)
    return {**jupyter_env(tmp_path), "PATH": SYSTEM_PATH}


def _sample_failing_steps() -> list[str]:
    """The steps whose check the sample notebook fails, as the public checks judge it."""
    spec = importlib.util.spec_from_file_location("readme_public_checks", release.PUBLIC / "public_checks.py")
    checks = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = checks  # dataclasses look their module up there
    try:
        spec.loader.exec_module(checks)
        checks.HERE = release.RELEASE
        namespace = checks.load_submission(release.SAMPLE / "attention_head.ipynb").namespace
        return [step.id for step in STEPS if checks.run_step(step.id, namespace).status != "passed"]
    finally:
        del sys.modules[spec.name]


def test_the_students_route_runs_as_written_and_validate_fails_the_unfilled_notebook(tmp_path):
    env = _root(tmp_path)
    shutil.copytree(release.RELEASE, tmp_path / "assignments" / "attention_head",
                    ignore=shutil.ignore_patterns(*release.IGNORED))
    runs = run_literally(_blocks_after("## For self-learners"), tmp_path, env)
    _succeeded(runs, but=("pytest", "nbgrader validate"))
    for run in _ran(runs, "pytest"):
        assert run.status == 1 and f"0 of {len(STEPS)} steps match" in run.output, run.output[-3000:]
        assert "not implemented yet" in run.output
    (validate,) = _ran(runs, "nbgrader validate")
    assert _validate_failed(validate) == [step.id for step in STEPS]


def test_the_sample_notebook_runs_where_it_is_shipped_and_validate_fails_its_mistake(tmp_path):
    """The README pictures Run All on data/sample-submission/attention_head.ipynb: in that very
    folder, Validate runs every check and fails exactly those the sample's slip fails."""
    validate = Path(sysconfig.get_path("scripts")) / "nbgrader"
    done = subprocess.run([str(validate), "validate", "attention_head.ipynb"], cwd=release.SAMPLE,
                          env={**jupyter_env(tmp_path), "PATH": SYSTEM_PATH}, capture_output=True,
                          text=True, timeout=600)
    run = Ran("nbgrader validate", done.returncode, done.stdout + done.stderr)
    assert _validate_failed(run) == _sample_failing_steps()


@dataclass
class Course:
    root: Path
    """Laid out like the repository's root; the course is root/course."""
    env: dict[str, str]
    runs: list[Ran]
    """The README's nbgrader block, run literally."""

    def again(self, *commands: str) -> list[Ran]:
        """`commands` run as the block's next lines, after its own `cd` and `export`."""
        setting = [run.command for run in self.runs if run.command.startswith(("cd ", "export "))]
        return run_literally("\n".join([*setting, *commands]), self.root, self.env)[len(setting):]

    def page(self) -> Path:
        return self.root / "course" / "feedback" / "sample" / "ps1" / "attention_head.html"

    def answers_to_grade(self) -> int:
        """How many of the sample's written answers the gradebook has waiting for a person."""
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{self.root / 'course' / 'gradebook.db'}") as gradebook:
            return sum(gradebook.find_grade(f"answer-{name}", "attention_head", "ps1", "sample").needs_manual_grade
                       for name, _ in ANSWERS)


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Course:
    root = tmp_path_factory.mktemp("nbgrader-route")
    env = _root(root, "data")
    return Course(root, env, run_literally(_blocks_after("### nbgrader"), root, env))


def _ungraded_answers(page: str) -> int:
    """How many written answers the page calls not graded yet (each is said in its heading and in
    the contents, so the count is halved)."""
    return html.unescape(page).count("not graded yet") // 2


def test_the_nbgrader_route_runs_as_written_and_validate_fails_the_sample_in_the_released_folder(course):
    _succeeded(course.runs)
    (validate,) = _ran(course.runs, "nbgrader validate")
    assert _validate_failed(validate) == _sample_failing_steps()
    assert (course.root / "course" / "grades.csv").is_file()
    assert _ungraded_answers(course.page().read_text(encoding="utf-8")) == len(ANSWERS)


def test_generate_feedback_writes_the_page_again_once_a_written_answer_is_graded(course):
    """As the README says: grade an answer in formgrader, then run the block's generate_feedback
    line again; the page must follow the gradebook, not be skipped as up to date."""
    from nbgrader.api import Gradebook

    waiting = course.answers_to_grade()
    with Gradebook(f"sqlite:///{course.root / 'course' / 'gradebook.db'}") as gradebook:
        # What formgrader's grade handler does when a written answer is given its points.
        grade = gradebook.find_grade(f"answer-{ANSWERS[0][0]}", "attention_head", "ps1", "sample")
        grade.manual_score, grade.needs_manual_grade = release.ANSWER_POINTS, False
        gradebook.db.commit()
    (feedback,) = _ran(course.runs, "nbgrader generate_feedback")
    (again,) = course.again(feedback.command)
    assert again.status == 0 and "Skipping existing assignment" not in again.output, again.output
    assert _ungraded_answers(course.page().read_text(encoding="utf-8")) == waiting - 1


def test_generate_feedback_writes_the_page_again_after_the_grading_reruns(course):
    """A rerun of `qkv-grade --nbgrader` leaves each submission's timestamp, and so the page's age
    relative to it, as they were."""
    stale = "the page from before the last grading run"
    course.page().write_text(stale, encoding="utf-8")
    (trusted,) = _ran(course.runs, "qkv-grade --nbgrader")
    (feedback,) = _ran(course.runs, "nbgrader generate_feedback")
    graded, again = course.again(trusted.command, feedback.command)
    assert graded.status == 0, graded.output
    assert again.status == 0 and "Skipping existing assignment" not in again.output, again.output
    assert _ungraded_answers(course.page().read_text(encoding="utf-8")) == course.answers_to_grade()


def test_a_misspelt_assignment_name_is_answered_with_the_one_the_course_has(course, tmp_path):
    (trusted,) = _ran(course.runs, "qkv-grade --nbgrader")
    assert trusted.command.split("#")[0].split()[-1] == "ps1"
    typo, unknown = course.again(trusted.command.replace(" ps1", " ps2"),
                                 trusted.command.replace(" ps1", " homework"))
    assert typo.status == 2 and typo.output.count("\n") == 1, typo.output
    assert "did you mean 'ps1'?" in typo.output and "generate_assignment" not in typo.output
    assert unknown.status == 2 and unknown.output.count("\n") == 1, unknown.output
    assert "`nbgrader generate_assignment homework`" in unknown.output and "(it has ps1)" in unknown.output

    # Before generate_assignment, the name to generate is the one the course has a source for.
    from autograder import nbgrader_course

    fresh = tmp_path / "fresh"
    nbgrader_course.write_course(fresh, seed=1)
    said = nbgrader_course.unknown_assignment(fresh, "ps2", generated=[])
    assert said.endswith("did you mean 'ps1'? (run `nbgrader generate_assignment ps1` in the course first)")
    # And qkv-course, adding an assignment named like one the course has, says so.
    said = nbgrader_course.write_course(fresh, "sp1")
    assert said[-1] == (f"the course also has 'ps1': if you meant that one, delete {fresh / 'source' / 'sp1'} "
                        f"and rerun with --assignment ps1")


def test_the_gradescope_route_runs_as_written(tmp_path):
    env = _root(tmp_path, "data")
    script = "\n".join([_blocks_after("### Gradescope"), _blocks_after("To try the bundle locally")])
    _succeeded(run_literally(script, tmp_path, env))
    results = json.loads((tmp_path / "gs" / "results" / "results.json").read_text(encoding="utf-8"))
    assert len(results["tests"]) == len(STEPS)
    assert 0 < results["score"] < MAX_SCORE


def test_the_report_route_runs_as_written(tmp_path):
    env = _root(tmp_path, "data")
    _succeeded(run_literally(_blocks_after("### A class report"), tmp_path, env))
    assert (tmp_path / "report" / "index.html").is_file()
    rows = (tmp_path / "report" / "scores.csv").read_text(encoding="utf-8").splitlines()
    assert len(rows) == 1 + len(list((REPO / "data" / "sample-class").glob("*.py")))


def test_the_readmes_figures_and_pictures_are_what_the_code_now_gives(tmp_path):
    """Each figure quoted from a run of the bundled data, and the digest of what each picture shows,
    made again as data/readme_figures.py makes them, without retaking the pictures. (The class
    report's picture is checked by test_report.py, on the report it makes.)"""
    require_sandbox()
    require_readme_shows(readme_figures().current(tmp_path, report=False))
