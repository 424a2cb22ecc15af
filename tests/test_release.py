"""The student release: regenerated from its sources, free of the solution, and its self-check
behaving as promised (the stub fails every step as not implemented, the reference and a notebook
filled with it pass, a wrong submission gets an explanation). The self-check runs as a real pytest
process inside a copy of the release, as a student would run it."""
from __future__ import annotations

import ast
import gzip
import io
import json
import keyword
import os
import re
import shutil
import subprocess
import sys
import tokenize
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import nbformat
import pytest

from autograder import feedback, release
from autograder.steps import ANSWERS, BY_ID, STEP_IDS, STEPS

ROOT, RELEASE, REFERENCE, DATA = release.ROOT, release.RELEASE, release.REFERENCE, release.DATA
ANSWER_NAMES = [name for name, _ in ANSWERS]
FORBIDDEN = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN", "HIDDEN TESTS")
CACHES = shutil.ignore_patterns(*release.IGNORED)

# A column-normalized softmax (over receivers instead of keys), appended to the reference so that
# attention and the head pick it up too.
COLUMN_NORMALIZED = '''

def softmax_rows(s):
    e = np.exp(s - s.max(axis=-2, keepdims=True))
    return e / e.sum(axis=-2, keepdims=True)
'''


# --- helpers ------------------------------------------------------------------------------------

def released_files(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes()
            for path in sorted(folder.rglob("*"))
            if path.is_file() and not release.IGNORED.intersection(path.relative_to(folder).parts)}


def released_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "attention_head"
    shutil.copytree(RELEASE, folder, ignore=CACHES)
    return folder


def qkv_release(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder.release", *map(str, args)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


class SelfCheck:
    """One run of `pytest` inside a release folder, as a student would type it."""

    def __init__(self, folder: Path, *args: str):
        report = folder.parent / "report.xml"
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg"}
        env.pop("PYTEST_ADDOPTS", None)
        self.process = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={report}",
             *args], cwd=folder, env=env, capture_output=True, text=True, timeout=300)
        self.output = self.process.stdout + self.process.stderr
        self.tests = {}  # test name -> (outcome, message), in the order pytest ran them
        for case in ElementTree.parse(report).iter("testcase"):
            outcome, message = "passed", ""
            for kind in ("failure", "error", "skipped"):
                element = case.find(kind)
                if element is not None:
                    outcome, message = kind, (element.text or element.get("message", ""))
            self.tests[case.get("name")] = (outcome, message)

    @property
    def summary(self) -> str:
        """The self-check's own section at the end of the output."""
        section = self.output.split("Chapter 15 self-check =")[-1]
        return section.split("short test summary info")[0]

    def steps(self) -> dict[str, tuple[str, str]]:
        """The outcome and message of each step's test, keyed by step id, in the order run."""
        return {name[len("test_step["):-1]: result for name, result in self.tests.items()
                if name.startswith("test_step[")}


def filled_notebook(folder: Path) -> dict:
    """The release's notebook with every solution cell replaced by the reference's function."""
    functions = release.function_sources(REFERENCE.read_text(encoding="utf-8"))
    notebook = json.loads((folder / "attention_head.ipynb").read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        if cell["metadata"].get("qkv", {}).get("role") == "solution":
            (definition,) = ast.parse("".join(cell["source"])).body
            cell["source"] = functions[definition.name]
    return notebook


def solution_region_lines() -> tuple[list[str], list[str]]:
    """The code and the comments inside the reference's solution regions.

    Code lines are stripped and their comments cut off; syntax-only lines such as `else:` or `}`
    are left out. Comments are the remarks' text.
    """
    text = REFERENCE.read_text(encoding="utf-8")
    lines = text.splitlines()
    comment_at = {token.start[0] - 1: token.start[1]
                  for token in tokenize.generate_tokens(io.StringIO(text).readline)
                  if token.type == tokenize.COMMENT}
    code, comments = [], []
    for region in release.solution_regions(lines):
        for index in range(region.begin + 1, region.end):
            line = lines[index]
            if index in comment_at:
                comments.append(line[comment_at[index] + 1:].strip())
                line = line[:comment_at[index]]
            word = re.sub(r"\W", "", line)
            if word and word not in keyword.kwlist:
                code.append(line.strip())
    return code, comments


def released_texts() -> dict[str, str]:
    """Every released file as text; for the notebook, its cells' sources; a gzipped file, what it holds."""
    texts = {}
    for name, content in released_files(RELEASE).items():
        if name.endswith(".gz"):
            name, content = name.removesuffix(".gz"), gzip.decompress(content)
        text = content.decode("utf-8")
        if name.endswith(".ipynb"):
            text = "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"])
        texts[name] = text
    return texts


