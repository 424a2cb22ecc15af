"""Reading what a student hands in: a `.py` module or a notebook's code cells, and finding them.

Everything in a submission is hostile data, and this module is the one place that reads it. It
accepts a regular file (never a link, FIFO or device) named `.py` or `.ipynb`, and hands the rest
of the grader inert, validated data only: the code to run, as a tuple of strings (the module's
text, or the notebook's code cells as the Python an IPython kernel would run). Of a notebook it
believes nothing else: outputs, attachments and metadata are never kept, and the only metadata
read (a cell's `qkv.role` and its nbgrader `grade`/`solution` flags) counts as absent unless it
has the expected shape.

Every read has a budget, checked before the work it bounds, so one submission costs the grader
a bounded time and memory whatever it holds:

- bytes: a module of at most 4 * MAX_SOURCE bytes, a notebook of at most MAX_BYTES, read in
  pieces and never past that;
- JSON nesting depth (MAX_NESTING) and values (MAX_ITEMS): a linear pre-scan of the raw bytes,
  before json.loads builds anything and before nbformat converts an older format;
- cells: at most MAX_CELLS code cells, counted before any conversion; other cells are dropped
  before it;
- source: at most MAX_SOURCE characters of code in all;
- IPython's input transformer: run only on cells that hold magics or shell escapes, and only
  MAGIC_WORK characters' worth of rereading per notebook.

A submission over a budget is unreadable (SubmissionError, with a one-line reason); the other
submissions are not affected. Only text crosses into the sandbox, never a path: the worker is
sent the source, so it needs no view of the submissions folder.
"""
from __future__ import annotations

import bisect
import functools
import itertools
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Collection, Iterator

SUFFIXES = (".py", ".ipynb")
# Cells the grader does not run: the notebook's own checks and plots, and nbgrader's test cells.
SKIPPED_ROLES = {"check", "plot"}
HELPERS = {"conftest.py", "public_checks.py", "heatmap.py", "setup.py", "nbgrader_config.py"}
MAX_BYTES = 16 * 1024 * 1024
"""Bytes of a notebook: a notebook full of plots stays well below. Python may hold its text in up
to four bytes a character, twice over while json.loads parses it: the grader's memory stays
bounded at a few times this."""
MAX_SOURCE = 1_000_000
"""Characters of code in one submission (a module, or a notebook's code cells in all): the
reference solution has under 10 000."""
MAX_NESTING = 64
"""Levels of JSON nesting in a notebook: one written by Jupyter has under ten."""
MAX_ITEMS = 200_000
"""JSON values in a notebook (each array or object, and each item after an array's or object's
first): the released notebook has a few thousand."""


class SubmissionError(Exception):
    """The file cannot be graded at all; the message says why in one line."""


@dataclass(frozen=True)
class Submission:
    path: Path
    name: str
    """How the submission is named in results: its path relative to the folder graded."""
    cells: tuple[str, ...]
    notebook: bool
    numbers: tuple[int, ...] = ()
    """A notebook's: each code cell's place among all the notebook's cells, counted from 1, as a
    student counts them scrolling down (tracebacks say "cell 9")."""
    skipped: tuple[tuple[str, int], ...] = ()
    """A notebook's: the names defined at the top of the code cells the grader does not run (its
    checks, its plot, nbgrader's test cells), each with the first such cell's number."""
    apart: frozenset[int] = frozenset()
    """A notebook's: the numbers of the cells whose body runs in a namespace of its own (`%%timeit`)."""
    discarded: tuple[tuple[str, int], ...] = ()
    """The names those cells define at their top, each with its cell's number: gone once it ends."""


def load(path: Path, name: str | None = None) -> Submission:
    """The submission at `path`, named `name` in results (shown as text any writer accepts: a
    file name that is not UTF-8 has its bytes escaped); raises SubmissionError, its message shown
    the same way."""
    try:
        return _load(path, name or str(path))
    except SubmissionError as exc:  # said of the submission's name, not of the instructor's path
        message = str(exc)
        if name and message.startswith(f"{path}:"):
            message = name + message[len(str(path)):]
        raise SubmissionError(shown_name(message)) from None
    except Exception as exc:  # a file no check above foresaw: it alone is not graded, and says why
        raise SubmissionError(shown_name(f"{path}: the grader could not read it ({type(exc).__name__}); "
                                         f"this is a fault of the grader's, not of the submission")) from None


def _load(path: Path, name: str) -> Submission:
    if path.suffix not in SUFFIXES:
        raise SubmissionError(f"{path}: not a .py module or .ipynb notebook")
    if path.suffix == ".py":
        text = module_text(read_bytes(path, name, 4 * MAX_SOURCE), path)
        if len(text) > MAX_SOURCE:
            raise SubmissionError(f"{path}: {len(text)} characters of code, more than a submission may hold "
                                  f"({MAX_SOURCE})")
        return Submission(path, shown_name(name), (text,), False)
    skipped: dict[str, int] = {}
    apart: dict[int, list[str]] = {}
    numbered = notebook_cells(read_bytes(path, name), path, numbered=True, skipped=skipped, apart=apart)
    discarded = tuple((defined, number) for number, names in apart.items() for defined in names)
    return Submission(path, shown_name(name), tuple(code for _, code in numbered), True,
                      tuple(number for number, _ in numbered), tuple(skipped.items()), frozenset(apart),
                      discarded[:MOST_SKIPPED_NAMES])


# Text codecs written in Python whose decoding takes time far beyond a file's length (punycode's is
# quadratic: a 32 MiB file would hold the grader for a day), or that decode nothing.
_SLOW_CODECS = {"punycode", "idna", "undefined"}


def module_text(data: bytes, path: Path) -> str:
    """A .py file's text, decoded as Python decodes a module: UTF-8, a BOM, or the text encoding
    its coding line declares (`# -*- coding: latin-1 -*-`), except the few whose decoding is not
    done in time proportional to the file."""
    import codecs
    import io
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        if str(exc.msg).startswith("unknown encoding"):  # a coding line naming no codec Python has
            raise SubmissionError(f"{path}: its coding line names an encoding Python does not know") from None
        raise SubmissionError(f"{path}: not UTF-8 text (nor in an encoding a coding line declares)") from None
    if codecs.lookup(encoding).name in _SLOW_CODECS:
        raise SubmissionError(f"{path}: its coding line names {encoding}, which the grader does not read: "
                              "use UTF-8")
    try:
        return data.decode(encoding)
    except Exception:  # a codec's errors are not all UnicodeDecodeError
        raise SubmissionError(f"{path}: not text in the encoding its coding line declares ({encoding})") from None


