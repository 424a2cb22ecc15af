"""`qkv-grade` as instructors and tools use it: formats, folders, seeds and bad invocations."""
from __future__ import annotations

import csv
import json
import subprocess
import sys

import jsonschema
import nbformat
import pytest

from support import REPO, STUB, grade_json, qkv_grade, reference_source, steps_by_id, variant

from autograder.steps import STEP_IDS

# Under pytest-xdist, one worker runs the module: its class is graded once.
pytestmark = pytest.mark.xdist_group("cli")

SCHEMA = json.loads((REPO / "data" / "results.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
FAST = ("--timeout", "0.5")


@pytest.fixture(scope="module")
def class_folder(tmp_path_factory):
    """A small class: correct, stub, a misconception, a corrupt notebook, a notebook, a loop."""
    folder = tmp_path_factory.mktemp("class")
    (folder / "ada.py").write_text(reference_source())
    (folder / "ben.py").write_text(STUB.read_text())
    (folder / "cleo.py").write_text(variant([("d = q @ k_t", "d = k @ np.swapaxes(q, -1, -2)")]))
    (folder / "dan.ipynb").write_text('{"cells": [ this is not json')
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("My attention head"),
                      nbformat.v4.new_code_cell("%matplotlib inline\n" + reference_source()),
                      nbformat.v4.new_code_cell("print(scores(np.eye(2), np.eye(2)))")]
    nbformat.write(notebook, str(folder / "eve.ipynb"))
    (folder / "fay.py").write_text(variant([("    o = a @ v  # [T, T] @ [T, d_v] -> [T, d_v]: sums over contributing positions",
                                             "    while True:\n        pass")]))
    nested = folder / "submitted" / "gus" / "ps1"
    nested.mkdir(parents=True)
    (nested / "attention_head.py").write_text(reference_source())
    (nested / "helper.py").write_text("raise SystemExit")
    out = tmp_path_factory.mktemp("out")
    done = qkv_grade(str(folder), "--format", "json", "--seed", "5", "--out", str(out), *FAST)
    return folder, out, done


def test_a_folder_is_graded_in_full_despite_broken_submissions(class_folder):
    _, out, done = class_folder
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    VALIDATOR.validate(results)
    scores = {r["submission"]: r["score"] for r in results}
    assert scores == {"ada.py": 100.0, "ben.py": 0.0, "cleo.py": pytest.approx(scores["cleo.py"]),
                      "dan.ipynb": 0.0, "eve.ipynb": 100.0, "fay.py": pytest.approx(scores["fay.py"]),
                      "submitted/gus/ps1/attention_head.py": 100.0}
    assert 50 < scores["cleo.py"] < 100 and 50 < scores["fay.py"] < 100
    broken = next(r for r in results if r["submission"] == "dan.ipynb")
    assert "corrupt notebook" in broken["error"]
    assert "written_answers" not in next(r for r in results if r["submission"] == "eve.ipynb")


def test_a_folder_writes_one_result_per_submission_and_a_csv_summary(class_folder):
    _, out, _ = class_folder
    run = out / "latest"
    files = sorted(p.name for p in run.glob("*.json") if p.name != "run.json")
    assert len(files) == 7
    for name in files:
        VALIDATOR.validate(json.loads((run / name).read_text()))
    rows = list(csv.DictReader((run / "summary.csv").open()))
    assert [row["submission"] for row in rows][:2] == ["ada.py", "ben.py"]
    assert list(rows[0])[:3] == ["submission", "score", "max_score"]
    assert all(step in rows[0] for step in STEP_IDS)
    cleo = next(row for row in rows if row["submission"] == "cleo.py")
    assert "keys-not-transposed" in cleo["diagnoses"]


def test_every_step_appears_in_contract_order_every_time(class_folder):
    _, _, done = class_folder
    for result in json.loads(done.stdout):
        assert [step["id"] for step in result["steps"]] == list(STEP_IDS)


def test_the_same_seed_reproduces_the_grade_exactly(tmp_path):
    path = tmp_path / "attention_head.py"
    path.write_text(variant([("s = d / np.sqrt(d_k)  # [T, T]", "s = d / d.shape[0]  # [T, T]")]))
    first = grade_json(path, "--seed", "123", *FAST)
    second = grade_json(path, "--seed", "123", *FAST)
    third = grade_json(path, "--seed", "124", *FAST)
    assert first == second
    assert first["seed"] == 123 and third["seed"] == 124
    assert steps_by_id(first)["scale"]["diagnoses"] == ["scaled-by-positions"]


def test_text_output_is_a_table_then_feedback_without_colour_when_piped(tmp_path):
    path = tmp_path / "attention_head.py"
    path.write_text(variant([("s = d / np.sqrt(d_k)  # [T, T]", "s = d  # [T, T]")]))
    done = qkv_grade(str(path), "--seed", "1", *FAST)
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0].endswith("/ 100")
    table = [line.split()[0] for line in lines[3:16]]
    assert table == list(STEP_IDS)
    assert "Feedback" in done.stdout and "[no-scaling]" in done.stdout
    assert "\x1b[" not in done.stdout
    assert "--seed 1" in done.stdout