# --- regeneration -------------------------------------------------------------------------------

def test_regenerating_the_release_reproduces_the_committed_files(tmp_path):
    out = tmp_path / "release"
    result = qkv_release("--out", out)
    assert result.returncode == 0, result.stderr
    assert released_files(out) == released_files(RELEASE)


def test_regenerating_twice_gives_identical_bytes(tmp_path):
    assert qkv_release("--out", tmp_path / "one").returncode == 0
    assert qkv_release("--out", tmp_path / "two").returncode == 0
    assert released_files(tmp_path / "one") == released_files(tmp_path / "two")


def test_the_check_passes_on_the_committed_release():
    result = qkv_release("--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "up to date" in result.stdout


def test_the_check_fails_and_names_every_drifted_file_in_a_tampered_copy(tmp_path):
    folder = released_copy(tmp_path)
    with (folder / "attention_head.py").open("a", encoding="utf-8") as module:
        module.write("# edited by hand\n")
    (folder / "steps.json").unlink()
    (folder / "notes.txt").write_text("not generated\n", encoding="utf-8")
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "public_checks.cpython.pyc").write_bytes(b"left by a run")

    result = qkv_release("--check", "--out", folder)
    assert result.returncode == 1
    assert re.search(r"differs\s+attention_head\.py", result.stdout)
    assert re.search(r"missing\s+steps\.json", result.stdout)
    assert re.search(r"unexpected\s+notes\.txt", result.stdout)
    assert "__pycache__" not in result.stdout
    assert "conftest.py" not in result.stdout


def test_lessons_without_a_section_for_a_step_stop_the_release_with_its_name():
    lessons = release.LESSONS.read_text(encoding="utf-8")
    without_mix = re.sub(r"^## mix\n.*?(?=^## )", "", lessons, flags=re.S | re.M)
    assert "## mix" not in without_mix
    with pytest.raises(release.ReleaseError, match=r"no lesson prose for mix\b"):
        release.lesson_sections(without_mix)


# --- what students receive ----------------------------------------------------------------------

def test_nothing_released_contains_a_marker_or_a_line_of_the_solution():
    texts = released_texts()
    for name, text in texts.items():
        for marker in FORBIDDEN:
            assert marker not in text, f"{name} contains {marker!r}"
    # The data files hold the chapter's own numbers, which a solution line may happen to repeat
    # (`"softmax_axis": -1,`); code and prose are what must not show the solution.
    texts = {name: text for name, text in texts.items() if not name.endswith(".json")}
    released_lines = {part.strip() for text in texts.values() for line in text.splitlines()
                      for part in (line, line.split("#")[0])}
    whole_text = "\n".join(texts.values())
    code, comments = solution_region_lines()
    assert code and comments
    for line in code:
        assert line not in released_lines, f"a solution line is released: {line!r}"
        if len(line) >= 20:
            assert line not in whole_text, f"a solution line is released: {line!r}"
    for comment in comments:
        if len(comment.split()) >= 4:  # a remark in words, not a shape note like `[T, T]`
            assert comment not in whole_text, f"a solution comment is released: {comment!r}"