def untouched_starter(path: Path, name: str | None = None) -> bool:
    """Is the file at `path` the released starter as it was handed out, the module or the notebook
    (the code that is graded, comments and layout aside)? A student who worked in one often hands in
    both, or the whole folder."""
    import ast

    notebook = path.suffix == ".ipynb"
    size, tree = _notebook_starter() if notebook else _starter()
    try:  # a file far from the starter's size is not the starter: it is not even parsed
        if os.lstat(path).st_size > (4 * size + 65536 if notebook else 2 * size + 4096):
            return False
        text = "\n".join(load(path, name).cells) if notebook else module_text(read_bytes(path, name), path)
        mine = ast.dump(ast.parse(text))
    except (OSError, SubmissionError, SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return mine == tree


@functools.lru_cache(maxsize=1)
def _notebook_starter() -> tuple[int, str]:
    """The released notebook's size in bytes, and the syntax tree's dump of its graded code."""
    import ast

    from .release import notebook_cells, notebook_text

    cells = notebook_cells("student")
    code = [cell.source for cell in cells if cell.cell_type == "code"
            and _mapping(cell.metadata.get("qkv")).get("role") not in SKIPPED_ROLES]
    return len(notebook_text(cells).encode("utf-8")), ast.dump(ast.parse("\n".join(code)))


@functools.lru_cache(maxsize=1)
def _starter() -> tuple[int, str]:
    """The released starter module's size in bytes, and its syntax tree's dump."""
    import ast
    import importlib.util

    from .release import stub_module

    reference = importlib.util.find_spec("solutions.attention_head").origin
    text = stub_module(Path(reference).read_text(encoding="utf-8"))
    return len(text.encode("utf-8")), ast.dump(ast.parse(text))


def read_bytes(path: Path, name: str | None = None, limit: int = MAX_BYTES) -> bytes:
    """The content of a submitted file, read without following any symbolic link.

    When `name` is `path` relative to a folder (a folder run, a course, Gradescope's upload), no
    part of it below that folder may be a link; otherwise only the file itself may not. Each part
    is opened with O_NOFOLLOW from the one above, so nothing can be swapped for a link between the
    check and the read, and the file must be a regular one (never a FIFO or a device, whose
    opening alone could block or act) of at most `limit` bytes.
    """
    import errno
    import stat

    parts = Path(name).parts if name else ()
    if (name and name != str(path) and not Path(name).is_absolute() and ".." not in parts
            and path.parts[-len(parts):] == parts):
        root, below = Path(*path.parts[:-len(parts)]) if len(path.parts) > len(parts) else Path("."), parts
    else:
        root, below = path.parent, (path.name,)
    cloexec = getattr(os, "O_CLOEXEC", 0)
    try:
        folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | cloexec)
    except OSError as exc:
        raise SubmissionError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        for index, part in enumerate(below):
            last = index == len(below) - 1
            try:
                info = os.stat(part, dir_fd=folder, follow_symlinks=False)
                if stat.S_ISLNK(info.st_mode):
                    raise OSError(errno.ELOOP, "a symbolic link")
                if last and not stat.S_ISREG(info.st_mode):
                    raise SubmissionError(f"{path}: not a regular file")
                flags = (os.O_NONBLOCK if last else os.O_DIRECTORY) | os.O_RDONLY | os.O_NOFOLLOW | cloexec
                opened = os.open(part, flags, dir_fd=folder)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    where = "" if last else f" ({'/'.join(below[:index + 1])} is one)"
                    raise SubmissionError(f"{path}: a symbolic link{where}, which the grader never follows; "
                                          f"hand in the file itself") from None
                if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                    raise SubmissionError(f"{path}: no such file") from None
                raise SubmissionError(f"{path}: cannot be read ({exc.strerror})") from None
            os.close(folder)
            folder = opened
        info = os.fstat(folder)
        if not stat.S_ISREG(info.st_mode):  # replaced between the look and the open
            raise SubmissionError(f"{path}: not a regular file")
        if info.st_size > limit:
            raise SubmissionError(f"{path}: too large to be a submission ({info.st_size} bytes, more than {limit})")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(folder, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise SubmissionError(f"{path}: too large to be a submission (more than {limit} bytes)")
        return b"".join(chunks)
    except OSError as exc:
        raise SubmissionError(f"{path}: cannot be read ({exc.strerror})") from None
    finally:
        os.close(folder)


def notebook_cells(data: bytes | str, path: Path, numbered: bool = False, skipped: dict | None = None,
                   apart: dict | None = None) -> list:
    """The code cells a notebook submission is made of, as the Python an IPython kernel would run;
    with `numbered`, each as (its place among all the notebook's cells, from 1; the code).
    `skipped`, when given, gets the names the cells not run define at their top (see `defined_at_top`);
    `apart`, the number of each cell whose body runs in a namespace of its own (OWN_NAMESPACE), with
    the names it defines at its top.

    Its raw bytes are pre-scanned for their budgets (`prescan`) before json.loads reads them.
    Older formats (nbformat 3's worksheets) are converted by nbformat itself, once every cell but
    the code cells' source and the metadata read here is dropped. Magics and shell escapes are
    found by IPython's own input transformer, exactly where Jupyter would find them, and made
    no-ops: the sandbox has no shell and no IPython.
    """
    import json

    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    if data.startswith(b"\xef\xbb\xbf"):  # JSON is UTF-8; an editor may have put a BOM in front
        data = data[3:]
    prescan(data, path)
    try:
        text = data.decode("utf-8", "surrogatepass")  # as json.loads reads it: a lone surrogate is its escape
    except UnicodeDecodeError:
        raise SubmissionError(f"{path}: not UTF-8 text") from None
    del data  # the text alone from here on: the bytes' memory is the parse's
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SubmissionError(f"{path}: corrupt notebook (not valid JSON: line {exc.lineno})") from None
    except (ValueError, RecursionError):  # a number of more digits than Python reads, say
        raise SubmissionError(f"{path}: corrupt notebook (not valid JSON)") from None
    del text
    if not isinstance(document, dict):
        raise SubmissionError(f"{path}: corrupt notebook (not a JSON object)")
    cells = _code_cells(document, path)
    del document  # outputs, attachments and the rest: never kept
    total = sum(len(source) for source, _, _ in cells)
    if total > MAX_SOURCE:
        raise SubmissionError(f"{path}: {total} characters of code, more than a submission may hold ({MAX_SOURCE})")
    code, budget = [], [MAGIC_WORK]
    for source, runs, number in cells:
        if not runs and skipped is not None:
            for defined in defined_at_top(source):
                if len(skipped) < MOST_SKIPPED_NAMES:
                    skipped.setdefault(defined, number)
        if runs:
            transformed = python_source(source, budget)
            if transformed is not None:
                code.append((number, transformed) if numbered else transformed)
                if apart is not None and cell_magic(source) in OWN_NAMESPACE:
                    apart[number] = defined_at_top(source)
    return code


_DEFINED = re.compile(r"^(?:def|class)[ \t]+([A-Za-z_]\w{0,39})|^([A-Za-z_]\w{0,39})[ \t]*=(?!=)", re.M)
MOST_SKIPPED_NAMES = 200


def defined_at_top(source: str) -> list[str]:
    """The names a cell defines at its top level, read from its text alone (it is never run here):
    each `def` or `class` and each plain assignment at the start of a line."""
    return [first or second for first, second in _DEFINED.findall(source)]


# A JSON string once its escapes are gone (a backslash and the character after it, which only a
# string may hold): one pass over the bytes, whatever they hold. Matching strings escapes and all
# would try again from every quote of an unclosed string, each time to the end of the file.
_ESCAPE = re.compile(rb'\\.', re.S)
_JSON_STRING = re.compile(rb'"[^"]*"')
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_ONE_KIND = bytes.maketrans(b"{}", b"[]")


def prescan(data: bytes, path: Path) -> None:
    """Check a notebook's raw JSON against MAX_ITEMS and MAX_NESTING in time linear in its bytes,
    without building anything: strings are set aside, then what is left is counted (values are
    arrays, objects and the items after each comma) and its brackets peeled one level at a time."""
    # Setting strings aside costs a few hundred bytes each, so they are counted first: a string
    # is a value, or a key beside one, and its quotes are two.
    if data.count(b'"') > 4 * MAX_ITEMS + 2:
        raise SubmissionError(f"{path}: a notebook of more than {MAX_ITEMS} JSON values: clear its outputs, "
                              "or merge its cells")
    skeleton = _JSON_STRING.sub(b"", _ESCAPE.sub(b"", data))
    if b'"' in skeleton:
        raise SubmissionError(f"{path}: corrupt notebook (not valid JSON: a string is never closed)")
    items = skeleton.count(b",") + skeleton.count(b"[") + skeleton.count(b"{")
    if items > MAX_ITEMS:
        raise SubmissionError(f"{path}: a notebook of more than {MAX_ITEMS} JSON values ({items}): "
                              "clear its outputs, or merge its cells")
    brackets = skeleton.translate(_ONE_KIND, _NOT_BRACKETS)
    del skeleton
    for _ in range(MAX_NESTING):
        if not brackets:
            return
        brackets = brackets.replace(b"[]", b"")
    if brackets:
        if brackets.count(b"[") != brackets.count(b"]"):
            raise SubmissionError(f"{path}: corrupt notebook (not valid JSON: unbalanced brackets)")
        raise SubmissionError(f"{path}: corrupt notebook (JSON nested more than {MAX_NESTING} levels deep)")


def _code_cells(document: dict, path: Path) -> list[tuple[str, bool, int]]:
    """The notebook's code cells as (source, whether the grader runs it, its place among all the
    notebook's cells from 1), read from the parsed JSON: nbformat 4 directly, an older format
    through nbformat's conversion of its code cells alone (numbered among those)."""
    version = document.get("nbformat")
    if isinstance(version, int) and not isinstance(version, bool) and version < 4:
        found = list(enumerate(_older_code_cells(document, path), 1))
    else:
        found = document.get("cells")
        if not isinstance(found, list):
            raise SubmissionError(f"{path}: corrupt notebook (no list of cells)")
        found = [(number, cell) for number, cell in enumerate(found, 1)
                 if isinstance(cell, dict) and cell.get("cell_type") == "code"]
        _count_cells(len(found), path)
    cells = []
    for number, cell in found:
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            source = "".join(source)
        elif not isinstance(source, str):
            raise SubmissionError(f"{path}: corrupt notebook (a cell whose source is not text)")
        cells.append((source, _runs(cell.get("metadata")), number))
    return cells


def _count_cells(count: int, path: Path) -> None:
    if count > MAX_CELLS:
        raise SubmissionError(f"{path}: {count} code cells, more than a submission may hold ({MAX_CELLS}): "
                              "merge or delete cells")


def _runs(metadata) -> bool:
    """Does the grader run a code cell with this metadata? Not the notebook's own checks and plots,
    nor nbgrader's test cells. nbformat accepts any JSON in metadata: what is not the shape
    expected counts as absent."""
    metadata = _mapping(metadata)
    role = _mapping(metadata.get("qkv")).get("role")
    if isinstance(role, str) and role in SKIPPED_ROLES:
        return False
    nbgrader = _mapping(metadata.get("nbgrader"))
    return not (nbgrader.get("grade") and not nbgrader.get("solution"))  # a test cell: the grader's own


def _older_code_cells(document: dict, path: Path) -> list:
    """The code cells of an nbformat 1 to 3 notebook, as nbformat converts them to nbformat 4.

    Before nbformat sees it, the notebook is cut down to its code cells (at most MAX_CELLS), each
    with its source and the metadata the grader reads: conversion and validation then cost
    what the graded code costs, whatever else the file holds."""
    import json

    sheets = document["worksheets"] if "worksheets" in document else [document]  # nbformat 1: no worksheets
    if not isinstance(sheets, list):
        raise SubmissionError(f"{path}: corrupt notebook (no list of worksheets)")
    kept = []
    for sheet in sheets:
        cells = sheet.get("cells") if isinstance(sheet, dict) else None
        if not isinstance(cells, list):
            raise SubmissionError(f"{path}: corrupt notebook (a worksheet without a list of cells)")
        for cell in cells:
            if isinstance(cell, dict) and cell.get("cell_type") == "code":
                kept.append({key: cell[key] for key in ("cell_type", "input", "code", "source", "language")
                             if key in cell} | {"outputs": [], "metadata": _read_metadata(cell.get("metadata"))})
                _count_cells(len(kept), path)
    reduced = {key: document[key] for key in ("nbformat", "nbformat_minor") if key in document}
    reduced["metadata"] = {}
    if "worksheets" in document:
        reduced["worksheets"] = [{"cells": kept, "metadata": {}}]
    else:
        reduced["cells"] = kept
    import nbformat

    try:
        notebook = nbformat.reads(json.dumps(reduced), as_version=4, capture_validation_error={})
        converted = [cell for cell in notebook.cells if cell.get("cell_type") == "code"]
    except Exception as exc:  # nbformat raises many kinds for a malformed file
        raise SubmissionError(f"{path}: corrupt notebook ({type(exc).__name__})") from None
    return [{"source": cell.get("source", ""), "metadata": cell.get("metadata")} for cell in converted]


def _read_metadata(metadata) -> dict:
    """Of a cell's metadata, only what the grader reads, and only where it has the shape expected."""
    metadata, kept = _mapping(metadata), {}
    role = _mapping(metadata.get("qkv")).get("role")
    if isinstance(role, str):
        kept["qkv"] = {"role": role}
    nbgrader = _mapping(metadata.get("nbgrader"))
    flags = {key: bool(nbgrader.get(key)) for key in ("grade", "solution") if key in nbgrader}
    if flags:
        kept["nbgrader"] = flags
    return kept


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def cell_grade_id(cell) -> str | None:
    """A notebook cell's nbgrader grade id; None where its metadata is not of that shape (nbformat
    lets a notebook hold any JSON there)."""
    grade_id = _mapping(_mapping(cell.get("metadata")).get("nbgrader")).get("grade_id")
    return grade_id if isinstance(grade_id, str) else None


def qkv_metadata(notebook) -> dict:
    """The notebook's own `qkv` metadata (what this grader records there), or {} where it is
    absent or not an object."""
    return _mapping(_mapping(notebook.get("metadata")).get("qkv"))


# Cell magics whose body is Python that Jupyter runs; the body of any other (%%bash, %%html,
# %%writefile, ...) is not Python, and such a cell is left out.
RUNS_ITS_BODY = {"time", "timeit", "capture", "prun"}
# Of those, the ones whose body IPython runs with a namespace of its own for what it binds
# (`%%timeit` runs `exec(body, user_ns, ns)`): a function defined there is gone once the cell ends.
OWN_NAMESPACE = {"timeit"}
# What the magics and shell escapes call once IPython has transformed them: nothing happens.
NO_IPYTHON = ('__import__("types").SimpleNamespace(**dict.fromkeys(("run_line_magic", "run_cell_magic", '
              '"system", "getoutput", "set_next_input"), lambda *args, **kwargs: None))')


# IPython's transformer reads a cell again for each magic it rewrites: the work grows as the number
# of magic lines times the cell's length, 1 to 2 µs per character read (501 magics in one cell take
# it 4.5 s). A notebook may spend this much of it, in characters read (under 0.5 s); a cell past what
# is left runs as an error that says why, and the other cells still run.
MAGIC_WORK = 250_000
# What the transformer rewrites, each on a pass over the whole cell: a line that starts with an
# escape (`%time f()`, `!ls`, `?np.exp`, and autocall's `/f x`, `,f x`, `;f x`), an assignment from
# one (`x = !ls`, `y = %who_ls`), or help at its end (`np.exp?`). Over-counting is safe; what matters
# is missing none: a `#` before the `?` may be inside a string (`a = "#"; b?` asks for help on b),
# so any line with a `?` followed only by blanks or a comment counts. Every branch reads a line in
# time proportional to its length.
_HELP_LINE = re.compile(r"^[^\n]*\?[ \t]*(?:#[^\n]*)?$", re.M)
_MAGIC_LINE = re.compile(r"^[ \t]*[%!?/,;]|=[ \t]*[%!]|" + _HELP_LINE.pattern, re.M)
# IPython finds help at a line's end with a pattern that starts again at every character of the
# logical line (inside brackets, several physical lines): its reading costs the square of that
# length, which a cell is charged as well.
MAX_CELLS = 2000
"""Code cells a notebook may hold: the released one has a few dozen."""


def cell_magic(source: str) -> str | None:
    """The name of the cell magic a cell starts with, as IPython finds it on its first line that is
    not blank (`%%timeit` -> "timeit", a bare `%%` -> ""), or None."""
    first = next((line for line in source.splitlines() if line.strip()), "")
    if not first.startswith("%%"):
        return None
    words = first[2:].split()
    return words[0] if words else ""


def python_source(source: str, budget: list[int] | None = None) -> str | None:
    """A code cell's source as plain Python, or None for a cell whose body is not Python.

    `budget`, a one-item list, is the transformer's work this notebook may still spend. IPython's
    line-by-line clean-up (prompts, a common indent) is applied to every cell; its tokenizing
    passes only to a cell holding something they rewrite."""
    from IPython.core.inputtransformer2 import TransformerManager

    lines = source.splitlines(keepends=True)  # lines as IPython splits them: \r, \f, U+2028 end one too
    start = next((index for index, line in enumerate(lines) if line.strip()), len(lines))
    lines = lines[start:]  # IPython passes over leading lines that hold only whitespace, and so does this
    magic = cell_magic(source)
    if magic is not None:
        if magic not in RUNS_ITS_BODY:
            return None
        lines[0] = "pass\n"  # the body, on the lines where the student wrote it
    source = "".join(lines)
    manager = TransformerManager()
    try:  # as transform_cell does, less the tokenizing passes
        lines = (source if source.endswith("\n") else source + "\n").splitlines(keepends=True)
        for transform in manager.cleanup_transforms + manager.line_transforms:
            lines = transform(lines)
    except Exception as exc:
        return _raising(f"IPython could not read this cell ({type(exc).__name__})")
    cleaned = "".join(lines)
    plain = "\n".join(cleaned.splitlines())
    helps = _HELP_LINE.findall(plain)
    # a line may be rewritten twice (`x = %who?`: the assignment, then the help): help counts again
    magics = len(_MAGIC_LINE.findall(plain)) + len(helps)
    if magics:  # what the patterns found, read as IPython reads it: a `?` in a comment or a string is none
        try:
            magics, helps = _rewrites(lines)
        except Exception:  # what IPython cannot tokenize is charged as the patterns found it
            pass
    if not magics:  # nothing the tokenizing passes rewrite: they would read the cell for nothing
        code = cleaned
    else:
        work = magics * max(len(cleaned), 1) + sum(len(help_line) ** 2 for help_line in helps)
        if budget is not None and work > budget[0]:
            return _raising(_TOO_MANY_MAGICS)
        try:
            done = _token_transforms(manager, lines, budget)
        except Exception as exc:  # IPython gives up on some cells (a chain of rewrites that never ends)
            return _raising(f"IPython could not read this cell ({type(exc).__name__})")
        if done is None:
            return _raising(_TOO_MANY_MAGICS)
        code = "".join(done)
    return _without_ipython(code) if "get_ipython" in code else code


_TOO_MANY_MAGICS = ("this cell holds more magics, shell escapes and help requests (a line ending in ?) than "
                    "the grader reads in one notebook; put them in cells of their own, or leave them out")


def _token_transforms(manager, lines: list[str], budget: list[int] | None) -> list[str] | None:
    """IPython's tokenizing passes over a cell, made as `do_token_transforms` makes them, each pass
    charged to `budget` before it is made, whether or not it rewrites anything: the cell's length
    (it is read whole again) and the square of each help request's logical line (all the physical
    lines it spans, which IPython searches as one). What is charged is the passes IPython really
    makes, whatever was counted beforehand: a line of escapes (`,,,,f`, autocall's) is rewritten
    one escape a pass. None where the budget runs out first."""
    from IPython.core.inputtransformer2 import TRANSFORM_LOOP_LIMIT

    for _ in range(TRANSFORM_LOOP_LIMIT):
        if budget is not None:
            text = "".join(lines)
            try:
                helps = _rewrites(lines)[1]
            except Exception:  # what IPython cannot tokenize: every line a help request's
                helps = [text]
            cost = max(len(text), 1) + sum(len(line) ** 2 for line in helps)
            if cost > budget[0]:
                return None
            budget[0] -= cost  # a pass that rewrites nothing has read the cell all the same
        changed, lines = manager.do_one_token_transform(lines)
        if not changed:
            return lines
    raise RuntimeError(f"still rewriting after {TRANSFORM_LOOP_LIMIT} passes")


def _rewrites(lines: list[str]) -> tuple[int, list[str]]:
    """(how many rewrites IPython's tokenizing passes make of a cell, its help requests' lines), as
    IPython finds them: on the cell's tokens, a line at a time (one pass, in time proportional to the
    cell), so that a comment or a docstring ending in `?` (`# right?`) is no help request, and a
    line that starts with `/` inside brackets no magic. A help request also counts as a rewrite."""
    from IPython.core import inputtransformer2 as ipython

    kinds = (ipython.MagicAssign, ipython.SystemAssign, ipython.EscapedCommand, ipython.HelpEnd)
    count, helps = 0, []
    ends = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # where IPython ends a line (str.splitlines): each a newline here
    plain = [line.rstrip(ends) + "\n" for line in lines]
    for line in ipython.make_tokens_by_line(plain):
        found = [kind for kind in kinds if kind.find([line]) is not None]
        count += len(found)
        if ipython.HelpEnd in found:
            # what IPython searches for the name asked about: the logical line, from its first
            # token to the `?`, over every physical line it spans (inside brackets, say)
            helps.append("".join(plain[line[0].start[0] - 1:line[-2].start[0]]))
    return count, helps


def _raising(message: str) -> str:
    """A cell that stops with `message`, as a cell Jupyter cannot run stops with its error."""
    return f"raise SyntaxError({message!r})\n"


def _without_ipython(code: str) -> str:
    """`code` with each `get_ipython()` call replaced by an object whose methods do nothing.

    The tokens are read as a stream, three at a time: memory stays that of the code itself."""
    import io
    import tokenize

    calls: dict[int, list[tuple[int, int]]] = {}  # per row, the columns each call spans, in order
    window: list = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            window.append(token)
            if len(window) < 3:
                continue
            name, opening, closing = window
            del window[0]
            if (name.type == tokenize.NAME and name.string == "get_ipython" and opening.string == "("
                    and closing.string == ")" and name.start[0] == closing.end[0]):
                calls.setdefault(name.start[0] - 1, []).append((name.start[1], closing.end[1]))
    except (tokenize.TokenError, SyntaxError):  # it will not compile anyway: the run says why
        return code
    lines = code.split("\n")  # as tokenize counts rows: a form feed or U+2028 ends no line here
    for row, spans in calls.items():  # each line rebuilt once, however many calls it holds
        line, pieces, done = lines[row], [], 0
        for start, end in spans:
            pieces += [line[done:start], NO_IPYTHON]
            done = end
        lines[row] = "".join(pieces) + line[done:]
    return "\n".join(lines)


@dataclass
class Found:
    """What a folder holds: the submissions to grade, and every other candidate file with the
    reason it is not graded, so that nothing found goes unmentioned."""

    items: list[tuple[Path, str]]
    """(path, name) of each submission, sorted by name; the name is relative to the folder."""
    skipped: list[tuple[str, str]]
    """(name, reason) of each .py or .ipynb file found and not graded (`_Skipped`), and of each
    folder whose rest was not looked at (`walk`)."""
    notes: list[str] = field(default_factory=list)
    """Lines about submissions graded apart that a reader could take for one student's (`_alike`)."""


def discover(folder: Path) -> Found:
    """Every submission in a folder, and every other .py or .ipynb file with why it is skipped.

    A submission is a `.py` or `.ipynb` file directly in the folder (so `alice.py`, `bob.ipynb`),
    or an `attention_head.py` / `attention_head.ipynb` at any depth (nbgrader's
    `submitted/<student>/<assignment>/` layout; from a course's root, only below its `submitted/` and
    `autograded/`, and its own nbgrader_config.py is no candidate). The released self-check's helper
    files and test files are skipped, and so is a notebook beside a module of the same name (the module is
    graded), unless that module is the released starter, untouched: then the notebook is the work
    and is graded. Hidden folders, `__pycache__` and Jupyter's checkpoints are not looked into, and no
    symbolic link is followed: one named like a submission in a student's folder is graded as one
    (and found unreadable by `load`); directly in the folder graded it is listed as not graded, as
    an empty file or a named pipe there is (`_hollow`); any other is passed over, as any file that
    can be nothing graded is.

    Of a student's folder at most MOST_ENTRIES entries are looked at, and outside the students'
    folders at most MOST_ENTRIES_IN_ALL (`walk`); one line says where the rest was not. What is not graded is kept as
    `Found.skipped` lists it, a few names and a count, so that whatever a student's folder holds, it
    costs the grader a bounded time and memory, and costs the classmates nothing.
    """
    course = _course_root(folder)
    items: list[tuple[Path, str]] = []
    skipped = _Skipped(course)
    cap = _AccountCap(folder)
    # A student's folder is walked whole before the next, so its candidates are sorted out as soon as
    # the walk is past it; those of the folder graded itself, and those directly in a course's
    # submitted/ or autograded/ (which come among its students' folders), at the end.
    student, candidates = None, []
    apart: dict[str | None, list[tuple[Path, tuple[str, ...]]]] = {}
    for entry, here, problem in walk(folder, lambda here: _own_folder(here, course), sieve=True):
        name = "/".join(here)
        if isinstance(problem, Cut):
            skipped.cut(name, problem)
        elif problem:
            skipped.add(name, problem)
        elif _is_link(entry) and not entry.name.endswith(SUFFIXES):
            skipped.add(name, "a symbolic link: not followed")
        elif len(here) == 1 and (hollow := _hollow(entry)):
            skipped.add(name, hollow)
        elif entry.name.endswith(SUFFIXES):
            if course and len(here) == 1:
                continue  # the course's own files (its nbgrader_config.py): no candidates
            whose = _student(name, course)
            if whose is None or course and whose in COURSE_FOLDERS:
                apart.setdefault(whose, []).append((Path(entry.path), here))
            elif (reason := _named_out(here, course)) is not None:
                skipped.add(name, reason)  # never kept: a student's folder may hold thousands
            else:
                if whose != student:
                    _sort_out_alone(candidates, course, items, skipped, cap)
                    student, candidates = whose, []
                candidates.append((Path(entry.path), here))
        elif entry.name.lower().endswith(SUFFIXES):
            suffix = "." + entry.name.rsplit(".", 1)[1]
            skipped.add(name, f"a {suffix} file: rename it to end in {suffix.lower()} to have it graded")
    for candidates in [candidates, *apart.values()]:
        _sort_out_alone(candidates, course, items, skipped, cap)
    items.sort(key=lambda item: item[1].split("/"))  # the walk's order: by name, folder by folder
    items = cap.keep(items, skipped)
    return Found(items, skipped.lines(), _alike(items, course) + cap.notes())


MOST_CAPPED_LISTED = 100
"""Submissions past an account's cap listed one by one (`_AccountCap`); the rest are counted."""

MOST_PER_ACCOUNT = 3
"""Submissions graded per account in a folder graded, other than those of the account grading, of
root and of the folder's owner (an instructor's folder of a whole class, or a course's submitted/
that nbgrader's collect copies, is theirs): in a drop folder the class may write, a student hands in
one, perhaps as a module and a notebook."""


class _AccountCap:
    """MOST_PER_ACCOUNT submissions per account (but the exempt ones: the account grading, root and
    the folder's owner), counted as the folder is read: a folder of an account past its cap is not
    sorted out at all (its module is never parsed to tell the starter), and each submission past it
    is listed as not graded, the first MOST_CAPPED_LISTED of an account by name, the rest counted in
    a note. Every bound a submission meets is its own (its time, its memory, its folder's entries);
    this one is its maker's: a classmate's thousand copies of a module that runs just under every
    limit held a class's run for hours, ahead of everyone, and sixty thousand folders of a module
    slow to parse held the reading of the folder as long."""

    def __init__(self, folder: Path):
        self.exempt = {0, os.geteuid(), _owner(folder)}
        self.found: dict[int | None, int] = {}
        self.capped: dict[int | None, int] = {}
        self.owner_of: dict[str, int | None] = {}  # each submission found: its account, as read once

    def full(self, owners: set) -> bool:
        """Are the candidates of one student's folder, made by `owners`, all of one account past its cap?"""
        return len(owners) == 1 and not owners & self.exempt and self.found.get(next(iter(owners)), 0) >= MOST_PER_ACCOUNT

    def count(self, name: str, owner: int | None) -> None:
        self.owner_of[name] = owner
        if owner not in self.exempt:
            self.found[owner] = self.found.get(owner, 0) + 1

    def tell(self, skipped: "_Skipped", name: str, owner: int | None) -> None:
        self.capped[owner] = self.capped.get(owner, 0) + 1
        if self.capped[owner] <= MOST_CAPPED_LISTED:
            skipped.add(name, f"{_account(owner)} made more than {MOST_PER_ACCOUNT} submissions here, and only "
                              f"its first {MOST_PER_ACCOUNT} by name are graded")

    def keep(self, items: list[tuple[Path, str]], skipped: "_Skipped") -> list[tuple[Path, str]]:
        """`items` but each account's past its first MOST_PER_ACCOUNT, by name."""
        counted: dict[int | None, int] = {}
        kept = []
        for path, name in items:
            owner = self.owner_of[name] if name in self.owner_of else _owner(path)
            if owner not in self.exempt:
                counted[owner] = counted.get(owner, 0) + 1
                if counted[owner] > MOST_PER_ACCOUNT:
                    self.tell(skipped, name, owner)
                    continue
            kept.append((path, name))
        return kept

    def notes(self) -> list[str]:
        return [f"{_account(owner)} made more than {MOST_PER_ACCOUNT} submissions here: {count} more of its files "
                f"are not graded, of which {count - MOST_CAPPED_LISTED} are not listed"
                for owner, count in sorted(self.capped.items(), key=lambda item: str(item[0]))
                if count > MOST_CAPPED_LISTED]


MOST_ALIKE_NOTED = 100
"""Groups of look-alike names told in a folder's notes; past them, one line counts the rest."""


def _alike(items: list[tuple[Path, str]], course: bool) -> list[str]:
    """A line for each group of submissions that a reader could take for one student's: whose
    student folders, or (directly in the folder graded) whose file names but for .py or .ipynb,
    look alike (`results.look`: `ada.py` and `\u0430da.py`, `alice.py` and `alice.ipynb`, `Bob/`
    and `bob/`). Each is graded apart, under its own name; the line says which account made each
    where they differ, for a classmate may have put one there."""
    from .results import look, printable_name

    groups: dict[str, list[tuple[Path, str]]] = {}
    for path, name in items:
        student = _student(name, course)
        groups.setdefault(look(student if student is not None else name.rsplit(".", 1)[0]), []).append((path, name))
    # groups made by different accounts first: a classmate's hundreds of look-alike pairs of their
    # own never push the one that names them out of the lines told
    alike = sorted((group for group in groups.values() if len(group) > 1),
                   key=lambda group: len({_owner(path) for path, _ in group}) < 2)
    lines = []
    for group in alike[:MOST_ALIKE_NOTED]:
        owners = {name: _owner(path) for path, name in group}
        names = ", ".join(printable_name(name) for _, name in group)
        line = f"{names}: names a reader could take for one student's, each graded apart under its own name"
        if len(set(owners.values())) > 1:
            line += "; made by different accounts (" + ", ".join(
                f"{printable_name(name)}: {_account(owner)}" for name, owner in owners.items()) + ")"
        lines.append(line)
    if len(alike) > MOST_ALIKE_NOTED:
        lines.append(f"and {len(alike) - MOST_ALIKE_NOTED} more groups of names that look alike")
    return lines


def _account(uid: int | None) -> str:
    """An account's name (its number where it has none), for a listing."""
    if uid is None:
        return "unknown"
    from .results import printable

    try:
        import pwd

        return f"{printable(pwd.getpwuid(uid).pw_name, one_line=True)} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _sort_out_alone(candidates: list[tuple[Path, tuple[str, ...]]], course: bool, items: list[tuple[Path, str]],
                    skipped: _Skipped, cap: "_AccountCap | None" = None) -> None:
    """`_sort_out`, whose failure costs that student's folder alone: whatever its files make the
    sorting raise (a file moved away and back as it is read, say), its candidates are listed as not
    graded, with why, and every other folder is sorted out as ever. A folder whose every candidate
    is of one account past its cap (`_AccountCap`) is not sorted out: each is listed as capped."""
    if not candidates:
        return
    try:
        owners = {parts: _owner(path) for path, parts in candidates}  # read once, for every decision
        if cap is not None and cap.full(set(owners.values())):
            for _, parts in candidates:
                cap.tell(skipped, "/".join(parts), owners[parts])
            return
        found: list[tuple[Path, str]] = []
        _sort_out(candidates, course, found, skipped, owners)
        items += found
        if cap is not None:
            by_name = {"/".join(parts): owner for parts, owner in owners.items()}
            for _, name in found:
                cap.count(name, by_name[name])
    except Exception as error:  # noqa: BLE001 (one student's folder, never the class's run)
        from .results import printable

        why = printable(f"{type(error).__name__}: {error}", one_line=True)[:120]
        for _, parts in candidates:
            skipped.add("/".join(parts), f"its folder changed while it was read ({why}); grade it again")