def test_a_module_that_never_ran_gets_its_reason_once_not_once_per_step(tmp_path):
    (tmp_path / "broken.py").write_text("def (:\n")
    done = qkv_grade(str(tmp_path / "broken.py"), "--seed", "1", *FAST)
    assert done.returncode == 0
    assert done.stdout.count("── ") == 1 and "── every step (0 / 100)" in done.stdout
    assert done.stdout.count("could not be imported: it raised SyntaxError: invalid syntax (broken.py, line 1)") == 1
    assert "Where to look" not in done.stdout  # no step's advice fits a module that never ran


def test_gradescope_format_has_one_test_per_step(tmp_path):
    path = tmp_path / "attention_head.py"
    path.write_text(reference_source())
    done = qkv_grade(str(path), "--format", "gradescope", "--seed", "2", *FAST)
    document = json.loads(done.stdout)
    assert document["score"] == 100.0
    assert [t["name"].split(":")[0] for t in document["tests"]] == list(STEP_IDS)
    assert all({"name", "score", "max_score", "output", "visibility"} <= set(t) for t in document["tests"])


@pytest.mark.parametrize("args, message", [
    (["missing.py"], "missing.py: no such file or folder"),
    (["notes.txt"], "notes.txt: not a .py module or .ipynb notebook (nor a folder of them)"),
    (["empty"], "empty: no .py or .ipynb submissions found"),
    (["ok.py", "--jobs", "0"], "--jobs must be at least 1"),
    (["ok.py", "--out", "out"], "--out keeps a folder run's results: ok.py is one file, whose result is printed "
                                "(--format json prints it as JSON)"),
])
def test_bad_invocations_get_one_line_and_no_traceback(tmp_path, args, message):
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "empty").mkdir()
    (tmp_path / "ok.py").write_text(reference_source())
    done = qkv_grade(*args, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"qkv-grade: error: {message}"
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.parametrize("seed", ["-5", "9223372036854775808", "abc"])
def test_a_seed_numpy_cannot_take_is_refused_before_anything_is_written(tmp_path, seed):
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "ok.py").write_text(reference_source())
    for args in (["class", "--out", "out"], ["class/ok.py"], ["--gradescope-bundle", "bundle.zip"]):
        done = qkv_grade(*args, f"--seed={seed}", cwd=tmp_path)
        assert done.returncode == 2 and ("a seed is a whole number from 0 to 2**63 - 1" in done.stderr
                                         or "'abc' is not a whole number" in done.stderr), done.stderr
        assert "Traceback" not in done.stderr and done.stdout == "" and done.stderr.count("\n") == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["class"]
    course = subprocess.run([sys.executable, "-m", "autograder.nbgrader_course", str(tmp_path / "course"),
                             f"--seed={seed}"], capture_output=True, text=True)
    assert course.returncode == 2 and "whole number" in course.stderr and not (tmp_path / "course").exists()
    assert course.stderr.count("\n") == 1


def test_a_corrupt_notebook_alone_is_reported_not_crashed_on(tmp_path):
    path = tmp_path / "attention_head.ipynb"
    path.write_text('{"nbformat": 4, "cells": "nope"}')
    done = qkv_grade(str(path), "--format", "json", *FAST)
    assert done.returncode == 0 and "Traceback" not in done.stderr
    result = json.loads(done.stdout)
    VALIDATOR.validate(result)
    assert result["score"] == 0 and "corrupt notebook" in result["error"]
    assert all(step["status"] == "error" and step["diagnoses"] == ["unreadable"] for step in result["steps"])


def test_the_schema_rejects_results_that_break_the_contract(class_folder):
    _, _, done = class_folder
    result = json.loads(done.stdout)[0]
    reordered = dict(result, steps=list(reversed(result["steps"])))
    missing = dict(result, steps=result["steps"][:-1])
    bad_status = json.loads(json.dumps(result))
    bad_status["steps"][0]["status"] = "ok"
    for broken in (reordered, missing, bad_status):
        assert not VALIDATOR.is_valid(broken)