def test_the_self_checks_table_of_mistakes_stays_small_and_public():
    """What the self-check names mistakes with ships to every student (and nbgrader keeps several
    copies of it per student): under 1 MB gzipped and 8 MB read (about a tenth of a second), its
    calls built from fixed public numbers, never from the grading key or a hidden case."""
    packed = (RELEASE / release.MISTAKES).read_bytes()
    assert len(packed) < 1_000_000
    text = gzip.decompress(packed).decode("utf-8")
    assert len(text.encode("utf-8")) < 8_000_000
    mistakes = json.loads(text)
    data = json.loads((RELEASE / "chapter_example.json").read_text(encoding="utf-8"))
    assert set(data) == set(release.EXAMPLE_KEYS)
    probes = release.public_probes(data)
    for step in STEPS:
        table = mistakes["steps"][step.id]
        shipped = [(call["function"], call["args"]) for call in table["calls"]]
        assert shipped == [(fn, [release._argument(arg) for arg in args]) for fn, args in probes[step.id]]
        for entry in table["models"].values():
            assert 1 <= len(entry["codes"]) <= 3 and set(entry["codes"]) <= set(table["explanations"])


def test_the_stub_keeps_every_signature_and_docstring_and_raises_not_implemented():
    reference = ast.parse(REFERENCE.read_text(encoding="utf-8"))
    stub = ast.parse((RELEASE / "attention_head.py").read_text(encoding="utf-8"))
    stub_functions = {node.name: node for node in stub.body if isinstance(node, ast.FunctionDef)}
    for node in reference.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        stubbed = stub_functions[node.name]
        assert ast.dump(stubbed.args) == ast.dump(node.args), node.name
        assert ast.get_docstring(stubbed) == ast.get_docstring(node), node.name
        body = stubbed.body[1:]
        assert len(body) == 1 and isinstance(body[0], ast.Raise), node.name
        assert ast.unparse(body[0]) == "raise NotImplementedError()", node.name


def test_the_stub_asks_each_written_question_above_an_empty_answer():
    lines = (RELEASE / "attention_head.py").read_text(encoding="utf-8").splitlines()
    for name, question in ANSWERS:
        index = lines.index(f'{name} = ""')
        assert question in lines[index - 1] and lines[index - 1].startswith("#"), name


def test_the_notebook_is_valid_nbformat_4_with_a_python3_kernel_and_tagged_code_cells():
    notebook = nbformat.read(RELEASE / "attention_head.ipynb", as_version=4)
    nbformat.validate(notebook)
    assert notebook.nbformat == 4
    assert notebook.metadata.kernelspec == {"name": "python3", "display_name": "Python 3",
                                            "language": "python"}
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    tags = [cell.metadata.get("qkv") for cell in code]
    assert all(tag and tag["role"] in ("setup", "solution", "check", "plot") for tag in tags)
    assert all(tag["step"] in (None, *STEP_IDS) for tag in tags)
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code)
    assert len({cell.id for cell in notebook.cells}) == len(notebook.cells)

    checks = [tag["step"] for tag in tags if tag["role"] == "check" and tag["step"]]
    assert checks == list(STEP_IDS)
    defined = [ast.parse(cell.source).body[0].name for cell in code
               if cell.metadata["qkv"]["role"] == "solution"]
    assert sorted(defined) == sorted({name for step in STEPS for name in step.functions})
    answers = [cell.source for cell in notebook.cells if cell.id.startswith("answer-")]
    assert answers == ["YOUR ANSWER HERE"] * len(ANSWERS)


def test_the_setup_cell_imports_nothing_but_numpy_and_defines_only_the_example():
    notebook = nbformat.read(RELEASE / "attention_head.ipynb", as_version=4)
    (setup,) = [cell for cell in notebook.cells
                if cell.cell_type == "code" and cell.metadata["qkv"]["role"] == "setup"]
    tree = ast.parse(setup.source)
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert [ast.unparse(node) for node in imports] == ["import numpy as np"]
    assigned = [target.id for node in tree.body if isinstance(node, ast.Assign)
                for target in node.targets]
    assert assigned == ["X", "W_Q", "W_K", "W_V"]
    assert len(tree.body) == len(imports) + len(assigned)
    namespace = {}
    exec(setup.source, namespace)
    inputs = json.loads(DATA.read_text(encoding="utf-8"))["inputs"]
    assert {name: namespace[name].tolist() for name in assigned} == inputs


# --- the self-check -----------------------------------------------------------------------------