def _sort_out(candidates: list[tuple[Path, tuple[str, ...]]], course: bool, items: list[tuple[Path, str]],
              skipped: _Skipped, owners: dict) -> None:
    """Of the candidate files of one student's folder (or of those the folder graded holds itself),
    add to `items` those to grade, and to `skipped` each other with why it is not graded. `owners`:
    each candidate's account (by its parts), read once: every decision below takes that reading, for
    a file a student moves away and back while the folder is read would otherwise give two answers
    to one question."""
    names = {parts for _, parts in candidates}
    reasons = {parts: _named_out(parts, course) for _, parts in candidates}
    reasons.update(_foreign(candidates, reasons, course, owners))
    # Of a student's folder, only the first holding a submission (by depth, then name) can be graded
    # (`_one_per_student`): whether a module is the starter is asked there alone, at a parse each,
    # however many copies a student's folder holds.
    # One account's first alone: a classmate's file, in a folder that sorts first, never decides which
    # of the student's own is looked at (`_one_per_student` keeps one per account too).
    first: dict[tuple, tuple] = {}
    for path, parts in candidates:
        student = _student("/".join(parts), course)
        if student is not None and reasons[parts] is None:
            whose = (student, owners[parts])
            first[whose] = min(first.get(whose, parts), parts, key=lambda found: (len(found), "/".join(found)))
    starters = {parts for path, parts in candidates  # handed in untouched beside the notebook worked in
                if path.suffix == ".py" and reasons[parts] is None
                and parts[:-1] + (path.name[:-3] + ".ipynb",) in names
                and (len(parts) == 1 or first[(_student("/".join(parts), course), owners[parts])][:-1] == parts[:-1])
                and untouched_starter(path, "/".join(parts))}
    graded = []
    for path, parts in candidates:
        name, stem = "/".join(parts), path.name.rsplit(".", 1)[0]
        if reasons[parts] is not None:
            reason = reasons[parts]
        elif parts in starters:
            reason = f"the starter module, untouched: {stem}.ipynb beside it is graded instead"
        elif (path.suffix == ".ipynb" and parts[:-1] + (stem + ".py",) in names - starters
              and owners[parts] == owners[parts[:-1] + (stem + ".py",)]):
            # (a module another account put beside it, in a folder the class may write, displaces nothing)
            reason = f"{stem}.py beside it is graded instead"
        else:
            graded.append((path, name))
            continue
        skipped.add(name, reason)
    graded, more = _one_per_student(graded, course, {"/".join(parts): owner for parts, owner in owners.items()})
    items += graded
    for name, reason in more:
        skipped.add(name, reason)


