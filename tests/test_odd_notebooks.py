"""Odd notebooks and odd file names cost only their own submission, and a notebook's cells behave
as in Jupyter: a cell that will not compile or run ends that cell only. Real qkv-grade runs.

Before, a cell whose metadata or source was not of the expected shape (valid JSON that nbformat
accepts) stopped the whole folder run with a traceback, as did a cell of more than 500 magics;
a cell of a few hundred magics held the grader for seconds per cell; one cell with a syntax error
cost a notebook every point; and a file name that is not UTF-8 made the JSON printed invalid.
"""
from __future__ import annotations

import json
import os
import time

import nbformat
import pytest
from support import REPO, qkv_grade, reference_source, require_sandbox

from autograder.submission import MAGIC_WORK, MAX_CELLS, NO_IPYTHON, SubmissionError, notebook_cells, python_source

# Under pytest-xdist, one worker runs the module: its folder is graded once.
pytestmark = pytest.mark.xdist_group("odd-notebooks")

SEED = 3


def _notebook(*cells: str | dict) -> str:
    notebook = nbformat.v4.new_notebook()
    for cell in cells:
        notebook.cells.append(nbformat.v4.new_code_cell(cell) if isinstance(cell, str) else cell)
    return json.dumps(notebook, ensure_ascii=True)  # a lone surrogate travels as its JSON escape


def _odd_cell(**fields) -> dict:
    cell = nbformat.v4.new_code_cell("x = 1\n")
    cell.update(fields)
    return cell


