"""A submission is compiled once per worker: its first child sends what it compiled, before any of
the submission's code runs, and a later child of the same source (after a call that did not finish,
or a step called again) loads that instead of compiling it again. What it loads must run exactly
as the source would: the same cells, the same file names in tracebacks, the same output and errors."""
from __future__ import annotations

import marshal
import warnings

import nbformat

from autograder import inside
from support import grade_json, reference_source, steps_by_id

HANG_EX4 = ("\n\ndef head_facts(t, d_k, d_v):\n    while True:\n        pass\n")


class Capture:
    def __init__(self):
        self.text = []

    def write(self, text):
        self.text.append(text)

    def take(self):
        text, self.text = "".join(self.text), []
        return text


def test_cells_compile_under_their_own_names_and_in_their_own_order():
    capture = Capture()
    cells = [(1, "x = 1"), (4, "def f():\n    return 1 / 0", True), (6, "y = x + 1")]
    codes = inside._precompiled(cells, "attention_head.ipynb", True, capture)
    assert [code.co_filename for code in codes] == ["attention_head.ipynb, cell 1", "attention_head.ipynb, cell 4",
                                                    "attention_head.ipynb, cell 6"]
    assert inside._codes(marshal.dumps(codes), 3) is not None


def test_a_source_whose_compiling_prints_or_raises_is_compiled_again_as_it_runs():
    capture = Capture()
    with warnings.catch_warnings():  # as in a child: a SyntaxWarning is printed to its captured output
        warnings.simplefilter("default")
        warnings.showwarning = lambda message, *_args, **_kwargs: capture.write(str(message))
        # `x is 1` warns as it compiles: kept, the warning would be missing from a later child's output
        assert inside._precompiled(["x = 1\nprint(x is 1)"], "attention_head.py", False, capture) is None
    assert capture.take() == ""  # what compiling printed is not kept: it is printed again as the cell runs
    assert inside._precompiled([(1, "x = 1"), (2, "def (:")], "attention_head.ipynb", True, capture) is None


def test_what_a_child_sends_is_only_ever_a_list_of_codes_one_per_cell():
    code = compile("x = 1", "attention_head.py", "exec")
    for data in (b"", b"\x00garbage", marshal.dumps([code, code]), marshal.dumps(["x = 1"]),
                 marshal.dumps((code,)), marshal.dumps({"x": code})):
        assert inside._codes(data, 1) is None
    assert inside._dumped([code]) and inside._dumped([object()]) == b""


def _notebook(tmp_path, *cells):
    book = nbformat.v4.new_notebook()
    book.cells = [nbformat.v4.new_code_cell(cell) for cell in cells]
    path = tmp_path / "attention_head.ipynb"
    nbformat.write(book, path)
    return path


def test_the_fresh_child_after_a_hanging_call_runs_the_notebook_as_the_first_did(tmp_path):
    """Exercise 4 hangs, and exercise 5 runs in a fresh child, which loads the cells the first one
    compiled: a cell that stops, a `%%timeit` cell whose definitions are gone once it ends, and the
    rest, each as Jupyter would run it."""
    path = _notebook(tmp_path, reference_source(), "raise ValueError('a scratch cell')",
                     "%%timeit\ndef value_intervention(*args):\n    return None",
                     HANG_EX4, "print('the last cell ran')")
    result = grade_json(path, "--seed", "5", "--timeout", "0.3")
    steps = steps_by_id(result)
    assert steps["ex4_shapes"]["status"] == "timeout", steps["ex4_shapes"]["feedback"]
    assert {sid for sid, step in steps.items() if step["status"] != "passed"} == {"ex4_shapes"}, \
        {sid: step["feedback"] for sid, step in steps.items() if step["status"] != "passed"}


def test_a_module_that_warns_as_it_compiles_is_graded_the_same_after_a_hanging_call(tmp_path):
    path = tmp_path / "attention_head.py"
    path.write_text(reference_source() + "\n_odd = 1 is 1\n" + HANG_EX4)
    result = grade_json(path, "--seed", "5", "--timeout", "0.3")
    steps = steps_by_id(result)
    assert steps["ex4_shapes"]["status"] == "timeout" and steps["ex5_intervention"]["status"] == "passed"


def test_byte_identical_modules_are_graded_alike_whichever_child_compiled_them(tmp_path):
    """Loading compiled code rebuilds a set's constant, whose order may differ from the compiled
    one's ({32, 0, 8, 64, 16} starts with 32 as compiled, 0 as loaded). Every child runs the code
    as loaded, the first one too: two students' identical files, the second loading what the
    first's child compiled, get the same grade."""
    source = reference_source() + (
        "\n\n_FIRST = next(iter({32, 0, 8, 64, 16}))\n_facts = head_facts\n\n\n"
        "def head_facts(t, d_k, d_v):\n    return _facts(t, d_k, d_v) if _FIRST == 32 else None\n")
    for student in ("alice", "bob"):
        (tmp_path / "twins" / student).mkdir(parents=True)
        (tmp_path / "twins" / student / "attention_head.py").write_text(source)
    results = grade_json(tmp_path / "twins", "--seed", "5", "--jobs", "1", "--out", str(tmp_path / "out"))
    views = [[(step["id"], step["score"], step["diagnoses"]) for step in result["steps"]] for result in results]
    assert len(views) == 2 and views[0] == views[1], views


def test_a_notebook_cell_is_compiled_only_when_the_cells_before_it_have_run(tmp_path):
    """A cell may turn warnings into errors for the cells after it, as Jupyter runs them: the cell
    whose escape sequence then fails to compile stops, and defines nothing."""
    path = _notebook(tmp_path, "import warnings\nwarnings.simplefilter('error')",
                     reference_source() + "\n_pattern = '\\d+'\n")
    result = grade_json(path, "--seed", "5")
    assert result["score"] == 0.0 and all(step["status"] != "passed" for step in result["steps"])
    assert "SyntaxError" in steps_by_id(result)["qkv"]["feedback"], steps_by_id(result)["qkv"]["feedback"]


def test_what_a_worker_keeps_is_bounded_with_the_sources_it_is_kept_for():
    worker = inside.Worker.__new__(inside.Worker)
    worker.codes = {}
    for number in range(40):
        worker.keep_code(("attention_head.py", bytes([number]) * (1 << 20)), b"code")
    assert sum(len(cells) + len(code) for (_, cells), code in worker.codes.items()) <= inside.MOST_CODE_BYTES
    assert len(worker.codes) <= inside.MOST_CODES and ("attention_head.py", bytes([39]) * (1 << 20)) in worker.codes