def _foreign(candidates: list[tuple[Path, tuple[str, ...]]], reasons: dict, course: bool, owners: dict) -> dict:
    """The candidates in a student's folder made by another account than the folder's owner, where
    others in it are the owner's, each with why it is not graded: in a folder the class may write
    (sticky, so that no one removes another's file), a classmate's notebook beside the student's
    module, or a file one folder above it, would be graded in the student's name."""
    by_student: dict[str, list] = {}
    for path, parts in candidates:
        student = _student("/".join(parts), course)
        if student is not None and reasons[parts] is None:
            by_student.setdefault(student, []).append((path, parts, owners[parts]))
    found = {}
    for student, files in by_student.items():
        if len({owner for _, _, owner in files}) < 2:
            continue
        path, parts, _ = files[0]
        # whose folder it is: the account it is named for, where one is (in a folder the class may
        # write, whoever makes a folder first owns it: a classmate's, made in the student's name,
        # would make the student's own files the classmate's); else the account that made it
        named = _named_account(student.split("/")[-1])
        folder = named if named is not None else _owner(path.parents[len(parts) - len(student.split("/")) - 1])
        whose = "the account it is named for" if named is not None else "the account that made the folder"
        if not any(owner == folder for _, _, owner in files):
            continue  # (a folder the instructor made, each student writing in their own: no owner tells)
        for path, parts, owner in files:
            if owner != folder:
                found[parts] = (f"made by {_account(owner)}, not by {_account(folder)} ({whose}), "
                                "whose own file is graded")
    return found


