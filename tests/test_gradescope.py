"""The Gradescope bundle as Gradescope uses it: unpacked into a stand-in /autograder, run per submission.

Each test installs the zip the way Gradescope's harness does (the zip unpacked into source/,
run_autograder copied beside it, the submission in submission/) and runs run_autograder as a real
process, then reads results/results.json against a schema written from Gradescope's specification.
setup.sh's downloads are not repeated here: the package is already importable, so run_autograder is
pointed at this interpreter, and setup.sh is checked for its pins and run with its installs skipped.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from support import REPO, REFERENCE, nested, qkv_grade, reference_source, require_sandbox, sandbox_mode, variant

from autograder.steps import BY_ID, STEP_IDS

# Under pytest-xdist, one worker runs the module: the bundle is built once.
pytestmark = pytest.mark.xdist_group("gradescope")

SCHEMA = json.loads((REPO / "data" / "gradescope-results.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
SEED, TIMEOUT = 11, 0.5

SCALED_BY_D_K = variant([("    s = d / np.sqrt(d_k)  # [T, T]", "    s = d / d_k  # [T, T]")])
NEVER_RETURNS = variant([("def head_facts(t, d_k, d_v):\n", "def head_facts(t, d_k, d_v):\n    while True:\n        pass\n")])


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    done = qkv_grade("--gradescope-bundle", str(target), "--seed", str(SEED), "--timeout", str(TIMEOUT))
    assert done.returncode == 0, done.stderr
    assert f"seed {SEED}" in done.stdout
    return target


def install(bundle: Path, root: Path) -> Path:
    """Lay the bundle out as Gradescope does; like unzip, keep each file's Unix mode."""
    source = root / "source"
    with zipfile.ZipFile(bundle) as archive:
        for info in archive.infolist():
            path = Path(archive.extract(info, source))
            path.chmod((info.external_attr >> 16) & 0o777)
    shutil.copy2(source / "run_autograder", root / "run_autograder")
    (root / "submission").mkdir()
    return root