def test_the_stub_fails_every_public_check_as_not_implemented(tmp_path):
    run = SelfCheck(released_copy(tmp_path))
    steps = run.steps()
    assert list(steps) == list(STEP_IDS)  # one test per step id, in the step table's order
    for step_id, (outcome, message) in steps.items():
        assert outcome == "failure", step_id
        assert message.startswith(f"{step_id}: not implemented yet"), message
    outcome, message = run.tests["test_written_answers_are_filled_in"]
    assert outcome == "failure" and all(name in message for name in ANSWER_NAMES)
    assert f"0 of {len(STEPS)} steps match" in run.summary
    assert "Not implemented yet: qkv" in run.summary
    assert "passed" not in run.summary


def test_the_reference_passes_every_public_check_and_points_to_the_hidden_graders(tmp_path):
    folder = released_copy(tmp_path)
    shutil.copyfile(REFERENCE, folder / "attention_head.py")
    run = SelfCheck(folder)
    assert run.process.returncode == 0, run.output
    assert list(run.steps()) == list(STEP_IDS)
    assert all(outcome == "passed" for outcome, _ in run.tests.values()), run.tests
    assert "The public checks on the chapter's example passed" in run.summary
    assert "hidden graders test more" in run.summary
    assert "all tests passed" not in run.output.lower()


def test_a_notebook_filled_with_the_reference_passes_every_public_check(tmp_path):
    folder = released_copy(tmp_path)
    (folder / "attention_head.py").unlink()
    notebook = filled_notebook(folder)
    (folder / "attention_head.ipynb").write_text(json.dumps(notebook), encoding="utf-8")
    run = SelfCheck(folder)
    assert run.process.returncode == 0, run.output
    assert "attention_head.ipynb" in run.output  # the header says which file was checked
    assert all(outcome == "passed" for outcome, _ in run.steps().values()), run.steps()
    assert run.tests["test_written_answers_are_filled_in"][0] == "skipped"
    assert "The public checks on the chapter's example passed" in run.summary


