"""Notebooks read as Jupyter reads them: older formats, magics and shell escapes anywhere IPython
finds them (and nowhere else), and any locale."""
from __future__ import annotations

import os
import subprocess
import sys

import nbformat

from support import REPO, grade_json, qkv_grade, read_only, reference_source

FAST = ("--timeout", "0.5")


def notebook_of(*sources: str, version: int = 4) -> str:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("My attention head, with a √d_k divisor")]
    notebook.cells += [nbformat.v4.new_code_cell(source) for source in sources]
    return nbformat.writes(notebook, version=version)


def test_an_nbformat_3_notebook_is_converted_by_nbformat_and_graded(tmp_path):
    path = tmp_path / "attention_head.ipynb"
    path.write_text(notebook_of("import numpy as np", reference_source(), version=3), encoding="utf-8")
    assert '"worksheets"' in path.read_text(encoding="utf-8")
    result = grade_json(path, "--seed", "2", *FAST)
    assert "error" not in result and result["score"] == 100


def test_magics_and_shell_escapes_do_nothing_and_break_nothing(tmp_path):
    path = tmp_path / "attention_head.ipynb"
    path.write_text(notebook_of(
        "%matplotlib inline\n!pip install numpy\nfiles = !ls\nimport numpy as np\nnp.dot?",
        reference_source() + "\nleft = (7\n        %3)\nright = (1\n         != 2)\n"
        "?help\n%time scores(np.eye(2), np.eye(2))\n",
        "%%time\nassert left == 1 and right is True\n",
        "%%bash\necho this is not Python\n"), encoding="utf-8")
    result = grade_json(path, "--seed", "2", *FAST)
    assert "error" not in result and result["score"] == 100, result.get("error")


def test_a_continuation_line_that_starts_with_percent_is_python_not_a_magic(tmp_path):
    path = tmp_path / "attention_head.ipynb"
    source = reference_source().replace("    s = d / np.sqrt(d_k)  # [T, T]",
                                        "    s = d / np.sqrt(d_k  # [T, T]\n                   %1000)")
    assert source != reference_source()
    path.write_text(notebook_of(source), encoding="utf-8")
    result = grade_json(path, "--seed", "2", *FAST)
    assert "error" not in result and result["score"] == 100


def test_grading_works_in_the_c_locale(tmp_path):
    notebook = tmp_path / "attention_head.ipynb"
    notebook.write_text(notebook_of(reference_source() + "\n# d_k’s square root: √d_k\n"), encoding="utf-8")
    module = tmp_path / "attention_head.py"
    module.write_text(reference_source() + "\n# d_k’s square root: √d_k\n", encoding="utf-8")
    for path in (notebook, module):
        result = grade_json(path, "--seed", "2", *FAST, env={"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"})
        assert result["score"] == 100


def test_submissions_are_read_as_utf8_in_the_c_locale(tmp_path):
    notebook = tmp_path / "attention_head.ipynb"
    notebook.write_text(notebook_of("%matplotlib inline\n" + reference_source() + "\n# √d_k’s role\n"),
                        encoding="utf-8")
    probe = ("import sys; from pathlib import Path; from autograder.submission import load; "
             "cells = load(Path(sys.argv[1])).cells; print(ascii(cells[0][-20:]))")
    done = subprocess.run([sys.executable, "-c", probe, str(notebook)], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"})
    assert done.returncode == 0, done.stderr
    assert "\\u221ad_k\\u2019s role" in done.stdout


def test_qkv_course_in_a_read_only_folder_gets_one_line(tmp_path):
    (tmp_path / "ro").mkdir()
    with read_only(tmp_path / "ro"):
        done = subprocess.run([sys.executable, "-m", "autograder.nbgrader_course", str(tmp_path / "ro" / "course")],
                              capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 3
    assert done.stderr.count("\n") == 1 and "Read-only file system" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_corrupt_notebook_is_still_called_corrupt(tmp_path):
    path = tmp_path / "attention_head.ipynb"
    for text in ('{"nbformat": 3, "worksheets": "nope"}', '[1, 2]', '{"nbformat": 4, "cells": "nope"}'):
        path.write_text(text, encoding="utf-8")
        done = qkv_grade(str(path), "--format", "json", *FAST)
        assert done.returncode == 0 and "corrupt notebook" in done.stdout, (text, done.stdout[-300:])
