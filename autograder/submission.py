"""Reading a submission from disk: a `.py` module or a notebook's code cells, and finding them.

Only text crosses into the sandbox, never a path: the worker is sent the source, so it needs no
view of the submissions folder.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SUFFIXES = (".py", ".ipynb")
# Cells the grader does not run: the notebook's own checks and plots, and nbgrader's test cells.
SKIPPED_ROLES = {"check", "plot"}
HELPERS = {"conftest.py", "public_checks.py", "setup.py", "nbgrader_config.py"}
_MAGIC = re.compile(r"^(\s*)([%!?].*)$")


class SubmissionError(Exception):
    """The file cannot be graded at all; the message says why in one line."""


@dataclass(frozen=True)
class Submission:
    path: Path
    name: str
    """How the submission is named in results: its path relative to the folder graded."""
    cells: tuple[str, ...]
    notebook: bool


def load(path: Path, name: str | None = None) -> Submission:
    name = name or str(path)
    if path.suffix not in SUFFIXES:
        raise SubmissionError(f"{path}: not a .py module or .ipynb notebook")
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise SubmissionError(f"{path}: no such file")
    except UnicodeDecodeError:
        raise SubmissionError(f"{path}: not UTF-8 text")
    except OSError as exc:
        raise SubmissionError(f"{path}: cannot be read ({exc.strerror})")
    if path.suffix == ".py":
        return Submission(path, name, (text,), False)
    return Submission(path, name, tuple(notebook_cells(text, path)), True)


def notebook_cells(text: str, path: Path) -> list[str]:
    """The code cells a notebook submission is made of, with IPython magics turned into no-ops."""
    import json

    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SubmissionError(f"{path}: corrupt notebook (not valid JSON: line {exc.lineno})")
    if not isinstance(document, dict) or not isinstance(document.get("cells"), list):
        raise SubmissionError(f"{path}: corrupt notebook (no list of cells)")
    import nbformat

    try:
        notebook = nbformat.from_dict(document)
        if notebook.get("nbformat", 0) < 4:
            notebook = nbformat.convert(notebook, 4)
    except Exception as exc:  # nbformat raises many kinds for a malformed file
        raise SubmissionError(f"{path}: corrupt notebook ({type(exc).__name__})")
    cells = []
    for cell in notebook.cells:
        if cell.get("cell_type") != "code":
            continue
        metadata = cell.get("metadata", {})
        if metadata.get("qkv", {}).get("role") in SKIPPED_ROLES:
            continue
        nbgrader = metadata.get("nbgrader", {})
        if nbgrader.get("grade") and not nbgrader.get("solution"):
            continue  # an nbgrader test cell: the grader's own business, not the student's code
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        if source.lstrip().startswith("%%"):
            continue
        cells.append("\n".join(_MAGIC.sub(r"\1pass  # \2", line) for line in source.splitlines()))
    return cells


def discover(folder: Path) -> list[tuple[Path, str]]:
    """Every submission in a folder, sorted by path, each with its name relative to the folder.

    A submission is a `.py` or `.ipynb` file directly in the folder (so `alice.py`, `bob.ipynb`),
    or an `attention_head.py` / `attention_head.ipynb` at any depth (nbgrader's
    `submitted/<student>/<assignment>/` layout). The released self-check's helper files, hidden
    folders and Jupyter checkpoints are skipped, and a folder holding both `attention_head.py` and
    `attention_head.ipynb` is graded on the module.
    """
    found = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if not path.is_file() or path.suffix not in SUFFIXES:
            continue
        if any(part.startswith(".") or part in ("__pycache__", ".ipynb_checkpoints") for part in relative.parts):
            continue
        if len(relative.parts) > 1 and path.stem != "attention_head":
            continue
        if path.name in HELPERS or path.name.startswith("test_"):
            continue
        if path.suffix == ".ipynb" and path.with_suffix(".py").is_file():
            continue
        found.append((path, str(relative)))
    return found