def _named_account(name: str) -> int | None:
    """The user id of the account called `name`, or None where there is none."""
    try:
        import pwd

        return pwd.getpwnam(name).pw_uid
    except (ImportError, KeyError, UnicodeEncodeError, ValueError):
        return None


def _owner(path: Path) -> int | None:
    """The account a file belongs to (its link's own, never what it names); None where unknown."""
    try:
        return path.lstat().st_uid
    except OSError:
        return None


# `\xe9` written out in a name that is UTF-8: it would be listed as the name holding that byte is
# (`shown_name`, `results.printable_name`), which is never graded, and the two could not be told apart.
_BYTE_WRITTEN_OUT = re.compile(r"\\x[89a-fA-F][0-9a-fA-F]")


def _named_out(parts: tuple[str, ...], course: bool = False) -> str | None:
    """Why a candidate file is not graded, from its name and place alone (the parts of its path
    below the folder graded); None if it may be. `course`: the folder graded is a course's root
    (`_course_root`)."""
    name, file = "/".join(parts), parts[-1]
    stem = file.rsplit(".", 1)[0]
    if course and parts[0] not in COURSE_FOLDERS:
        return f"in a course's root only {' and '.join(f'{folder}/' for folder in COURSE_FOLDERS)} hold students' work"
    if shown_name(name) != name:
        return "a name that is not UTF-8: rename it to have it graded"
    if _BYTE_WRITTEN_OUT.search(name):
        return ("a name holding the text of a byte that is not UTF-8 (a backslash, x and two hex digits from "
                "80), which is how such names are listed: rename it to have it graded")
    if file.startswith("."):
        return "a hidden file"
    if file in HELPERS or file.startswith("test_"):
        return "a helper or test file of the released self-check, not a submission"
    if len(parts) > 1 and stem != "attention_head":
        return "in a student's folder only attention_head.py or attention_head.ipynb is graded"
    return None