def test_folder_run_starts_its_workers_before_loading_numpy():
    """The workers load numpy while the grader does: nothing the folder run imports before
    starting them may pull numpy in (a results module importing the judge once did)."""
    import subprocess
    import sys

    probe = ("import sys\n"
             "from autograder import cli, results, store, submission, runner, sandbox\n"
             "print(sorted(name for name in sys.modules if name == 'numpy' or name.startswith('numpy.')))\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


COMMANDS = ("cli", "gradescope", "nbgrader_trusted")
# qkv-grade's --gradescope-bundle and --nbgrader options run the other two: the only imports
# between the three. What they share (UTF-8 output, exit statuses, --seed, Ctrl-C) is console.py's.
RUNS = {("cli", "gradescope"): {"build", "BundleError"}, ("cli", "nbgrader_trusted"): {"main"}}


def _package_imports() -> dict[str, dict[str, set[str]]]:
    """Each autograder module -> the autograder modules it imports anywhere in its source (inside
    functions too) -> the names it takes from each ("*" for the module itself)."""
    import ast

    package = REPO / "autograder"
    modules = {path.stem for path in package.glob("*.py")} | {
        path.name for path in package.iterdir() if (path / "__init__.py").is_file()}
    graph: dict[str, dict[str, set[str]]] = {}
    for path in package.glob("*.py"):
        found: dict[str, set[str]] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1:
                    module = node.module or ""
                elif node.level == 0 and (node.module or "").split(".")[0] == "autograder":
                    module = node.module.partition(".")[2]
                else:
                    continue
                if module:  # from .x import a, b
                    found.setdefault(module.split(".")[0], set()).update(alias.name for alias in node.names)
                else:  # from . import x, y
                    for alias in node.names:
                        found.setdefault(alias.name, set()).add("*")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("autograder."):
                        found.setdefault(alias.name.split(".")[1], set()).add("*")
        graph[path.stem] = {name: names for name, names in found.items() if name in modules and name != path.stem}
    return graph


def test_cli_gradescope_and_nbgrader_trusted_take_nothing_from_one_another_but_the_commands_cli_runs():
    graph = _package_imports()
    taken = {(importer, imported): graph[importer].get(imported, set())
             for importer in COMMANDS for imported in COMMANDS if importer != imported}
    assert {pair: names - RUNS.get(pair, set()) for pair, names in taken.items() if names - RUNS.get(pair, set())} == {}


def test_no_import_leads_back_to_cli_gradescope_or_nbgrader_trusted():
    """Not even through another module, as nbgrader_trusted once reached cli through nbgrader_course."""
    graph = _package_imports()
    for start in COMMANDS:
        seen, todo = set(), [start]
        while todo:
            for imported in graph.get(todo.pop(), {}):
                if imported not in seen:
                    seen.add(imported)
                    todo.append(imported)
        assert start not in seen, f"{start} imports a module that imports {start}"


def test_the_command_ends_at_once_with_everything_written(tmp_path):
    """The command skips the interpreter's teardown, never the output: a class's JSON arrives whole,
    with main's exit status."""
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "ada.py").write_text(reference_source())
    (folder / "ben.py").write_text(STUB.read_text())
    code = ("import sys; from autograder import cli; "
            "sys.argv = ['qkv-grade', sys.argv[1], '--format', 'json', '--seed', '1', '--out', sys.argv[2]]; "
            "cli.command()")
    done = subprocess.run([sys.executable, "-c", code, str(folder), str(tmp_path / "out")], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert [(result["submission"], result["score"]) for result in json.loads(done.stdout)] == [
        ("ada.py", 100.0), ("ben.py", 0.0)]
    usage = subprocess.run([sys.executable, "-c", code, str(tmp_path / "missing"), str(tmp_path / "out")],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert usage.returncode == 2 and "missing" in usage.stderr


def test_the_command_leaves_the_exit_to_python_while_exit_handlers_wait(tmp_path):
    """Where an exit handler is registered the command ends as Python would, so the handler runs;
    with stdout closed it still ends with main's status."""
    code = ("import atexit, sys; from autograder import cli; atexit.register(print, 'the handler ran'); "
            "cli.main = lambda: 3; cli.command()")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (3, "the handler ran\n"), done.stderr
    closed = subprocess.run(f"{sys.executable} -m autograder.cli {tmp_path / 'missing'} >&-", shell=True, cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert closed.returncode == 2 and "Traceback" not in closed.stderr, closed.stderr
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "ada.py").write_text(reference_source())
    for fmt in ("text", "json"):  # a whole run, with nowhere to print it, or to report on
        graded = subprocess.run(f"{sys.executable} -m autograder.cli {tmp_path / 'class'} --format {fmt} --seed 1 "
                                f"--out {tmp_path / fmt} >&- 2>&-", shell=True, cwd=REPO, timeout=300)
        assert graded.returncode == 0
        assert json.loads(next((tmp_path / fmt).glob("run-*/ada.py.json")).read_text())["score"] == 100.0
    single = subprocess.run(f"{sys.executable} -m autograder.cli {tmp_path / 'class' / 'ada.py'} --seed 1 >&-",
                            shell=True, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert single.returncode == 0 and "Traceback" not in single.stderr, single.stderr


def test_a_refused_sandbox_mode_leaves_no_run_folder_to_resume(tmp_path):
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "ok.py").write_text(reference_source())
    done = qkv_grade("class", "--out", "out", cwd=tmp_path, env={"QKV_SANDBOX": "no-such-mode"})
    assert done.returncode == 2 and "QKV_SANDBOX=no-such-mode" in done.stderr and done.stdout == ""
    assert not [path for path in (tmp_path / "out").iterdir() if path.name.startswith(("run-", ".run-"))]
    done = qkv_grade("class", "--out", "out", "--resume", cwd=tmp_path)
    assert done.returncode == 2 and "no unfinished run" in done.stderr


@pytest.mark.parametrize("timeout", ["nan", "inf", "1e9", "0", "-1"])
def test_a_time_limit_no_call_can_be_given_is_refused_before_anything_is_written(tmp_path, timeout):
    """NaN, infinity or a limit past the largest (an hour a call) is refused in one line, in every
    mode, before a run folder, a bundle or a gradebook is touched."""
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "ok.py").write_text(reference_source())
    (tmp_path / "course").mkdir()
    for args in (["class", "--out", "out"], ["class/ok.py"], ["--gradescope-bundle", "bundle.zip"],
                 ["--nbgrader", "course", "ps1"]):
        done = qkv_grade(*args, f"--timeout={timeout}", cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert "--timeout" in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1 and done.stdout == "", done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["class", "course"]
    assert list((tmp_path / "course").iterdir()) == []


def test_resuming_with_another_carry_forward_or_an_unusable_time_limit_is_refused(tmp_path):
    """A run is finished as it began: --no-carry-forward on a run that carries errors forward is
    refused in one line, as --seed is; so is a run whose recorded time limit no call can be given."""
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "ok.py").write_text(reference_source())
    done = qkv_grade("class", "--out", "out", "--seed", "3", *FAST, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run = next((tmp_path / "out").glob("run-*"))
    run = run.rename(run.with_name(run.name + ".incomplete"))  # as a run stopped before its end leaves it
    (tmp_path / "out" / "latest").unlink()
    done = qkv_grade("class", "--out", "out", "--resume", "--no-carry-forward", cwd=tmp_path)
    assert done.returncode == 2 and "--no-carry-forward: the run to resume" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    manifest = json.loads((run / "run.json").read_text())
    manifest["options"]["timeout"] = float("nan")  # as an older grader could record it
    (run / "run.json").write_text(json.dumps(manifest))
    done = qkv_grade("class", "--out", "out", "--resume", cwd=tmp_path)
    assert done.returncode == 2 and "holds no usable --timeout" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1


def test_a_folder_of_skipped_files_is_refused_in_one_line_its_names_escaped(tmp_path):
    """The one error line quotes a file name a student chose: its control characters (a window
    title, a bell) are shown escaped, never sent to the terminal."""
    (tmp_path / "x\x1b]0;PWNED\x07.PY").write_text(reference_source())
    done = qkv_grade(str(tmp_path))
    assert done.returncode == 2 and done.stdout == ""
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr
    assert done.stderr.count("\n") == 1 and "x\\x1b]0;PWNED\\x07.PY: a .PY file" in done.stderr


def test_ctrl_c_landing_in_a_finalizer_is_delivered_after_it_not_dropped():
    """Python prints and drops an exception raised in a finalizer or a weak reference's callback,
    which the garbage collector may be running when Ctrl-C lands: the command's handler sends the
    signal again a moment later, so the interrupt still ends the command, without a traceback."""
    import signal
    import time

    from autograder import console

    class Finalized:
        def __del__(self):
            console.interrupt(signal.SIGINT, sys._getframe())  # as if the signal landed here

    previous = signal.signal(signal.SIGINT, console.interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            Finalized()  # finalized at once: the signal is not raised inside it
            time.sleep(5)
    finally:
        signal.signal(signal.SIGINT, previous)