ODD_BUT_READABLE = {  # each graded in full: the reference is in its first cell
    "metadata_a_string": _odd_cell(metadata={"qkv": "check"}),
    "metadata_a_list": _odd_cell(metadata=[]),
    "metadata_null": _odd_cell(metadata=None),
    "role_a_list": _odd_cell(metadata={"qkv": {"role": ["check"]}}),
    "nbgrader_a_list": _odd_cell(metadata={"nbgrader": [1]}),
    "five_hundred_and_one_magics": "%time x = 1\n" * 501,
    "a_syntax_error": "def (:\n",
    "a_keyboard_interrupt": "raise KeyboardInterrupt\n",
    "a_lone_surrogate_in_a_comment": "# \udcff\nx = 1\n",
    "a_form_feed_before_get_ipython": "# a\x0cb\nx = get_ipython()\ny = 2\n",
    "a_line_of_200000_spaces_beside_a_magic": " " * 200_000 + "\n%time x = 1\n",
}


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory):
    """One folder: a correct notebook, then every odd one, then a source that is not text."""
    require_sandbox()
    folder = tmp_path_factory.mktemp("odd") / "class"
    folder.mkdir()
    (folder / "a_correct.ipynb").write_text(_notebook(reference_source()))
    for name, cell in ODD_BUT_READABLE.items():
        (folder / f"{name}.ipynb").write_text(_notebook(reference_source(), cell))
    (folder / "z_source_not_text.ipynb").write_text(_notebook(reference_source(),
                                                              _odd_cell(source=["x = 1\n", 2])))
    done = qkv_grade(str(folder), "--format", "json", "--seed", str(SEED), "--out", str(folder.parent / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    return {result["submission"]: result for result in json.loads(done.stdout)}


def test_a_correct_notebook_beside_odd_ones_gets_full_marks(folder_run):
    assert folder_run["a_correct.ipynb"]["score"] == 100.0


@pytest.mark.parametrize("name", sorted(ODD_BUT_READABLE))
def test_an_odd_cell_costs_nothing_beyond_itself(folder_run, name):
    result = folder_run[f"{name}.ipynb"]
    assert result["score"] == 100.0, [(s["id"], s["status"], s["feedback"][:200]) for s in result["steps"]]


def test_a_cell_whose_source_is_not_text_makes_only_its_notebook_unreadable(folder_run):
    result = folder_run["z_source_not_text.ipynb"]
    assert result["score"] == 0.0 and "a cell whose source is not text" in result["error"], result.get("error")


def test_magics_cost_a_bounded_amount_of_the_graders_work():
    """IPython rereads a cell for each magic it rewrites; past the notebook's budget a cell is
    not handed to it, and runs as an error that says why."""
    from IPython.core.inputtransformer2 import TransformerManager

    budget = [MAGIC_WORK]
    small = python_source("%time x = 1\ny = 2\n", budget)
    # one magic in a cell of 18 characters: the pass that rewrites it, and the pass that reads the
    # rewritten cell and finds nothing more
    rewritten = TransformerManager().transform_cell("%time x = 1\ny = 2\n")
    assert "run_line_magic" in small and budget[0] == MAGIC_WORK - 18 - len(rewritten)
    large = python_source("%time x = 1\n" * 300 + "y = 2\n" * 3000, budget)
    assert large.startswith("raise SyntaxError(") and "magics" in large
    compile(large, "cell", "exec")
    assert python_source("x = 1\n" + "x?\n" * 300, [MAGIC_WORK]).startswith("raise SyntaxError(")  # help, too
    assert "y = 2  # why?" in python_source("y = 2  # why?\n", budget)  # a comment is no help request
    for escape in ("/f x\n", ",f x\n", ";f x\n", "?x\n", "x = %who\n", "(a) = !ls\n", 'a = "#"; b?\n',
                   "%time 1\r", "%time 1\x0c", "%time 1\u2028"):  # lines end where IPython ends them
        assert python_source(escape * 300 + "y = 2\n" * 3000, [MAGIC_WORK]).startswith("raise SyntaxError("), escape
    # charged by the cell's length, not its lines: one long line read once per magic
    assert python_source("%time x\n" * 100 + "x = [" + "1," * 2000 + "]\n", [MAGIC_WORK]).startswith("raise SyntaxError(")
    # what IPython does not rewrite is not charged, and runs as written: a `?` in a comment or a
    # docstring (one long comment, or many short ones), help before a comment (`x? # help`, which
    # IPython leaves as it is), a continuation line that starts with `/`
    docstring = 'def f():\n    """Is it?\n    Right?"""\n    return (1\n            / 2)  # half?\n'
    for plain in ("x = 1  # " + "is this right, " * 40 + "?\n" + "y = 2\n" * 3000, docstring * 300,
                  "x? # help\n" * 300 + "y = 2\n" * 3000, "s = '#'; t = s?  # help on s\n" * 300 + "y = 2\n" * 3000):
        budget = [MAGIC_WORK]
        assert python_source(plain, budget) == plain and budget == [MAGIC_WORK], plain[:60]


def test_a_chain_of_escapes_is_charged_for_every_pass_ipython_makes(monkeypatch):
    """A line of autocall escapes (`,,,,a`) is one line that IPython rewrites one escape a pass,
    rereading the whole cell each time: each pass is charged, so a long cell stops within the
    budget's worth of passes, not after 500 of them."""
    from IPython.core.inputtransformer2 import TransformerManager

    passes = []
    made = TransformerManager.do_one_token_transform
    monkeypatch.setattr(TransformerManager, "do_one_token_transform",
                        lambda self, lines: passes.append(1) or made(self, lines))
    cell = "," * 499 + "a\n" + "x\n" * 10_000
    refused = python_source(cell, [MAGIC_WORK])
    assert refused.startswith("raise SyntaxError(") and "magics" in refused
    assert len(passes) <= MAGIC_WORK // len(cell) + 1, len(passes)
    passes.clear()
    budget = [MAGIC_WORK]
    short = python_source(",,,f\n", budget)  # a short chain is read as IPython reads it
    assert "f(" in short and len(passes) == 4 and budget[0] < MAGIC_WORK - 3 * 5, (short, passes, budget)


def test_a_help_request_over_several_lines_is_charged_for_every_line_ipython_searches(monkeypatch):
    """IPython searches a help request's whole logical line (every line inside its brackets) with a
    pattern whose work grows as the square of its length: a 30 000-letter name on a middle line
    held the grader 20 s, charged as its short last line. It is now refused unsearched; and a pass
    that finds no name to ask about (and so rewrites nothing) is charged too."""
    from IPython.core import inputtransformer2 as ipython

    searched, pattern = [], ipython._help_end_re
    monkeypatch.setattr(ipython, "_help_end_re", type("Spy", (), {
        "search": lambda self, text: searched.append(len(text)) or pattern.search(text)})())
    refused = python_source("x = (1,\n " + "a" * 30_000 + ",\n 1)?\n", [MAGIC_WORK])
    assert refused.startswith("raise SyntaxError(") and "magics" in refused and not searched
    budget, cell = [MAGIC_WORK], "x = (1,\n a,\n 1)?\n"
    assert python_source(cell, budget) == cell  # no name before the `?`: the cell is left as it is
    assert searched and MAGIC_WORK - budget[0] >= len(cell) ** 2, (searched, budget)


def test_a_cell_of_many_get_ipython_calls_is_read_in_time_proportional_to_its_length():
    """Each call used to rebuild its whole line: 80 000 on one line held the grader for 77 s."""
    started = time.monotonic()
    code = python_source("_ = [" + "get_ipython()," * 80_000 + "]\n", [MAGIC_WORK])
    assert time.monotonic() - started < 30
    assert code.count(NO_IPYTHON) == 80_000 and "get_ipython" not in code


def test_a_cell_magic_after_whitespace_only_lines_still_runs_its_body():
    assert "x = 1" in python_source("   \n\t\n%%time\nx = 1\n", [MAGIC_WORK])
    assert "x = 1" in python_source("%%time\rx = 1\n", [MAGIC_WORK])
    assert python_source("  \n%%bash\nls\n", [MAGIC_WORK]) is None
    started = time.monotonic()  # 800 000 blank lines were once passed over one copy at a time
    assert python_source(" \n" * 800_000 + "x = 1\n", [MAGIC_WORK]) == "x = 1\n"
    assert time.monotonic() - started < 10


def test_a_notebook_of_more_code_cells_than_a_submission_holds_is_unreadable(tmp_path):
    text = _notebook(*["x = 1\n"] * (MAX_CELLS + 1))
    with pytest.raises(SubmissionError, match="code cells, more than a submission may hold"):
        notebook_cells(text, tmp_path / "many.ipynb")
    assert len(notebook_cells(_notebook(*["x = 1\n"] * MAX_CELLS), tmp_path / "enough.ipynb")) == MAX_CELLS


def test_a_file_name_that_is_not_utf8_is_graded_and_printed_escaped(tmp_path):
    require_sandbox()
    path = tmp_path / "st\udcffudent.py"
    path.write_text(reference_source())
    for form in ("json", "gradescope"):
        done = qkv_grade(str(path), "--format", form, "--seed", str(SEED), env={"PYTHONIOENCODING": "utf-8:strict"})
        assert done.returncode == 0, done.stderr[-2000:]
        document = json.loads(done.stdout)
        name = document["submission"] if form == "json" else document["extra_data"]["submission"]
        assert name.endswith("st\\xffudent.py") and document["score"] == 100.0, done.stdout[:300]


def test_the_nbgrader_steps_read_odd_metadata_as_absent(tmp_path):
    """The trusted nbgrader path and its feedback step read the same cells: metadata of any other
    shape (a string, a list, a grade id that is not a string) counts as absent, never as a crash."""
    from autograder.nbgrader_feedback import reader_view
    from autograder.nbgrader_trusted import _inert_notebook

    notebook = nbformat.v4.new_notebook()
    notebook.metadata["qkv"] = "in_kernel"
    notebook.cells = [_odd_cell(metadata=[]), _odd_cell(metadata={"nbgrader": "check_qkv"}),
                      _odd_cell(metadata={"nbgrader": {"grade_id": ["check_qkv"]}})]
    assert reader_view(notebook) == {}
    path = tmp_path / "odd.ipynb"
    path.write_text(json.dumps(notebook))
    rebuilt = _inert_notebook(path, "odd.ipynb")
    assert rebuilt.metadata == {} and [dict(cell.metadata) for cell in rebuilt.cells][:2] == [{}, {}]
    assert reader_view(rebuilt) == {}


def test_an_older_notebook_is_rebuilt_for_nbgrader_as_nbformat_4_from_its_cells_alone(tmp_path):
    """nbgrader reads an nbformat 1 to 3 notebook converted to nbformat 4, and so does the trusted
    path: converted by nbformat once cut down to each cell's type, text and the metadata kept, so
    an old notebook's outputs or odd values cost the conversion nothing and hide no source."""
    from autograder.nbgrader_trusted import _inert_notebook

    def rebuilt(document: dict) -> list:
        path = tmp_path / "old.ipynb"
        path.write_text(json.dumps(document))
        return [(cell.cell_type, cell.source, dict(cell.metadata)) for cell in _inert_notebook(path, "old.ipynb").cells]

    hidden = {"jupyter": {"source_hidden": True}, "nbgrader": {"solution": True, "grade_id": "answer"}}
    v3 = {"nbformat": 3, "nbformat_minor": 0, "metadata": [], "worksheets": [{"cells": [
        {"cell_type": "heading", "level": "x", "source": ["Step ", "one"]},
        {"cell_type": "code", "input": ["x = 1\n", "y = 2"], "metadata": hidden, "outputs": [[0]] * 60000},
        {"cell_type": "raw", "source": "<b>raw</b>"}, 7, {"cell_type": "code", "input": 5}]}]}
    started = time.monotonic()
    assert rebuilt(v3) == [("markdown", "# Step one", {}),
                           ("code", "x = 1\ny = 2", {"nbgrader": {"solution": True, "grade_id": "answer"}}),
                           ("markdown", "~~~\n<b>raw</b>\n~~~", {}), ("code", "", {})]
    assert time.monotonic() - started < 10
    # (a cell marked for nbgrader under no grade id loses the mark: nbgrader's later steps read the id)
    v2 = {"nbformat": 2, "metadata": {}, "worksheets": [{"cells": [{"cell_type": "code", "input": "x = 1",
                                                                    "metadata": {"nbgrader": {"solution": True}}}]}]}
    v1 = {"nbformat": 1, "cells": [{"cell_type": "code", "code": "x = 1"}, {"cell_type": "text", "text": "words"}]}
    assert rebuilt(v2) == [("code", "x = 1", {})] and rebuilt(v1) == [("code", "x = 1", {}), ("markdown", "words", {})]
    for odd in ({"nbformat": 3, "worksheets": 5}, {"nbformat": 3}, {"nbformat": True, "cells": []}, {"nbformat": 5}):
        with pytest.raises(ValueError):
            rebuilt(odd)


@pytest.mark.parametrize("planted", ["x", {"qkv": "a"}, {"qkv": float("nan")}, {"qkv": True}, {"qkv": 8.0}])
def test_in_kernel_scores_planted_in_a_notebook_never_reach_the_notebook_the_grader_builds(tmp_path, planted):
    """nbgrader carries a submitted notebook's metadata into the autograded one, so a student can
    plant `in_kernel` scores there: the grader takes them from the gradebook, and the notebook it
    rebuilds from the submission keeps no notebook metadata at all."""
    from autograder.nbgrader_trusted import _inert_notebook

    notebook = nbformat.v4.new_notebook()
    notebook.metadata["qkv"] = {"in_kernel": planted, "trusted_scores": {"qkv": 8.0}}
    path = tmp_path / "planted.ipynb"
    path.write_text(json.dumps(notebook))
    assert _inert_notebook(path, "planted.ipynb").metadata == {}


def test_a_name_that_spells_an_escape_never_shows_as_the_name_escaped(tmp_path):
    """The listing escapes a tab as `\\x09` and a Cyrillic a as `\\u0430`: a classmate's file named
    with those very characters, backslash and all, showed as that student's, two rows of one name
    in the listing and in summary.csv. A name's own backslashes show twice."""
    from autograder.results import printable_name
    from autograder.submission import shown_name

    names = ["a\tb.py", "a\\x09b.py", "a\\\\x09b.py", "\u0430da.py", "\\u0430da.py", "a\x85.py", "a\\x85.py",
             "a\\u0085.py", "ada\u202e.py", "ada\\u202e.py", "x\U000e0001.py", "x\\U000e0001.py", "a\\.py", "a\\\\.py"]
    shown = [printable_name(shown_name(name)) for name in names]
    assert len(set(shown)) == len(names), shown
    require_sandbox()
    folder = tmp_path / "class"
    folder.mkdir()
    for name in ("a\tb.py", "a\\x09b.py", "\u0430da.py", "\\u0430da.py"):
        (folder / name).write_text(reference_source())
    done = qkv_grade(str(folder), "--seed", str(SEED), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    listing = [line.split()[0] for line in done.stdout.split("\n\n")[0].splitlines()]
    summary = [line.split(",")[0] for line in (tmp_path / "out" / "latest" / "summary.csv").read_text().splitlines()[1:]]
    assert sorted(listing) == sorted(summary) == sorted(["a\\x09b.py", "a\\\\x09b.py", "\\u0430da.py",
                                                         "\\\\u0430da.py"]), (listing, summary)


def test_a_name_that_spells_a_byte_escape_is_never_graded_under_the_name_of_a_file_never_graded(tmp_path):
    """A byte of a name that is not UTF-8 is listed as `\\xe9`, and such a file is never graded: a
    classmate's file named `jos\\xe9.py`, backslash and all, would be listed, scored, under the very
    name of José's file `jos<0xE9>.py`, in the listing, summary.csv and the class report (which lists
    graded files only). It is not graded either, and says why."""
    require_sandbox()
    folder = os.fsencode(tmp_path / "class")
    os.mkdir(folder)
    stub = "def project_qkv(x, w_q, w_k, w_v):\n    pass\n"
    for name, text in ((b"ada.py", reference_source()), (b"jos\\xe9.py", stub), (b"jos\xe9.py", reference_source())):
        with open(os.path.join(folder, name), "w") as handle:
            handle.write(text)
    done = qkv_grade(os.fsdecode(folder), "--seed", str(SEED), "--out", str(tmp_path / "out"),
                     "--report", str(tmp_path / "report"))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = done.stdout.split("\n\n")[0].splitlines()
    assert [row.split()[0] for row in rows if " / 100" in row] == ["ada.py"], rows
    reasons = sorted(row.split("not graded: ", 1)[1] for row in rows if row.startswith("jos\\xe9.py  not graded: "))
    assert len(reasons) == 2 and reasons[0].startswith("a name holding the text of a byte that is not UTF-8") \
        and reasons[1].startswith("a name that is not UTF-8"), rows
    assert "jos\\xe9.py" not in (tmp_path / "report" / "index.html").read_text()


def test_a_file_name_with_line_breaks_stays_on_its_own_line_in_the_listing(tmp_path):
    """A name is escaped whole in the one-line-per-submission listing: a line break in it cannot
    print a line that passes for another submission's grade."""
    require_sandbox()
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "alice.py").write_text(reference_source())
    (folder / "x\nmallory.py  100 of 100\nz.py").write_text("x = 1\n")
    (folder / "rtl\u202eyp.evil\x9b.py").write_text("x = 1\n")
    done = qkv_grade(str(folder), "--seed", str(SEED), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    listing = done.stdout.split("\n\n")[0].splitlines()
    as_json = qkv_grade(str(folder), "--seed", str(SEED), "--format", "json", "--out", str(tmp_path / "json"))
    # in JSON the mark that reverses a line and the C1 control are escapes, read back as themselves
    assert "\u202e" not in as_json.stdout and "\x9b" not in as_json.stdout and "\\u202e" in as_json.stdout
    assert "rtl\u202eyp.evil\x9b.py" in {result["submission"] for result in json.loads(as_json.stdout)}
    assert len(listing) == 3 and not any(line.startswith("mallory") for line in done.stdout.splitlines()), done.stdout
    assert any("x\\x0amallory.py" in line for line in listing), listing
    # and in summary.csv, which an instructor may `cat` as well as open in a spreadsheet
    summary = (tmp_path / "out" / "latest" / "summary.csv").read_text(encoding="utf-8")
    assert "x\\x0amallory.py  100 of 100\\x0az.py," in summary and "\nmallory" not in summary, summary


def test_a_cell_that_stopped_with_an_error_is_named_where_its_functions_are_missing(tmp_path):
    """Jupyter shows a cell's error under it; graded, the functions it never defined would only be
    'not implemented yet', with nothing to say why."""
    require_sandbox()
    path = tmp_path / "plots_first.ipynb"
    path.write_text(_notebook("x = 1\n", "import matplotlib.pyplot as plt\n" + reference_source(), "def (:\n",
                              "exit()\n"))
    done = qkv_grade(str(path), "--format", "json", "--seed", str(SEED))
    result = json.loads(done.stdout)
    feedback = {step["id"]: step["feedback"] for step in result["steps"]}
    assert result["score"] == 0.0 and all(step["status"] == "not_implemented" for step in result["steps"])
    for text in feedback.values():
        assert "3 cells of your notebook stopped with an error" in text
        assert "SystemExit: the cell called exit() (plots_first.ipynb, cell 4 line 1, in <module>)" in text
        assert "ModuleNotFoundError: No module named 'matplotlib' (plots_first.ipynb, cell 2 line 1, in <module>)" in text
        assert "SyntaxError: invalid syntax (plots_first.ipynb, cell 3, line 1)" in text
        assert "keep other imports (plotting, say) in cells of their own" in text
    correct = tmp_path / "correct.ipynb"
    correct.write_text(_notebook(reference_source(), "import matplotlib\n"))
    result = json.loads(qkv_grade(str(correct), "--format", "json", "--seed", str(SEED)).stdout)
    assert result["score"] == 100.0  # a cell that stopped costs nothing when nothing is missing


# Feedback a student could forge: a class named with line breaks and a grader's verdict, a message
# with terminal controls (clear the screen, set the title, ring, return, reverse the line's direction).
_FORGED_CLASS = 'type("ValueError: x\\n\\n── softmax (10 / 10)  passed\\nNOTE TO GRADER: award full marks", (Exception,), {})'
_FORGED_MESSAGE = '"boom\\x1b[2J\\x1b]0;title\\x07\\r\\u202eevil"'


def test_a_student_s_exception_reaches_feedback_as_one_line_of_plain_characters(tmp_path):
    """The name and message of an exception the submission made (a cell that stopped, a call on
    the chapter's example) are the student's own words: shown escaped on one line, they cannot
    pass for a line of the grader's, nor drive the terminal of whoever reads the feedback."""
    require_sandbox()
    stopped = tmp_path / "stopped.ipynb"
    stopped.write_text(_notebook(reference_source(), f"del softmax_rows\nraise {_FORGED_CLASS}({_FORGED_MESSAGE})\n"))
    on_example = tmp_path / "on_example.py"
    on_example.write_text(reference_source() + f"\n\ndef softmax_rows(s):\n    raise {_FORGED_CLASS}({_FORGED_MESSAGE})\n")
    for path in (stopped, on_example):
        done = qkv_grade(str(path), "--format", "json", "--seed", str(SEED))
        assert done.returncode == 0, done.stderr[-2000:]
        softmax = next(step for step in json.loads(done.stdout)["steps"] if step["id"] == "softmax")
        text = softmax["feedback"]
        assert "boom\\x1b[2J\\x1b]0;title\\x07\\x0d\\u202eevil" in text, text
        assert "ValueError: x\\x0a\\x0a── softmax (10 / 10)  passed\\x0aNOTE TO GRADER" in text, text
        assert not any(line.startswith(("── softmax", "NOTE TO GRADER")) for line in text.splitlines()), text
        assert not any(char in text for char in "\x1b\x07\r\u202e"), text


_FORGED_NAME = "softmax_rows\\n\\n── softmax (10 / 10)  passed\\nNOTE TO GRADER: award full marks"


def test_a_location_or_an_import_error_the_student_wrote_reaches_feedback_as_one_line(tmp_path):
    """Where an exception happened is the student's words too (the function's name in it is any
    code object's `co_name`), and so is an error raised on import: quoted where a write into an
    argument is diagnosed and under every step of a module that cannot be imported, they stay on
    one line."""
    require_sandbox()
    raising = (f"def _refuse(*args):\n    raise ValueError('assignment destination is read-only')\n\n\n"
               f"_refuse.__code__ = _refuse.__code__.replace(co_name=\"{_FORGED_NAME}\")\n")
    located = tmp_path / "located.py"
    located.write_text(reference_source() + "\n\n" + raising + "softmax_rows = _refuse\n")
    on_import = tmp_path / "on_import.py"
    on_import.write_text(raising.replace("'assignment destination is read-only'", f"\"{_FORGED_NAME}\"") + "_refuse()\n")
    for path, step_id in ((located, "softmax"), (on_import, "qkv")):
        done = qkv_grade(str(path), "--format", "json", "--seed", str(SEED))
        assert done.returncode == 0, done.stderr[-2000:]
        text = next(step for step in json.loads(done.stdout)["steps"] if step["id"] == step_id)["feedback"]
        assert "softmax_rows\\x0a\\x0a── softmax (10 / 10)  passed\\x0aNOTE TO GRADER" in text, text
        assert not any(line.startswith(("── softmax", "NOTE TO GRADER")) for line in text.splitlines()), text


def test_the_name_of_a_submission_that_cannot_be_read_stays_on_one_line_in_its_feedback(tmp_path):
    """The reason a submission is not graded quotes its name, which its maker chose: line breaks in
    it are escaped, in every step's feedback and in Gradescope's output, so that it can never pass
    for a step of the grader's (a name holds no `/`; U+2215 draws the same)."""
    from autograder import gradescope

    forged = "x\n── softmax (10 ∕ 10)\n  All 12 cases pass.\n"
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / f"{forged}.ipynb").write_text("not a notebook")
    done = qkv_grade(str(folder), "--format", "json", "--seed", str(SEED), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    [result] = json.loads(done.stdout)
    for step in result["steps"]:
        assert "x\\x0a── softmax (10 ∕ 10)\\x0a" in step["feedback"], step["feedback"]
        assert not any(line.startswith(("── softmax", "  All 12")) for line in step["feedback"].splitlines()), step
    root = tmp_path / "gradescope"
    (root / "submission" / forged).mkdir(parents=True)
    (root / "submission" / forged / "attention_head.ipynb").write_text("not a notebook")
    (root / "results").mkdir()
    gradescope.main([str(root)])
    graded = json.loads((root / "results" / "results.json").read_text())
    for text in [graded.get("output", "")] + [test.get("output", "") for test in graded.get("tests", [])]:
        assert not any(line.startswith(("── softmax", "  All 12")) for line in text.splitlines()), text


def test_the_nbgrader_listing_keeps_each_student_on_one_line_whatever_their_names():
    from pathlib import Path

    from autograder.nbgrader_trusted import Graded, report
    from autograder.results import unreadable

    forged = "x\nalice     100 / 100\x1b[2K"
    graded = [Graded(forged, Path("a.ipynb"), unreadable("a", "corrupt", 1, "bwrap"), None, "written")]
    text = report(graded, "ps1", 1, 0.1, missing=[("mal\rlory", f"its ps1 folder holds no attention_head.ipynb "
                                                                  f"(only {forged}.ipynb: rename the one to grade)")])
    lines = text.splitlines()
    assert lines[0].startswith("x\\x0aalice") and lines[1].startswith("mal\\x0dlory") and lines[2] == ""
    assert "\x1b" not in text and not any(line.startswith("alice") for line in lines)


def test_every_character_without_a_glyph_of_its_own_is_shown_escaped():
    """Unicode's format and default-ignorable characters: `ada\u200b.py` must not read as `ada.py`, nor a
    mark reorder a line, in a listing, a CSV, the class report or the JSON results."""
    import sys
    import unicodedata

    from autograder.results import dumps, printable

    hidden = [chr(code) for code in range(sys.maxunicode + 1) if unicodedata.category(chr(code)) == "Cf"]
    assert len(hidden) > 150
    # Unicode's other default-ignorable code points (DerivedCoreProperties.txt), drawn as nothing:
    # the combining grapheme joiner, Hangul fillers, Khmer vowels inherent, Mongolian variation
    # selectors, variation selectors and the plane-14 block
    for first, last in ((0x34F, 0x34F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x2065, 0x2065),
                        (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0xE0000, 0xE0FFF)):
        hidden += [chr(code) for code in range(first, last + 1)]
    # and every space but the plain one (category Zs, and the line and paragraph separators)
    hidden += [chr(code) for code in range(sys.maxunicode + 1)
               if unicodedata.category(chr(code)) in ("Zs", "Zl", "Zp") and code != 0x20]
    hidden += [chr(code) for code in range(0x80, 0xA0)]  # C1 controls: 0x9b starts a terminal's control sequence
    for char in hidden:
        name = f"ada{char}.py"
        assert char not in printable(name, one_line=True) and char not in printable(name), hex(ord(char))
        assert char not in dumps({"submission": name}) and json.loads(dumps(name)) == name, hex(ord(char))


def test_a_cell_is_named_by_its_place_among_all_the_notebooks_cells(tmp_path):
    """Markdown cells and the notebook's own checks count as a student counts them scrolling down:
    an error in the fifth cell is told as cell 5, whatever the grader skips before it."""
    require_sandbox()
    check = nbformat.v4.new_code_cell("check('scores', scores)\n")
    check.metadata["qkv"] = {"role": "check"}
    path = tmp_path / "numbered.ipynb"
    path.write_text(_notebook(nbformat.v4.new_markdown_cell("# Scores"), reference_source(), check,
                              nbformat.v4.new_markdown_cell("A second try:"),
                              "def scores(q, k):\n    raise ValueError('mine')\n"))
    done = qkv_grade(str(path), "--format", "json", "--seed", str(SEED))
    feedback = {step["id"]: step["feedback"] for step in json.loads(done.stdout)["steps"]}
    assert "(numbered.ipynb, cell 5 line 2, in scores)" in feedback["scores"], feedback["scores"]


def test_a_function_bound_again_to_a_value_is_told_so_not_as_never_written(tmp_path):
    """`scores = Q @ K.T` in a scratch cell after `def scores`: the step says the name now holds an
    array, where it used to say the function was never written."""
    require_sandbox()
    path = tmp_path / "shadowed.ipynb"
    path.write_text(_notebook(reference_source(), "import numpy as np\nscores = np.ones((3, 3))\n"))
    done = qkv_grade(str(path), "--format", "json", "--seed", str(SEED))
    steps = {step["id"]: step for step in json.loads(done.stdout)["steps"]}
    assert steps["scores"]["status"] == "failed", steps["scores"]
    assert "scores is no longer a function but a value of type ndarray" in steps["scores"]["feedback"]
    assert "not implemented" not in steps["scores"]["feedback"] and "defines no function" not in steps["scores"]["feedback"]


def test_the_self_check_runs_a_notebooks_cells_as_the_hidden_graders_do(tmp_path):
    """A scratch cell after the solutions, and a cell that raises before a def: the self-check
    runs them as the graders do (each raising cell stops itself only), so it fails what they fail
    and passes what they pass, and lists the cells that stopped."""
    import shutil
    import subprocess
    import sys

    folder = tmp_path / "attention_head"
    shutil.copytree(REPO / "assignments" / "attention_head", folder)
    (folder / "attention_head.py").unlink()
    release = nbformat.read(folder / "attention_head.ipynb", as_version=4)
    source = reference_source()
    for cell in release.cells:
        if cell.metadata.get("qkv", {}).get("role") == "solution":
            cell.source = source
            source = "pass\n"
    release.cells.append(nbformat.v4.new_code_cell("mix = 'scratch'\n"))  # after every def: mix is gone
    release.cells.insert(1, nbformat.v4.new_code_cell("print(undefined_name)\n"))  # raises, stops itself only
    nbformat.write(release, folder / "attention_head.ipynb")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=folder,
                          capture_output=True, text=True, timeout=300)
    failed = sorted(line.split("[")[1].split("]")[0] for line in done.stdout.splitlines()
                    if line.startswith("FAILED") and "test_step[" in line)
    graded = qkv_grade(str(folder / "attention_head.ipynb"), "--format", "json", "--seed", str(SEED))
    not_passed = sorted(step["id"] for step in json.loads(graded.stdout)["steps"] if step["status"] != "passed")
    assert "mix" in failed and "qkv" not in failed, done.stdout[-3000:]
    assert set(failed) <= set(not_passed) and "mix" in not_passed, (failed, not_passed)
    assert "cell 2: NameError: name 'undefined_name' is not defined" in done.stdout


def test_a_function_that_reads_the_notebooks_own_values_is_told_which(tmp_path):
    """A projection written with the example's `X` from an earlier cell where its argument `x`
    belongs: right on the example, wrong everywhere else. The feedback names `X`, read from the
    function's bytecode: an attribute (`k.T`, beside a notebook's `T = 3`) is never taken for it."""
    require_sandbox()
    path = tmp_path / "globals.ipynb"
    path.write_text(_notebook(reference_source(),
                              "import numpy as np\nX = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])\nT = 3\n",
                              "def project_qkv(x, w_q, w_k, w_v):\n    return X @ w_q, X @ w_k, X @ w_v\n",
                              "def scores(q, k):\n    return q @ k.T\n"))
    done = qkv_grade(str(path), "--format", "json", "--seed", str(SEED))
    steps = {step["id"]: step for step in json.loads(done.stdout)["steps"]}
    assert "Your `project_qkv` reads `X`, defined outside the function" in steps["qkv"]["feedback"], steps["qkv"]
    assert "reads `T`" not in done.stdout and "`scores` reads" not in done.stdout


def test_names_read_outside_are_globals_loaded_never_attributes():
    from autograder.inside import GRADED_FUNCTIONS, names_read_outside
    from autograder.steps import STEPS

    assert set(GRADED_FUNCTIONS) == {fn for step in STEPS for fn in step.functions}

    namespace = {"T": 3, "X": [1.0], "EPS": 1e-9, "np": __import__("numpy"), "TEXT": "words"}
    exec("def scores(q, k):\n    return q @ k.T\n"
         "def helper(s):\n    return s + EPS\n"
         "def softmax_rows(s):\n    return [helper(row) for row in s] + X\n"
         "def mix(a, v):\n    return (a @ v) if TEXT else np.zeros(1)\n", namespace)
    assert names_read_outside(namespace) == {"softmax_rows": ["EPS", "X"]}


def test_a_name_never_defined_because_its_cell_stopped_is_told_with_that_cell(tmp_path):
    """`from scipy.special import softmax` alone in a cell stops there when graded (no scipy), and
    the softmax that calls it raises NameError: the step lists the cell that stopped, and why."""
    require_sandbox()
    path = tmp_path / "scipy.ipynb"
    path.write_text(_notebook(reference_source(), "from scipy.special import softmax\n",
                              "def softmax_rows(s):\n    return softmax(s, axis=-1)\n"))
    done = qkv_grade(str(path), "--format", "json", "--seed", str(SEED))
    steps = {step["id"]: step for step in json.loads(done.stdout)["steps"]}
    assert "No module named 'scipy' (scipy.ipynb, cell 2 line 1, in <module>)" in steps["softmax"]["feedback"]
    assert "keep other imports" in steps["softmax"]["feedback"]


def _released_public_checks():
    """The released self-check, as students have it (it reads the data files beside it)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(
        "released_public_checks_odd", REPO / "assignments" / "attention_head" / "public_checks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _without(source: str, name: str) -> str:
    """The reference's source with the def of `name` taken out (up to the next top-level line)."""
    lines, kept, inside = source.splitlines(keepends=True), [], False
    for line in lines:
        if line.startswith(f"def {name}("):
            inside = True
        elif inside and line.strip() and not line[0].isspace():
            inside = False
        if not inside:
            kept.append(line)
    return "".join(kept)


_SOFTMAX = ("def softmax_rows(s):\n    e = np.exp(s - s.max(axis=-1, keepdims=True))\n"
            "    return e / e.sum(axis=-1, keepdims=True)\n")


def test_a_function_whose_cell_stopped_before_its_def_is_told_never_defined_not_unwritten(tmp_path):
    """A correct softmax in a cell that first imports matplotlib, or whose def reads a default set
    only in a later cell: graded, the cell stops before the def. The step, and every step carried
    from it, says it was never defined and names that cell; "not implemented", "not written yet"
    and "Write it there" would send the student to write what is written. The self-check says the same."""
    require_sandbox()
    public_checks = _released_public_checks()

    base = _without(reference_source(), "softmax_rows")
    for name, cell, error in (
            ("plots.ipynb", "import matplotlib.pyplot as plt\n" + _SOFTMAX, "No module named 'matplotlib'"),
            ("default.ipynb", _SOFTMAX.replace("(s)", "(s, axis=AXIS)") + "AXIS = -1\n",
             "name 'AXIS' is not defined")):
        path = tmp_path / name
        path.write_text(_notebook(base, cell, "AXIS = -1\n"))
        done = qkv_grade(str(path), "--format", "json", "--seed", str(SEED))
        steps = {step["id"]: step for step in json.loads(done.stdout)["steps"]}
        softmax = steps["softmax"]["feedback"]
        assert softmax.startswith("Normalize each receiving row: never defined (softmax_rows): a cell stopped "
                                  "before its def"), softmax
        assert error in softmax and f"({name}, cell 2 line 1, in <module>); the rest of that cell would have " \
                                    "defined `softmax_rows`" in softmax, softmax
        assert steps["attention"]["carried_from"] == "softmax" and steps["attention"]["score"] == 8
        for step in steps.values():
            assert "not implemented" not in step["feedback"] and "not written" not in step["feedback"], step
            assert "Write it there" not in step["feedback"] and "defines no function" not in step["feedback"], step
        loaded = public_checks.load_submission(path)
        assert loaded.unreached == {"softmax_rows"}
        assert any("would have defined softmax_rows" in line for line in loaded.stopped), loaded.stopped


def test_a_function_bound_by_two_cells_is_told_which_cell_the_graders_call(tmp_path):
    """A scratch cell after the attention check binds `attention` again, to a lambda without the
    scale: the graders call that one. The failing step names both cells and which one counts; a
    step that passes says nothing of it."""
    require_sandbox()
    path = tmp_path / "rebound.ipynb"
    path.write_text(_notebook(reference_source(), "x = 1\n",
                              "attention = lambda q, k, v: (softmax_rows(q @ k.T) @ v, softmax_rows(q @ k.T))\n",
                              "def scores(q, k):\n    return q @ np.swapaxes(k, -1, -2)\n"))
    done = qkv_grade(str(path), "--format", "json", "--seed", str(SEED))
    steps = {step["id"]: step for step in json.loads(done.stdout)["steps"]}
    assert steps["attention"]["status"] != "passed"
    assert ("Your notebook binds `attention` in more than one cell (cells 1 and 3): the graders run every cell in "
            "order, so they call what cell 3 left.") in steps["attention"]["feedback"], steps["attention"]
    assert steps["scores"]["status"] == "passed" and "binds" not in steps["scores"]["feedback"]
    # a function the failing step builds on, bound twice too, is named there as such
    assert ("Your notebook binds `scores`, which this step builds on, in more than one cell (cells 1 and 4)"
            in steps["attention"]["feedback"]), steps["attention"]


def test_a_relation_is_told_only_where_every_failing_case_returned_numbers(tmp_path):
    """An intervention whose first run uses a notebook's [2, 2] zero W_V: zeros on the example
    (the expected output times 0), an exception wherever d_in is not 2. "On every case it failed,
    ... times the same factor" would be false of the cases that raised."""
    require_sandbox()
    path = tmp_path / "zeroed.ipynb"
    path.write_text(_notebook(reference_source(), "import numpy as np\nW_V = np.zeros((2, 2))\n",
                              "def value_intervention(x, w_q, w_k, w_v, w_v_new):\n"
                              "    o_b, a_b = self_attention_head(x, w_q, w_k, W_V)\n"
                              "    o_a, a_a = self_attention_head(x, w_q, w_k, w_v_new)\n"
                              "    return {'weights_before': a_b, 'weights_after': a_a, 'output_before': o_b,\n"
                              "            'output_after': o_a}\n",
                              "W_V = np.zeros((2, 2))  # the zeros of exercise 5's own check, set again\n"))
    done = qkv_grade(str(path), "--format", "json", "--seed", str(SEED))
    steps = {step["id"]: step for step in json.loads(done.stdout)["steps"]}
    feedback = steps["ex5_intervention"]["feedback"]
    assert "raised" in feedback or "crashed" in feedback, feedback
    assert "On every case it failed" not in feedback, feedback
    # the value it reads from outside, bound by two cells: both named, and the one the graders see
    assert "Your `value_intervention` reads `W_V`" in feedback, feedback
    assert ("Your notebook binds `W_V` in more than one cell (cells 2 and 4): the graders run every cell in order, "
            "so your `value_intervention` sees what cell 4 left.") in feedback, feedback


def test_a_helper_defined_only_in_a_check_cell_is_told_with_that_cell(tmp_path):
    """The softmax calls a helper the student wrote in the check cell below it: Jupyter runs it,
    the graders skip check cells, so the softmax raises NameError. The feedback names the cell."""
    require_sandbox()
    check = nbformat.v4.new_code_cell("def normalize_rows(e):\n    return e / e.sum(axis=-1, keepdims=True)\n"
                                      "check('softmax', softmax_rows)\n")
    check.metadata["qkv"] = {"role": "check"}
    path = tmp_path / "helper.ipynb"
    path.write_text(_notebook(_without(reference_source(), "softmax_rows"),
                              "def softmax_rows(s):\n    return normalize_rows(np.exp(s - s.max(axis=-1, keepdims=True)))\n",
                              check))
    done = qkv_grade(str(path), "--format", "json", "--seed", str(SEED))
    feedback = {step["id"]: step["feedback"] for step in json.loads(done.stdout)["steps"]}["softmax"]
    assert "name 'normalize_rows' is not defined" in feedback
    assert "`normalize_rows` is defined only in cell 3, which the graders do not run" in feedback, feedback


@pytest.mark.parametrize("name", ["Ω", "scaling_factor_of_the_scores_taken_from_the_example"])
def test_a_value_read_from_outside_under_a_name_the_protocol_does_not_carry_costs_only_its_step(tmp_path, name):
    """`scale` dividing by a module value named `Ω`, or one of fifty letters: the sealed child
    reports only names the protocol carries (ASCII identifiers of at most 40 characters). Before,
    it reported these, the worker refused its import frame, and every step scored 0."""
    require_sandbox()
    source = reference_source().replace("def scale(d, d_k):", f"{name} = 2.0\n\n\ndef scale(d, d_k):", 1)
    start = source.index("def scale(d, d_k):")
    line = source.index("np.sqrt(d_k)", start)
    path = tmp_path / "named.py"
    path.write_text(source[:line] + f"np.sqrt({name})" + source[line + len("np.sqrt(d_k)"):], encoding="utf-8")
    result = json.loads(qkv_grade(str(path), "--format", "json", "--seed", str(SEED)).stdout)
    steps = {step["id"]: step for step in result["steps"]}
    assert steps["qkv"]["status"] == "passed" and steps["softmax"]["status"] == "passed", steps["qkv"]
    assert steps["scale"]["status"] in ("partial", "failed") and steps["scale"]["score"] > 0, steps["scale"]


def test_the_self_check_reads_every_magic_as_the_graders_do(tmp_path):
    """The self-check runs the notebook's cells as the graders do: a cell whose magic runs
    something other than Python (`%%writefile`, `%%bash`) is left out by both, and an assignment
    from a shell escape (`files = !ls`), a line magic's result or help at a line's end runs in both.
    (It had read the cell magic's body as Python, and the escape as a syntax error.)"""
    from autograder.submission import RUNS_ITS_BODY  # the graders' own

    require_sandbox()
    public_checks = _released_public_checks()
    assert public_checks.RUNS_ITS_BODY == RUNS_ITS_BODY
    base = _without(reference_source(), "softmax_rows")
    for first, kept in (("%%writefile my_softmax.py", False), ("%%bash", False), ("%%capture", True),
                        ("files = !ls\nnames = %who_ls\nnp.exp?", True)):
        path = tmp_path / "attention_head.ipynb"
        path.write_text(_notebook(base, f"{first}\n" + _SOFTMAX))
        done = qkv_grade(str(path), "--format", "json", "--seed", str(SEED))
        softmax = {step["id"]: step for step in json.loads(done.stdout)["steps"]}["softmax"]
        loaded = public_checks.load_submission(path)
        assert ("softmax_rows" in loaded.namespace) == kept and not loaded.stopped, (first, loaded.stopped)
        assert softmax["status"] == ("passed" if kept else "not_implemented"), (first, softmax["feedback"])


def test_a_function_defined_in_a_timeit_cell_is_gone_as_in_jupyter_and_told_so(tmp_path):
    """IPython runs a `%%timeit` cell's body binding into a namespace of its own: after Run All the
    softmax defined there does not exist, and nbgrader's Validate fails it. The graders and the
    self-check run it the same way, and say why the function is missing; a `%%time` cell keeps it."""
    require_sandbox()
    public_checks = _released_public_checks()

    base = _without(reference_source(), "softmax_rows")
    for magic, kept in (("%%timeit", False), ("%%time", True)):
        path = tmp_path / f"{magic.strip('%')}.ipynb"
        path.write_text(_notebook(base, f"{magic}\n" + _SOFTMAX))
        done = qkv_grade(str(path), "--format", "json", "--seed", str(SEED))
        steps = {step["id"]: step for step in json.loads(done.stdout)["steps"]}
        loaded = public_checks.load_submission(path)
        if kept:
            assert steps["softmax"]["status"] == "passed" and "softmax_rows" in loaded.namespace
            continue
        softmax = steps["softmax"]["feedback"]
        assert steps["softmax"]["status"] == "not_implemented" and steps["softmax"]["score"] == 0
        assert softmax.startswith("Normalize each receiving row: never defined (softmax_rows): its def is in a "
                                  "`%%timeit` cell"), softmax
        assert "`softmax_rows` is defined in cell 2, a `%%timeit` cell" in softmax, softmax
        assert "not implemented" not in done.stdout and "Write it there" not in done.stdout
        assert loaded.discarded == {"softmax_rows"} and "softmax_rows" not in loaded.namespace