def test_the_filled_notebook_runs_top_to_bottom_with_a_tick_per_step_and_a_heatmap(tmp_path):
    folder = released_copy(tmp_path)
    notebook = filled_notebook(folder)
    script = "\n\n".join("".join(cell["source"]) for cell in notebook["cells"]
                         if cell["cell_type"] == "code")
    script += ("\n\nimport matplotlib.pyplot as plt\n"
               "print('heatmap of', [tuple(im.get_array().shape) for ax in plt.gcf().axes for im in ax.images])\n")
    plot = next(cell for cell in notebook["cells"] if cell.get("id") == "plot")
    assert len([line for line in "".join(plot["source"]).splitlines() if line.strip()]) <= 3  # the plotting is in heatmap.py
    (folder / "run_notebook.py").write_text(script, encoding="utf-8")
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run([sys.executable, "run_notebook.py"], cwd=folder, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    ticks = [line for line in result.stdout.splitlines() if line.startswith("✓ ")]
    assert len(ticks) == len(STEPS)
    assert all("matches the chapter" in tick or "match the chapter" in tick for tick in ticks)
    assert "heatmap of [(3, 3)]" in result.stdout


def test_a_check_cell_on_the_stub_raises_an_assertion_that_says_not_implemented(tmp_path):
    folder = released_copy(tmp_path)
    notebook = json.loads((folder / "attention_head.ipynb").read_text(encoding="utf-8"))
    cells = {cell["id"]: "".join(cell["source"]) for cell in notebook["cells"]}
    script = "\n\n".join(cells[key] for key in ("setup", "check", "solution-scores-scores",
                                                "check-scores"))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run([sys.executable, "-c", script], cwd=folder, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "CheckFailed: scores: not implemented yet" in result.stderr


def test_a_column_normalized_softmax_fails_with_the_call_the_expected_weights_and_the_section(
        tmp_path):
    folder = released_copy(tmp_path)
    (folder / "attention_head.py").write_text(
        REFERENCE.read_text(encoding="utf-8") + COLUMN_NORMALIZED, encoding="utf-8")
    run = SelfCheck(folder)
    outcome, message = run.steps()["softmax"]
    assert outcome == "failure"
    assert "Called softmax_rows(S)" in message
    assert "§15.3" in message
    weights = json.loads(DATA.read_text(encoding="utf-8"))["values"]["A"]
    assert f"{weights[0][0]:.6f}" in message and f"{weights[2][2]:.6f}" in message
    # six significant digits, as a person reads them: never a float's full 17
    assert not re.search(r"\d\.\d{8,}", message), message
    assert re.search(r"mismatched elements: \d / 9", message)  # numpy's manner: how many differ
    assert "shape (3, 3)" in message.splitlines()[1]  # and the shape first
    assert run.steps()["scores"][0] == "passed"
    assert re.search(r"attention .*the chapter's solution builds on softmax", run.summary)
    # The mistake is named as the hidden grader names it, in the same words; attention, built on
    # the failing softmax, names nothing and says to fix that first, in one line.
    named = "\n".join(feedback.diagnosis_lines(["column-normalized"], BY_ID["softmax"]))
    assert named in message
    attention = run.steps()["attention"][1]
    assert attention.startswith("attention, as the chapter solves it, builds on softmax: fix that first.\n")
    assert "[column-normalized]" not in attention and "known mistake" not in attention


def test_a_check_cell_names_the_mistake_in_the_hidden_graders_words(tmp_path):
    folder = released_copy(tmp_path)
    notebook = json.loads((folder / "attention_head.ipynb").read_text(encoding="utf-8"))
    cells = {cell["id"]: "".join(cell["source"]) for cell in notebook["cells"]}
    script = "\n\n".join([cells["setup"], cells["check"], COLUMN_NORMALIZED, cells["check-softmax"]])
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run([sys.executable, "-c", script], cwd=folder, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "CheckFailed: softmax: Called softmax_rows(S)" in result.stderr
    assert "\n".join(feedback.diagnosis_lines(["column-normalized"], BY_ID["softmax"])) in result.stderr


def test_a_call_that_never_returns_is_stopped_and_the_other_checks_still_run(tmp_path):
    folder = released_copy(tmp_path)
    looping = "\n\ndef head_facts(t, d_k, d_v):\n    while True:\n        try:\n            pass\n        except Exception:\n            pass\n"
    (folder / "attention_head.py").write_text(REFERENCE.read_text(encoding="utf-8") + looping, encoding="utf-8")
    steps = SelfCheck(folder).steps()
    assert steps["ex4_shapes"][0] == "failure"
    assert "it was still running after 10 s, so it was stopped: look for a loop that never ends" in steps["ex4_shapes"][1]
    assert all(outcome == "passed" for step, (outcome, _) in steps.items() if step != "ex4_shapes")


def test_a_wrong_type_or_a_changed_argument_is_explained_as_such(tmp_path):
    folder = released_copy(tmp_path)
    wrong = '''

def scores(q, k):
    return str(q @ k.T)


def softmax_rows(s):  # np.matrix is an array-like, read as the hidden graders read it
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    a = e / e.sum(axis=-1, keepdims=True)
    return np.asmatrix(a) if a.ndim == 2 else a


def mix(a, v):
    return None


def scale(d, d_k):
    d /= np.sqrt(d_k)
    return d
'''
    (folder / "attention_head.py").write_text(REFERENCE.read_text(encoding="utf-8") + wrong,
                                              encoding="utf-8")
    steps = SelfCheck(folder).steps()
    assert "a string" in steps["scores"][1] and "wrong type" in steps["scores"][1]
    assert steps["softmax"][0] == "passed"
    assert "came back as None, which is the wrong type" in steps["mix"][1]
    assert "wrote into an argument it was given" in steps["scale"][1]  # handed read-only, as graded
    assert steps["qkv"][0] == "passed"


def test_the_repository_test_run_does_not_collect_the_student_self_check():
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"}
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                             "-p", "no:cacheprovider"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    collected = [line for line in result.stdout.splitlines() if "::" in line]
    assert collected, result.stdout + result.stderr
    assert not [line for line in collected if not line.startswith("tests/")]