MOST_SKIPPED_LISTED = 100
"""Files not graded listed one by one for each student's folder; the rest are counted in one line."""


class _Skipped:
    """What a folder holds and is not graded, kept as `Found.skipped` lists it: of each student's
    folder, the first MOST_SKIPPED_LISTED by name and a count of the rest, so that a folder of
    thousands of files is a few lines of results, and never more in memory; every one the folder
    graded holds itself. `course`: the folder graded is a course's root (`_course_root`)."""

    def __init__(self, course: bool):
        self.course = course
        self.listed: dict[str | None, list[tuple[str, str]]] = {None: []}
        self.counts: dict[str, int] = {}
        self.cuts: dict[str, str] = {}

    def add(self, name: str, reason: str) -> None:
        name = shown_name(name)
        student = _student(name, self.course)
        if student is None:
            self.listed[None].append((name, reason))
            return
        self.counts[student] = self.counts.get(student, 0) + 1
        listed = self.listed.setdefault(student, [])
        if len(listed) < MOST_SKIPPED_LISTED or (name, reason) < listed[-1]:
            bisect.insort(listed, (name, reason))
            del listed[MOST_SKIPPED_LISTED:]

    def cut(self, folder: str, why: str) -> None:
        """The walk did not look at the rest of `folder` ("" for the folder graded), and `why`."""
        self.cuts[shown_name(folder)] = why

    def lines(self) -> list[tuple[str, str]]:
        """(name, reason) of each file listed, then a line for each student's folder with more, and
        for each folder whose rest was not looked at, sorted by name."""
        counted = {}
        for student, count in self.counts.items():
            if count > MOST_SKIPPED_LISTED:
                more = count - MOST_SKIPPED_LISTED
                counted[f"{student}/…"] = f"{more} more file{'s' if more > 1 else ''} in this student's folder"
        for folder, why in self.cuts.items():
            name = f"{folder}/…" if folder else "…"
            if name in counted:
                counted[name] += f", which holds {why}"
            elif not folder:
                counted[name] = f"the folder graded holds {why}"
            else:
                whose = "this student's folder" if _student(f"{folder}/_", self.course) == folder else "this folder"
                counted[name] = f"{whose} holds {why}"
        return sorted([line for listed in self.listed.values() for line in listed] + list(counted.items()))


COURSE_FOLDERS = ("submitted", "autograded")
"""nbgrader's folders of student folders: graded from the course's root, a student is one level down."""