def run_autograder(root: Path, **env: str) -> tuple[dict, subprocess.CompletedProcess]:
    environment = {**os.environ, "QKV_AUTOGRADER_ROOT": str(root), "QKV_AUTOGRADER_PYTHON": sys.executable, **env}
    done = subprocess.run([str(root / "run_autograder")], cwd=root, env=environment, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((root / "results" / "results.json").read_text())
    VALIDATOR.validate(results)
    return results, done


def grade(bundle: Path, tmp_path: Path, files: dict[str, str], **env: str) -> tuple[dict, subprocess.CompletedProcess]:
    root = install(bundle, tmp_path / "autograder")
    for name, text in files.items():
        (root / "submission" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "submission" / name).write_text(text)
    return run_autograder(root, **env)


def by_step(results: dict) -> dict[str, dict]:
    return {test["name"].split(":")[0]: test for test in results["tests"]}


# ------------------------------------------------------------------ the bundle -------------------


def test_the_bundle_is_its_owner_s_alone_and_never_written_where_others_may_change_it(bundle, tmp_path):
    """The bundle holds the grading key, and the instructor uploads whatever lies at its name: it
    is readable by its owner alone, a link planted at its name is replaced rather than written
    through, and a folder others may write is refused before anything is written."""
    import os
    import stat

    assert stat.S_IMODE(bundle.stat().st_mode) == 0o600
    mine = tmp_path / "mine"
    mine.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("the instructor's\n")
    (mine / "autograder.zip").symlink_to(victim)
    (mine / "autograder.zip.part").symlink_to(victim)
    done = qkv_grade("--gradescope-bundle", str(mine / "autograder.zip"), "--seed", str(SEED))
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "the instructor's\n" and zipfile.is_zipfile(mine / "autograder.zip")
    assert not (mine / "autograder.zip").is_symlink()
    drop = tmp_path / "drop"
    drop.mkdir()
    drop.chmod(0o777)
    done = qkv_grade("--gradescope-bundle", str(drop / "autograder.zip"), "--seed", str(SEED))
    assert done.returncode != 0 and f"others may write in {drop}" in done.stderr, done.stderr
    assert os.listdir(drop) == []


def test_the_bundle_has_gradescopes_layout_and_carries_only_the_grader(bundle):
    with zipfile.ZipFile(bundle) as archive:
        modes = {info.filename: (info.external_attr >> 16) & 0o777 for info in archive.infolist()}
        config = json.loads(archive.read("gradescope.json"))
    assert modes["setup.sh"] == modes["run_autograder"] == 0o755
    for needed in ("requirements.txt", "pyproject.toml", "autograder/gradescope.py", "autograder/grading.py",
                   "solutions/attention_head.py", "autograder/_data/part-iv/attention.json",
                   "autograder/_data/derived-edits.json", "autograder/_data/example-values.npz"):
        assert needed in modes, needed
    assert not [name for name in modes if name.startswith(("tests/", "assignments/", "data/", "autograder/_data/sample-class/"))
                or "__pycache__" in name]
    assert config["seed"] == SEED and config["call_timeout"] == TIMEOUT and config["visibility"] == "visible"


def test_setup_pins_exactly_the_versions_installed_here(bundle):
    with zipfile.ZipFile(bundle) as archive:
        requirements = archive.read("requirements.txt").decode()
        setup = archive.read("setup.sh").decode()
    pins = dict(line.split("==") for line in requirements.splitlines() if line and not line.startswith("#"))
    assert {"numpy", "jsonschema", "nbformat"} <= set(pins)
    assert all(metadata.version(name) == version for name, version in pins.items())
    assert '-r "$SOURCE/requirements.txt"' in setup
    assert "apt_install bubblewrap" in setup and "bubblewrap could not be installed" in setup
    assert re.search(r'^PYTHON_MIN="3\.\d+"', setup, flags=re.M)
    assert subprocess.run(["bash", "-n", "-c", setup]).returncode == 0


def test_setup_runs_cleanly_when_told_not_to_install(bundle, tmp_path):
    root = install(bundle, tmp_path)
    done = subprocess.run(["bash", str(root / "source" / "setup.sh")], capture_output=True, text=True,
                          env=dict(os.environ, QKV_AUTOGRADER_ROOT=str(root), QKV_SETUP_SKIP_INSTALL="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "setup.sh: python:" in done.stdout and not (root / "venv").exists()


def test_setup_prefers_the_python_the_bundle_was_built_with(bundle, tmp_path):
    """Two Pythons new enough: `python3` another version, and the bundle's own under its versioned
    name. setup.sh takes the bundle's, whose stored example values the grader can use."""
    root = install(bundle, tmp_path)
    built = "%d.%d" % sys.version_info[:2]
    other = "3.99" if built != "3.99" else "3.98"
    tools = tmp_path / "bin"
    tools.mkdir()
    # `python3` answers as another version, new enough for the pins
    (tools / "python3").write_text(f"#!{sys.executable}\n"
                                   "import sys\n"
                                   f"if sys.argv[1] == '-V': print('Python {other}.0')\n"
                                   f"else: sys.version_info = ({other.replace('.', ', ')}, 0); exec(sys.argv[2])\n")
    (tools / "python3").chmod(0o755)
    (tools / f"python{built}").symlink_to(sys.executable)
    path = str(tools)  # the system's own Pythons hidden: only these two
    bash = shutil.which("bash")
    setup = root / "source" / "setup.sh"
    done = subprocess.run([bash, str(setup)], capture_output=True, text=True,
                          env=dict(os.environ, PATH=path, QKV_AUTOGRADER_ROOT=str(root), QKV_SETUP_SKIP_INSTALL="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"setup.sh: python: {tools}/python{built} " in done.stdout and "note:" not in done.stdout
    # with the bundle's version absent, it takes the other and says what that costs
    (tools / f"python{built}").unlink()
    done = subprocess.run([bash, str(setup)], capture_output=True, text=True,
                          env=dict(os.environ, PATH=path, QKV_AUTOGRADER_ROOT=str(root), QKV_SETUP_SKIP_INSTALL="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"setup.sh: python: {tools}/python3 (Python {other}.0)" in done.stdout
    assert f"built with Python {built}" in done.stdout


# ------------------------------------------------------------------ grading ----------------------


def test_a_correct_submission_gets_full_marks_one_test_per_step(bundle, tmp_path):
    results, _ = grade(bundle, tmp_path, {"attention_head.py": reference_source()})
    assert results["score"] == 100.0
    assert [name.split(":")[0] for name in (t["name"] for t in results["tests"])] == list(STEP_IDS)
    assert [t["number"] for t in results["tests"]] == [str(n) for n in range(1, 14)]
    for test in results["tests"]:
        step = BY_ID[test["name"].split(":")[0]]
        assert (test["score"], test["max_score"], test["status"]) == (step.points, step.points, "passed")
        assert test["visibility"] == "visible" and test["tags"] == []
    assert results["stdout_visibility"] == "hidden"
    assert results["output_format"] == results["test_output_format"] == "text"  # never read as markup
    assert results["extra_data"]["seed"] == SEED


def test_a_misconception_scores_exactly_as_qkv_grade_scores_it(bundle, tmp_path):
    results, _ = grade(bundle, tmp_path, {"attention_head.py": SCALED_BY_D_K})
    path = tmp_path / "attention_head.py"
    path.write_text(SCALED_BY_D_K)
    done = qkv_grade(str(path), "--format", "json", "--seed", str(SEED), "--timeout", str(TIMEOUT))
    expected = json.loads(done.stdout)
    assert results["score"] == expected["score"] < 100
    tests = by_step(results)
    for step in expected["steps"]:
        test = tests[step["id"]]
        assert (test["score"], test["max_score"]) == (step["score"], step["max_score"])
        # a step whose error is carried forward from `scale` passes, with its points
        assert test["status"] == ("passed" if step["status"] == "passed" or step["carried_from"] else "failed")
        assert test["tags"] == step["diagnoses"] and test["output"] == step["feedback"]
    assert tests["scale"]["status"] == "failed" and "scaled-by-d_k" in tests["scale"]["tags"]
    assert "[scaled-by-d_k]" in tests["scale"]["output"]
    for untouched in ("qkv", "scores", "softmax", "mix", "ex1_zero_query", "ex2_row_normalization",
                      "ex3_value_shift", "ex4_shapes"):
        assert tests[untouched]["status"] == "passed" and tests[untouched]["score"] == BY_ID[untouched].points


def test_a_function_that_never_returns_costs_only_its_own_step(bundle, tmp_path):
    results, _ = grade(bundle, tmp_path, {"attention_head.py": NEVER_RETURNS})
    tests = by_step(results)
    assert results["score"] == 100.0 - BY_ID["ex4_shapes"].points
    assert (tests["ex4_shapes"]["score"], tests["ex4_shapes"]["status"]) == (0.0, "failed")
    assert tests["ex4_shapes"]["tags"] == ["timeout"]
    assert all(test["status"] == "passed" for step, test in tests.items() if step != "ex4_shapes")


def _hidden_expected_numbers() -> set[str]:
    """Every non-trivial number a hidden case expects, written as feedback would write it."""
    from autograder.grading import Grader

    grader = Grader(SEED)
    numbers = set()
    for step, cases in grader.cases.items():
        for case, calls in zip(cases, grader.expected[step]):
            if case.public:
                continue
            for part in (part for parts in calls for part in parts.values()):
                try:
                    values = np.asarray(part, dtype=float).ravel()
                except (TypeError, ValueError):
                    continue
                numbers |= {text for x in values if abs(x) > 1e-6 and x != round(x, 2)
                            for text in (f"{x:.6g}", repr(float(x)))}
    return numbers


def test_results_json_shows_no_hidden_expected_value_and_no_reference_code(bundle, tmp_path):
    shown = ""
    for name, source in (("misconception", SCALED_BY_D_K), ("fault", NEVER_RETURNS)):
        results, done = grade(bundle, tmp_path / name, {"attention_head.py": source})
        shown += results["output"] + "".join(test["output"] + test["name"] for test in results["tests"])
    printed = set(re.findall(r"-?\d+\.\d+(?:e[-+]?\d+)?", shown))
    assert printed, "the misconception's feedback should show the student's own numbers"
    assert not printed & _hidden_expected_numbers()
    solution = re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", REFERENCE.read_text(), flags=re.S)
    lines = {line.strip() for block in solution for line in block.splitlines() if len(line.strip()) > 12}
    assert lines and not [line for line in lines if line in shown]
    assert "Traceback" not in shown and "source/" not in shown


@pytest.mark.parametrize("files, message", [
    ({}, "attention_head.py: not among the files you submitted"),
    ({"attention_head.ipynb": '{"cells": [ not json'}, "attention_head.ipynb: corrupt notebook"),
    ({"a.py": "x = 1", "b.py": "y = 2"}, "attention_head.py: not among the files you submitted (a.py, b.py)"),
    # names are the student's: shown escaped, never acting on the log's terminal
    ({"a\x1b[31mRED.py": "x = 1", "b\r\n.py": "y = 2"},
     "attention_head.py: not among the files you submitted (a\\x1b[31mRED.py, b\\x0d\\x0a.py)"),
])
def test_a_missing_or_broken_submission_still_gets_a_valid_zero(bundle, tmp_path, files, message):
    results, _ = grade(bundle, tmp_path, files)
    assert results["score"] == 0.0
    assert results["output"].startswith("Your submission could not be graded: " + message)
    assert len(results["tests"]) == len(STEP_IDS)
    assert all(test["score"] == 0.0 and test["status"] == "failed" and test["tags"] == [] for test in results["tests"])


def test_an_upload_of_more_files_than_are_looked_at_is_told_so(tmp_path, monkeypatch):
    """Of an upload, only MOST_ENTRIES files and folders are looked at (lowered here): a student
    whose attention_head.py lies past them is told that the rest was not looked at."""
    from autograder import gradescope, submission

    monkeypatch.setattr(submission, "MOST_ENTRIES", 5)
    for number in range(10):
        (tmp_path / f"notes{number}.txt").write_text("")
    path, message = gradescope.find_submission(tmp_path)
    assert path is None and message == (
        "attention_head.py: not among the files you submitted. Upload attention_head.py (or attention_head.ipynb), "
        "named exactly so. You submitted more than 5 files and folders: only the first 5 were looked at, and the "
        "rest were neither graded nor listed.")


def test_a_lone_unreadable_file_s_name_reaches_the_log_and_the_output_escaped(bundle, tmp_path):
    results, done = grade(bundle, tmp_path, {"x\x1b[2J\x1b[H\x1b[1;32mAll checks passed\r.ipynb": '{"cells": [ not'})
    shown = results["output"] + done.stdout
    assert "corrupt notebook" in results["output"] and "not graded" in done.stdout
    assert "\x1b" not in shown and "\r" not in shown and "\\x1b[2J" in shown


def test_a_lone_file_under_another_name_or_a_folder_is_found(bundle, tmp_path):
    results, _ = grade(bundle, tmp_path / "lone", {"my_head.py": reference_source()})
    assert results["score"] == 100.0 and results["extra_data"]["submission"] == "my_head.py"
    results, _ = grade(bundle, tmp_path / "folder", {"repo/attention_head.py": reference_source(),
                                                     "repo/notes.py": "x = 1"})
    assert results["score"] == 100.0 and results["extra_data"]["submission"] == "repo/attention_head.py"


def test_a_notebook_uploaded_beside_the_untouched_starter_module_is_the_one_graded(bundle, tmp_path):
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells.append(nbformat.v4.new_code_cell(reference_source()))
    starter = (REPO / "assignments" / "attention_head" / "attention_head.py").read_text()
    results, _ = grade(bundle, tmp_path / "both", {"attention_head.py": starter,
                                                   "attention_head.ipynb": nbformat.writes(notebook)})
    assert results["score"] == 100.0 and results["extra_data"]["submission"] == "attention_head.ipynb"
    # the whole released folder uploaded, the module worked in: the untouched notebook is passed over
    released = (REPO / "assignments" / "attention_head" / "attention_head.ipynb").read_text()
    results, _ = grade(bundle, tmp_path / "folder", {"hw/attention_head.py": reference_source(),
                                                     "hw/attention_head.ipynb": released})
    assert results["score"] == 100.0 and results["extra_data"]["submission"] == "hw/attention_head.py"



@pytest.mark.parametrize("files", [
    {"attention_head.py": "module", "attention_head.ipynb": "notebook"},  # a notebook and its own export
    {"draft/attention_head.ipynb": "notebook", "final/attention_head.ipynb": "notebook"},
    {"old/attention_head.py": "module", "attention_head.ipynb": "notebook"},
])
def test_two_files_that_could_each_be_the_submission_are_not_picked_between(bundle, tmp_path, files):
    """Which of two candidates the student meant is theirs to say: none is graded in silence (a
    draft for the final), and the message names both."""
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells.append(nbformat.v4.new_code_cell(reference_source()))
    texts = {"module": reference_source(), "notebook": nbformat.writes(notebook)}
    results, _ = grade(bundle, tmp_path, {name: texts[kind] for name, kind in files.items()})
    assert results["score"] == 0.0
    assert results["output"].startswith("Your submission could not be graded: attention_head.py: more than one "
                                        "file could be your submission ("), results["output"]
    for name in files:
        assert name in results["output"], results["output"]
    assert "Submit again with only the one to grade." in results["output"]


def test_a_folder_nested_a_thousand_deep_beside_the_submission_changes_nothing(bundle, tmp_path):
    root = install(bundle, tmp_path / "autograder")
    (root / "submission" / "repo").mkdir(parents=True)
    (root / "submission" / "repo" / "attention_head.py").write_text(reference_source())
    with nested(root / "submission" / "repo", 1000):
        results, _ = run_autograder(root)
    assert results["score"] == 100.0 and results["extra_data"]["submission"] == "repo/attention_head.py"


def test_results_json_is_written_even_when_the_grader_cannot_start(bundle, tmp_path):
    results, done = grade(bundle, tmp_path, {"attention_head.py": reference_source()},
                          QKV_AUTOGRADER_PYTHON="/bin/false")
    assert results["score"] == 0.0 and "problem on the course's side" in results["output"]
    assert "writing a placeholder" in done.stdout


# ------------------------------------------------------------------ isolation --------------------

def probe(reference: Path) -> str:
    """The reference, except that exercise 4 fails if it can read `reference` or runs as root."""
    return variant([("def head_facts(t, d_k, d_v):\n", f'''def head_facts(t, d_k, d_v):
    import os
    try:
        open({str(reference)!r}).read()
        return {{}}
    except OSError:
        pass
    if os.getuid() == 0:
        return {{}}
''')])


def test_student_code_runs_as_nobody_without_a_view_of_the_grader(bundle, tmp_path):
    require_sandbox()
    root = tmp_path / "autograder"
    reference = root / "source" / "solutions" / "attention_head.py"
    results, _ = grade(bundle, tmp_path, {"attention_head.py": probe(reference)})
    assert reference.is_file()
    assert results["extra_data"]["isolation"] == sandbox_mode()
    assert by_step(results)["ex4_shapes"]["status"] == "passed", by_step(results)["ex4_shapes"]["output"]


def test_where_bubblewrap_cannot_start_it_grades_under_landlock_and_records_that(bundle, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text("#!/bin/sh\nexit 1\n")
    (fake / "bwrap").chmod(stat.S_IRWXU)
    results, done = grade(bundle, tmp_path, {"attention_head.py": reference_source()},
                          PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    assert results["score"] == 100.0
    assert results["extra_data"]["isolation"] == "landlock"
    assert "isolation landlock" in done.stdout


def test_a_file_name_that_is_not_utf8_is_graded_and_shown_escaped(bundle, tmp_path):
    """A lone file is graded whatever its name; one whose bytes are not UTF-8 is named with its
    bytes escaped, and results.json stays UTF-8 (it used to be left unwritten)."""
    results, _ = grade(bundle, tmp_path, {"st\udcffudent.py": reference_source()})
    assert results["score"] == 100.0 and results["extra_data"]["submission"] == "st\\xffudent.py"
    (tmp_path / "autograder" / "results" / "results.json").read_bytes().decode("utf-8")