COURSE_MARKS = ("nbgrader_config.py", "gradebook.db", "qkv_course.json")
"""Files only a course's root holds (nbgrader's configuration and gradebook, qkv-course's record)."""

NBGRADER_FOLDERS = COURSE_FOLDERS + ("source", "release", "feedback", "downloaded")
"""The folders nbgrader keeps in a course's root: a folder that holds a submission anywhere else
is no course's root, whatever files it holds (two students handing in `submitted/` and
`nbgrader_config.py` among a class's submissions do not make one)."""


_NOT_A_COURSE = (f"; the folder graded is not a course's root, which holds {', '.join(COURSE_MARKS[:-1])} or "
                 f"{COURSE_MARKS[-1]} beside submitted/ or autograded/, and no submission outside nbgrader's folders")


def _course_root(folder: Path) -> bool:
    """Is the folder graded an nbgrader course's root? Told by the files only a course's root
    holds, never by a folder's name alone (a student may name their own folder `submitted`), nor by
    such a file alone (a folder of files handed in side by side may hold one named
    `nbgrader_config.py`): one of them beside `submitted/` or `autograded/`, and no submission
    outside nbgrader's own folders. Told before the folder is walked for its submissions, so that
    the walk knows which folders are students' (`_own_folder`): the folders beside nbgrader's are
    looked into first, each within a student's bound.

    The mark and nbgrader's folder must be the folder's own account's, and the walk for a submission
    outside passes over what can be nothing graded, as discover's does: in a drop folder the class may
    write, a classmate's `gradebook.db` and `submitted/` beside the classmates' work, and empty files
    flooding their folders, would otherwise make it a course's root, where none of them is graded."""
    owner = _owner(folder)

    def own(path: Path, kind) -> bool:
        try:
            status = os.lstat(path)
        except OSError:
            return False
        return kind(status.st_mode) and status.st_uid == owner

    if not any(own(folder / name, stat.S_ISDIR) for name in COURSE_FOLDERS):
        return False
    if not any(own(folder / mark, stat.S_ISREG) for mark in COURSE_MARKS):
        return False
    for entry, parts, problem in walk(folder, lambda here: len(here) == 1, skip=NBGRADER_FOLDERS, sieve=True):
        if not problem and entry.name.endswith(SUFFIXES) and not (len(parts) == 1 and parts[0] in COURSE_MARKS):
            return False
    return True


def _own_folder(here: tuple[str, ...], course: bool) -> bool:
    """Is the folder at `here` below the folder graded one whose walk has a bound of its own
    (MOST_ENTRIES)? A student's (`_student`): one level down, or, from a course's root
    (`course`), one level down in each of nbgrader's folders (a student's in submitted/, an
    assignment's in source/)."""
    return len(here) == (2 if course and here[0] in NBGRADER_FOLDERS else 1)


def _student(name: str, course: bool = False) -> str | None:
    """The student folder a submission found below the folder graded belongs to: its first folder
    (nbgrader's `submitted/<student>/`), or, from a course's root (`course`), the second below its
    `submitted/` or `autograded/`; None for a file directly in the folder graded, which is a
    student's on its own."""
    parts = name.split("/")
    if len(parts) < 2:
        return None
    if course and parts[0] in COURSE_FOLDERS and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0]


def _one_per_student(items: list[tuple[Path, str]], course: bool = False, owners: dict | None = None
                     ) -> tuple[list[tuple[Path, str]], list[tuple[str, str]]]:
    """At most one submission per student folder and account: the shallowest, then the first by
    name. A student's folder holds their work, and what else they put there (a copy in `backup/`,
    thirty copies of a classmate's) is listed as skipped, never graded as more students. A file
    another account made there (a folder the instructor made, which the class may write, where no
    owner tells whose the folder is: `_foreign`) never takes the place of the student's own: each
    account's is graded under its own name, and the listing's note says whose each is (`_alike`).
    `owners`: name -> account, as already read (each file's owner is read once)."""
    kept: dict[tuple, str] = {}  # (student folder, account) -> the name of the submission graded
    owners = owners or {}
    whose = {name: (_student(name, course), owners[name] if name in owners else _owner(path)) for path, name in items}
    for _, name in items:
        if whose[name][0] is not None:
            kept[whose[name]] = min(kept.get(whose[name], name), name, key=lambda found: (found.count("/"), found))
    graded, skipped = [], []
    for path, name in items:
        student = whose[name][0]
        if student is None or kept[whose[name]] == name:
            graded.append((path, name))
        else:
            skipped.append((name, f"{shown_name(kept[whose[name]])} is graded: one submission per student folder "
                                  f"({shown_name(student)}/)" + (_NOT_A_COURSE if student in COURSE_FOLDERS else "")))
    return graded, skipped


MAX_DEPTH = 32
"""Folders below the one graded that are looked into: nbgrader's layout needs three."""

MOST_ENTRIES = 50_000
"""Entries (files, folders and links) of one student's folder that are looked at, counted as each
folder is listed: a student's work is a few files, and a whole project handed in with its data a few
thousand. The rest is not looked at, nor read from its folder's listing, so a student's folder of a
million files costs the grader what one of 50 000 does."""

MOST_ENTRIES_IN_ALL = 1_000_000
"""Entries looked at below the folder graded outside the students' own folders: the students' files
and folders themselves (in a course's root, those of submitted/ and autograded/), which a course of
a thousand students for a dozen assignments holds a few hundred thousand of. A student's folder
draws on its own bound alone, never on this one: however many files a few students put in theirs,
every classmate's folder is still looked at."""


class Cut(str):
    """Why the rest of a folder was not looked at: a walk's bound was reached. A str, told apart
    from a walk's other reasons by its type."""


class _Budget:
    """What a walk may still look at: of a student's folder (`parts`), or outside the students'
    folders (`parts` ())."""

    def __init__(self, most: int, parts: tuple[str, ...]):
        self.most, self.left, self.parts, self.told = most, most, parts, False
        self.of: dict[int | None, int] = {}
        """In a student's folder that discover walks: what each account's entries have used of it."""


def walk(folder: Path, students: Callable[[tuple[str, ...]], bool] | None = None,
         skip: Collection[str] = (), sieve: bool = False) -> Iterator[tuple[os.DirEntry, tuple[str, ...], str]]:
    """Every file and link below `folder`, depth first in name order, as (entry, the parts of its
    path below `folder`, ""), and every folder that is not looked into as (entry, parts, why).

    Hidden folders (Jupyter's checkpoints among them), `__pycache__` and the folders directly in
    `folder` named in `skip` are passed over silently; a folder deeper than MAX_DEPTH, or one that
    cannot be listed, comes with its reason. No symbolic link is followed, and the walk keeps its
    own stack: a submission's folder may be nested thousands deep. That `folder` itself cannot be
    listed raises OSError.

    Of a student's folder (`folder` itself, or each folder below it that `students`, given its
    parts, says is one) at most MOST_ENTRIES entries are looked at, and of the rest at most
    MOST_ENTRIES_IN_ALL; no folder's listing is read past what is left of its bound. Once a bound is reached, nothing
    more of that student's folder (or of `folder`) is looked at, and the walk says so once, as (the
    first entry left out, the parts of the student's folder, or () for the other bound, a Cut).
    With `sieve` (discover's walk), files that can be nothing graded are passed over in every
    folder, uncounted (see `_listing`), outside the students' folders they always are.
    """
    whole = _Budget(MOST_ENTRIES_IN_ALL, ())
    own = _Budget(MOST_ENTRIES, ()) if students is None else None
    with os.scandir(folder) as found:
        listed, left_out = _listing(found, own, whole, sieve)
    stack = [((), iter(listed), own)]
    yield from left_out
    while stack:
        parts, entries, own = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        here = parts + (entry.name,)
        try:
            folder = entry.is_dir(follow_symlinks=False)
        except OSError as exc:  # an entry that cannot even be looked at is listed, not a failure
            yield entry, here, f"cannot be read ({exc.strerror}): not looked into"
            continue
        if not folder:
            yield entry, here, ""
        elif entry.name.startswith(".") or entry.name == "__pycache__" or not parts and entry.name in skip:
            continue
        elif len(here) > MAX_DEPTH:
            yield entry, here, f"a folder more than {MAX_DEPTH} folders down: not looked into"
        else:
            if students is not None and students(here):
                own = _Budget(MOST_ENTRIES, here)
            if own.told if own is not None else whole.told:
                continue  # its bound reached, and said: nothing more of it is looked at
            try:
                with os.scandir(entry.path) as found:
                    listed, left_out = _listing(found, own, whole, sieve)
            except OSError as exc:
                yield entry, here, f"a folder that cannot be read ({exc.strerror}): not looked into"
                continue
            stack.append((here, iter(listed), own))
            yield from left_out


MOST_PASSED_OVER = 20 * MOST_ENTRIES_IN_ALL
"""Entries of a folder that discover reads past, uncounted, because they can be nothing graded (see
`_listing`); past these, its listing is not read further."""


MOST_LINKS_SHOWN = 100
"""Links of a folder not named as a submission that discover lists as skipped (a student's folder
handed in as a link, say), uncounted; the rest are passed over with the files that can be nothing
graded."""


def _hollow(entry: os.DirEntry) -> str | None:
    """Why a file named as a submission, in the folder graded itself, holds no one's work, or None:
    anything but a regular file of its own with something in it: empty, one of several names of one
    file (a hard link), a symbolic link (never followed), a named pipe, a socket or a device. Each
    costs its maker an inode and no room; in a shared drop folder a classmate's million of them,
    read first in the file system's order, would use up the bound of what is looked at there, and
    each be graded as a student."""
    try:
        if entry.is_dir(follow_symlinks=False):
            return None
        status = entry.stat(follow_symlinks=False)
    except OSError:
        return None
    if stat.S_ISLNK(status.st_mode):
        return "a symbolic link: not followed, so nothing to grade; hand in the file itself"
    if not stat.S_ISREG(status.st_mode):  # a named pipe, a socket, a device: no one's work, at no cost
        return "not a regular file (a named pipe, a socket or a device): nothing to grade"
    if status.st_size == 0:
        return "an empty file: nothing to grade"
    if status.st_nlink > 1:
        return "a file with more than one name (a hard link): not graded; hand in a file of its own"
    return None


def _may_matter(entry: os.DirEntry) -> bool:
    """Can `discover` do anything with an entry: a folder, or a file or link named as a submission is
    (in any case: `.PY` is told to be renamed)? Anything else, a link named otherwise among them (a
    classmate's dangling links cost as little to make as empty files), is passed over."""
    try:
        return entry.name.lower().endswith(SUFFIXES) or entry.is_dir(follow_symlinks=False)
    except OSError:
        return True


def _listing(found: Iterator[os.DirEntry], own: _Budget | None, whole: _Budget, sieve: bool = False
             ) -> tuple[list[os.DirEntry], list[tuple[os.DirEntry, tuple[str, ...], Cut]]]:
    """A folder's entries, sorted by name: as many as its student's bound (`own`, if it is in a
    student's folder) or else the bound of the rest (`whole`) has left, each counted against it;
    and, if the folder holds more, the walk's word that the bound was reached (the first time it is).

    Outside the students' folders, where the bound is the whole class's (a shared drop folder whose
    entries are the classmates' own files and folders), entries that can be nothing graded are read
    past without being counted (up to MOST_PASSED_OVER): a classmate's million empty files there
    would otherwise use the bound up and leave others' submissions, in the file system's order, out.
    With `sieve` the same holds in a student's own folder, which a classmate may write too."""
    if own is not None and sieve:  # each account's entries counted apart, against the student's bound
        entries, links, told = _sieved(found, own, lambda entry, entries, told: _by_account(entry, entries, told, own))
        return sorted(entries + links, key=_by_name), told
    bound = whole if own is None else own
    most = bound.left
    if own is not None:
        entries, links, told = list(itertools.islice(found, most + 1)), [], []
    else:
        def take(entry, entries, told):
            if _hollow(entry):  # uncounted, as a link is: the first few listed, the rest passed over
                if len(hollow) >= MOST_LINKS_SHOWN:
                    return False
                hollow.append(entry)
                return True
            if sieve and not _account_share(entry, bound, told):
                return False  # its account's share used up: passed over as what can be nothing graded
            entries.append(entry)
            return len(entries) <= most or None
        hollow: list[os.DirEntry] = []
        entries, links, told = _sieved(found, bound, take)
        links += hollow
    if len(entries) > most:  # no folder is listed past a bound once told: this is the first time
        bound.told = True
        told.append((entries[most], bound.parts, Cut(
            f"more than {bound.most} files and folders: only the first {bound.most} were looked at, and "
            "the rest were neither graded nor listed")))
        del entries[most:]
    bound.left -= len(entries)
    entries += links
    entries.sort(key=_by_name)
    return entries, told


def _sieved(found: Iterator[os.DirEntry], bound: _Budget, take: Callable) -> tuple[list, list, list]:
    """(entries kept, links listed, the walk's words) of a listing read past what can be nothing
    graded, uncounted: `take(entry, kept, words)`, for an entry that may matter (`_may_matter`),
    keeps it (True), passes over it as over those (False), or ends the reading (None)."""
    entries, passed, links, told = [], 0, [], []
    for entry in found:
        if _may_matter(entry):
            kept = take(entry, entries, told)
            if kept is None:
                break
            if kept:
                continue
        elif len(links) < MOST_LINKS_SHOWN and _is_link(entry):
            links.append(entry)  # listed as skipped (a folder handed in as a link), uncounted
            continue
        passed += 1
        if passed > MOST_PASSED_OVER:  # the rest of this listing is not read: said once
            bound.told = True
            told.append((entry, bound.parts, Cut(
                f"more than {MOST_PASSED_OVER} files that are no submission: the rest of this "
                "folder's listing was not read, and what it holds was neither graded nor listed")))
            break
    return entries, links, told


def _by_account(entry: os.DirEntry, entries: list, told: list, own: _Budget) -> bool:
    """Of a folder in a student's folder, as discover walks it, keep `entry` while its account's
    share of the student's bound lasts (`_Budget.of`): a classmate who may write there (a folder
    the class may write) and fills it with files or folders named to count (`f0.py`, empty
    folders) uses up their own share, in the file system's order, and never the student's."""
    if not _within_share(entry, own, own.most, told, ""):
        return False
    entries.append(entry)
    return True


def _account_share(entry: os.DirEntry, whole: _Budget, told: list) -> bool:
    """Outside the students' folders, as discover walks them: may `entry` count against the bound of
    what is looked at there? Each account may use all of it but a tenth, kept for the others, in the
    file system's order: a classmate who may write a shared drop folder and fills it with folders
    (empty ones cost an inode each, as empty files do, which are not counted at all) uses up their
    own share, and what the others handed in is still looked at (a folder an instructor filled alone
    is one account's, which a class never fills)."""
    share = whole.most - whole.most // 10
    # a bound too small to keep a tenth of: the bound alone
    return share >= whole.most or _within_share(entry, whole, share, told, f", of the {whole.most} looked at in all")


def _within_share(entry: os.DirEntry, bound: _Budget, share: int, told: list, of_what: str) -> bool:
    """Is `entry` within its account's `share` of `bound` (each account's use counted in `bound.of`)?
    Said once for each account, of its first entry left out."""
    try:
        owner = entry.stat(follow_symlinks=False).st_uid
    except OSError:
        owner = None
    used = bound.of.get(owner, 0)
    bound.of[owner] = used + 1 if used <= share else used
    if used < share:
        return True
    if used == share:
        told.append((entry, bound.parts, Cut(
            f"more than {share} files and folders made by {_account(owner)}{of_what}: only the first {share} were "
            "looked at, and the rest were neither graded nor listed")))
    return False


def _is_link(entry: os.DirEntry) -> bool:
    try:
        return entry.is_symlink()
    except OSError:
        return True  # not followed either way


def _by_name(entry: os.DirEntry) -> str:
    return entry.name


def shown_name(name: str) -> str:
    """A file's name as text every writer accepts: bytes that are not UTF-8 (which Python keeps as
    lone surrogates, and no UTF-8 file or terminal can hold) written as their escapes, \\xff."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")
