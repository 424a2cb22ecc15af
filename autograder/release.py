"""qkv-release: generate what students receive from the single source.

In: the reference solution `solutions/attention_head.py` (its `### BEGIN SOLUTION` /
`### END SOLUTION` regions are what students write), the step table `autograder/steps.py`, the
lesson prose `solutions/lessons.md`, the chapter's values `data/part-iv/attention.json` and the
public checks authored in `autograder/public/`. Out: `assignments/attention_head/`, byte for byte
the same on every run (fixed cell ids, sorted JSON, no timestamps).

    qkv-release                 # regenerate assignments/attention_head/
    qkv-release --check         # exit 1 and name the files that differ from what would be generated
    qkv-release --out DIR       # write (or, with --check, compare) DIR instead

The notebook is assembled by `notebook_cells(variant)`; `step_cells` builds one step's cells, and
the `_solution_source`, `_check_source` and `_answer_source` seams say what a cell holds in each
variant. The "student" variant is what this command writes. The "nbgrader" variant is the source
notebook of the nbgrader course (`qkv-course`): the same cells with the reference's solution
regions kept, a hidden line in each check cell that hands the step to the hidden graders, and the
reference answers as the rubric of the written-answer cells. Both carry nbgrader's cell metadata,
so that Validate counts the checks of any copy, released by nbgrader or not.
"""
from __future__ import annotations

import argparse
import ast
import gzip
import json
import re
import sys
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

import nbformat
import numpy as np
from nbformat import v4

from autograder.steps import ANSWERS, SETUP_ARRAYS, STEPS, Step

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "attention_head.py"
LESSONS = ROOT / "solutions" / "lessons.md"
DATA = ROOT / "autograder" / "_data" / "part-iv" / "attention.json"  # _data: the project's data/
PUBLIC = ROOT / "autograder" / "public"
RELEASE = ROOT / "assignments" / "attention_head"
SAMPLE = ROOT / "data" / "sample-submission"

# The sample submission to try the tools on: the reference with one classic slip, the softmax
# normalized over the receiving rows (a column) instead of over the keys, so that grading it shows
# a diagnosis on softmax and on the steps built on it, next to steps that pass.
SAMPLE_MISTAKE = (("s.max(axis=-1, keepdims=True)", "s.max(axis=-2, keepdims=True)"),
                  ("e.sum(axis=-1, keepdims=True)", "e.sum(axis=-2, keepdims=True)"))
PUBLIC_FILES = ("public_checks.py", "conftest.py", "test_attention_head.py", "heatmap.py")  # copied verbatim
# What the notebook's cells read beside it, wherever it sits: the release, a course's source and
# released folders, the sample submission.
BESIDE_NOTEBOOK = ("public_checks.py", "chapter_example.json", "known_mistakes.json.gz", "steps.json", "heatmap.py")
MISTAKES = "known_mistakes.json.gz"
"""What each known mistake returns on the public examples, for the self-check to name it: JSON,
gzipped (a seventh of its size), as every student's folder holds a copy, and nbgrader several."""
EXAMPLE_KEYS = ("inputs", "exact", "values", "exercises")  # what a student may see of the data
IGNORED = frozenset({"__pycache__", ".pytest_cache", ".ipynb_checkpoints"})  # left by running it

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
CODE_STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")  # nbgrader's replacement text
ANSWER_STUB = "YOUR ANSWER HERE"  # nbgrader's text for a written-answer cell
VARIANTS = ("student", "nbgrader")

# The nbgrader variant: in `nbgrader autograde` the hidden line rebinds `check` to the hook, which
# grades the step in the isolated runner, prints its feedback and returns its score (nbgrader's
# partial credit). The public check would raise on a wrong answer, and any error in a test cell
# scores it 0, so it must not run there; in the release the line is gone and the public one runs.
HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
HOOK_IMPORT = "from autograder.nbgrader_hook import check"
ANSWER_POINTS = 2.0  # each written answer, graded by a person; the thirteen steps add up to 100
RUBRIC = "**Reference answer (the grader's rubric):**"
RUN_ON = "raises-exception"  # the cell tag that lets Run All go past a failing check

KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}
POSITIONS = ("red", "key", ".")  # Example 15.1's positions, in order
CELL_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # nbformat 4.5's rule for cell ids
SECTION = re.compile(r"^## (\w+)\s*$")  # a lessons.md section: `## name`, one word

STUDENT_NOTE = """\
Write each function where it says `# YOUR CODE HERE`, in place of `raise NotImplementedError()`,
and answer the five questions at the end of the file in your own words. Run `pytest` in this
folder to check your functions on the chapter's worked example; see README.md."""

CHECK_IMPORT = """\
# The public checks use the chapter's worked example only; they live in public_checks.py.
from public_checks import check"""

PLOT = """\
from heatmap import show_weights  # the plotting lives in heatmap.py, beside this notebook

show_weights(lambda: self_attention_head(X, W_Q, W_K, W_V), positions={positions})  # Example 15.1"""

PYTEST_INI = """\
# This folder is a pytest project of its own: `pytest` here runs the public checks.
[pytest]
python_files = test_attention_head.py
"""

README = """\
# Chapter 15, Self-Attention and Q/K/V: one attention head

Build a single self-attention head from small functions, one graded step at a time, and check
each step against the chapter's worked example (Example 15.1: the positions red, key and .).

## What is here

| file | what it is |
|---|---|
| `attention_head.ipynb` | the notebook: a short lesson per step, your code, a check after each step, and a heatmap of your weights |
| `attention_head.py` | the same functions as a plain module, for working in an editor; the written answers are the strings `ANSWER_1` to `ANSWER_5` at its end |
| `test_attention_head.py`, `conftest.py`, `public_checks.py`, `pytest.ini` | the local self-check |
| `chapter_example.json`, `known_mistakes.json.gz`, `steps.json` | the example's values; a few more public examples per step with what each known mistake returns on them (gzipped JSON); and the list of steps the self-check reads |
| `heatmap.py` | draws the notebook's last picture, the heatmap of your weights |

Work in either the notebook or the module. Leave the self-check files as they are.

## Open the notebook

    pip install numpy matplotlib jupyterlab
    jupyter lab attention_head.ipynb

Run the setup cell first, then work down: fill in a solution cell, run the check cell under it.

## Check your work

    pip install numpy pytest
    pytest                                        # every step
    pytest -k scores                              # one step
    pytest --submission=attention_head.ipynb      # the notebook instead of the module

`pytest` checks `attention_head.py`; when that file is absent, it checks the notebook's setup and
solution cells instead. There is one test per step, named after the step id. A failing test says
what it called, what came back, what the chapter expects and which section to reread. Where your
numbers, on the chapter's example and on a few more public examples, are exactly what a mistake
the hidden graders know gives, it names that mistake (or the two or three that fit equally well);
where a step builds on an earlier one that fails, it says to fix that one first.

Whether a check passes depends on the chapter's example only. The hidden graders go further
(other shapes, large scores, batches, other exercise situations), so passing here is a good sign,
not a grade.

## The steps

| step id | title | chapter | points |
|---|---|---|---|
{steps}
"""


class ReleaseError(Exception):
    """The sources cannot be turned into a release; the message says which and why."""


# --- the sources --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Sources:
    """Everything the release is generated from, read once."""
    reference: str
    """The text of solutions/attention_head.py."""
    lessons: str
    """The text of solutions/lessons.md."""
    data: dict
    """data/part-iv/attention.json."""

    @classmethod
    def read(cls) -> "Sources":
        for path in (REFERENCE, LESSONS, DATA):
            if not path.is_file():
                raise ReleaseError(f"{path.relative_to(ROOT)} is missing")
        return cls(REFERENCE.read_text(encoding="utf-8"), LESSONS.read_text(encoding="utf-8"),
                   json.loads(DATA.read_text(encoding="utf-8")))

    @cached_property
    def stub(self) -> str:
        return stub_module(self.reference)

    @cached_property
    def stub_functions(self) -> dict[str, str]:
        return function_sources(self.stub)

    @cached_property
    def sections(self) -> dict[str, str]:
        return lesson_sections(self.lessons)

    @cached_property
    def reference_functions(self) -> dict[str, str]:
        return function_sources(self.reference)

    @cached_property
    def answers(self) -> dict[str, str]:
        return reference_answers(self.reference)


# --- solution regions and the stub module -------------------------------------------------------

@dataclass(frozen=True)
class Region:
    begin: int
    """Index of the `### BEGIN SOLUTION` line."""
    end: int
    """Index of the `### END SOLUTION` line."""
    indent: str
    """The markers' indentation, which the stub keeps."""


def solution_regions(lines: list[str]) -> list[Region]:
    regions, begin = [], None
    for index, line in enumerate(lines):
        marker = line.strip()
        if marker == BEGIN:
            if begin is not None:
                raise ReleaseError(f"line {index + 1}: a solution region opens inside another")
            begin = index
        elif marker == END:
            if begin is None:
                raise ReleaseError(f"line {index + 1}: {END} without a {BEGIN}")
            indent = lines[begin][: len(lines[begin]) - len(lines[begin].lstrip())]
            regions.append(Region(begin, index, indent))
            begin = None
    if begin is not None:
        raise ReleaseError(f"line {begin + 1}: {BEGIN} is never closed")
    return regions


def stub_module(reference: str) -> str:
    """The student's module: every solution region stubbed, the answers left empty."""
    lines = reference.splitlines()
    out, position = [], 0
    for region in solution_regions(lines):
        out += lines[position:region.begin]
        body = lines[region.begin + 1:region.end]
        if region.indent:
            out += [region.indent + line for line in CODE_STUB]
        else:
            out += _answer_stubs(body, region.begin)
        position = region.end + 1
    out += lines[position:]
    return _student_docstring("\n".join(out) + "\n")


def _answer_stubs(body: list[str], begin: int) -> list[str]:
    """The module-level region must assign exactly the written answers the step table lists."""
    assigned = [target.id for node in ast.parse("\n".join(body)).body
                if isinstance(node, ast.Assign) for target in node.targets
                if isinstance(target, ast.Name)]
    expected = [name for name, _ in ANSWERS]
    if assigned != expected:
        raise ReleaseError(f"line {begin + 1}: the module-level solution region assigns "
                           f"{assigned}; steps.ANSWERS lists {expected}")
    stubs = []
    for name, question in ANSWERS:
        stubs += [f"# {name}: {question}", f'{name} = ""', ""]
    return stubs[:-1]


def _student_docstring(module: str) -> str:
    """Swap the module docstring's paragraph about solution markers for a note to the student."""
    tree = ast.parse(module)
    docstring = ast.get_docstring(tree, clean=False)
    if docstring is None:
        raise ReleaseError("the reference solution has no module docstring")
    node = tree.body[0]
    paragraphs = [p for p in docstring.strip().split("\n\n") if BEGIN not in p]
    text = "\n\n".join([paragraphs[0], STUDENT_NOTE, *paragraphs[1:]])
    lines = module.splitlines()
    return "\n".join([*lines[:node.lineno - 1], f'"""{text}\n"""', *lines[node.end_lineno:]]) + "\n"


def reference_answers(reference: str) -> dict[str, str]:
    """The reference's written answers, `ANSWER_1` ... `ANSWER_5`, by name."""
    answers = {}
    for node in ast.parse(reference).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            answers[node.targets[0].id] = node.value.value
    missing = [name for name, _ in ANSWERS if not answers.get(name, "").strip()]
    if missing:
        raise ReleaseError(f"the reference solution has no written answer {', '.join(missing)}")
    return {name: answers[name] for name, _ in ANSWERS}


def function_sources(module: str) -> dict[str, str]:
    """Each top-level function's source, trailing comments of its body included.

    The trailing comments matter for the reference, whose `### END SOLUTION` comes after the last
    statement of the function.
    """
    lines = module.splitlines()
    sources = {}
    for node in ast.parse(module).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
        last = node.end_lineno  # one past the last statement's line
        while (last < len(lines) and lines[last].strip().startswith("#")
               and len(lines[last]) - len(lines[last].lstrip()) > node.col_offset):
            last += 1
        sources[node.name] = "\n".join(lines[first:last])
    return sources


# --- lesson prose -------------------------------------------------------------------------------

def lesson_sections(text: str) -> dict[str, str]:
    """The `## name` sections of lessons.md: one per step and per other part of the notebook."""
    lines_of: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        match = SECTION.match(line)
        if match:
            current = match.group(1)
            if current in lines_of:
                raise ReleaseError(f"solutions/lessons.md has two '## {current}' sections")
            lines_of[current] = []
        elif current is not None:
            lines_of[current].append(line)
    sections = {name: "\n".join(lines).strip() for name, lines in lines_of.items()}
    required = ("intro", *(step.id for step in STEPS), "answers", "plot", "heatmap")
    missing = [part for part in required if not sections.get(part)]
    if missing:
        raise ReleaseError(f"solutions/lessons.md has no lesson prose for {', '.join(missing)}: "
                           f"add a '## <name>' section for each")
    unknown = [part for part in sections if part not in required]
    if unknown:
        raise ReleaseError(f"solutions/lessons.md has sections for {', '.join(unknown)}, which "
                           f"the notebook does not use; it uses {', '.join(required)}")
    return sections


# --- the notebook -------------------------------------------------------------------------------

def _cell_id(*parts: str | None) -> str:
    cell_id = "-".join(part for part in parts if part)
    if not CELL_ID.match(cell_id):
        raise ReleaseError(f"{cell_id!r} is not a valid notebook cell id")
    return cell_id


def _markdown(source: str, *id_parts: str | None):
    return v4.new_markdown_cell(source, id=_cell_id(*id_parts))


def _code(source: str, role: str, step: str | None, *more_id: str):
    return v4.new_code_cell(source, id=_cell_id(role, step, *more_id),
                            metadata={"qkv": {"role": role, "step": step}})


def _graded(cell, *, solution: bool = False, points: float | None = None,
            locked: bool = False):
    """Give the cell nbgrader's metadata, its grade id being its cell id, in every variant.

    `points` makes it a grade cell: a test cell (code), or an answer a person grades (markdown).
    nbgrader's Validate (JupyterLab's button, `nbgrader validate`) counts only the failures of
    grade and locked cells, so the student's notebook carries the metadata too: without it,
    Validate says "Success!" over every failing check.
    """
    cell.metadata["nbgrader"] = {"grade": points is not None, "grade_id": cell.id,
                                 "locked": locked, "schema_version": 3, "solution": solution,
                                 **({"points": points} if points is not None else {})}
    return cell


def check_cell_id(step_id: str) -> str:
    """The id of a step's check cell, which is also its grade id in the nbgrader course."""
    return _cell_id("check", step_id)


def _array_literal(name: str, rows: list[list[int]], shape: str) -> str:
    indent = " " * len(f"{name} = np.array([")
    text = [f"[{', '.join(repr(float(v)) for v in row)}]" for row in rows]
    body = (",\n" + indent).join(text)
    return f"{name} = np.array([{body}])  # [{shape}] = [{len(rows)}, {len(rows[0])}]"


def setup_cell(sources: Sources, variant: str = "student"):
    """Only numpy and the chapter's example arrays: the graders run this cell."""
    inputs = sources.data["inputs"]
    lines = ["import numpy as np", "",
             f"# Example 15.1: the positions {', '.join(POSITIONS)} are the rows of X.",
             *(_array_literal(name, inputs[name], shape) for name, shape in SETUP_ARRAYS)]
    return _graded(_code("\n".join(lines), "setup", None), locked=True)


def _solution_source(name: str, sources: Sources, variant: str) -> str:
    if variant == "student":
        return sources.stub_functions[name]
    if variant == "nbgrader":
        return sources.reference_functions[name]  # nbgrader clears the solution region itself
    raise ReleaseError(f"no solution cells for variant {variant!r}")


def _check_source(step: Step, number: int, variant: str) -> str:
    public = (f"# Check of step {number}, {step.id}: {step.title}\n"
              f'check("{step.id}", {", ".join(step.functions)})')
    if variant == "student":
        return public
    if variant == "nbgrader":
        return f"{HIDDEN_BEGIN}\n{HOOK_IMPORT}\n{HIDDEN_END}\n{public}"
    raise ReleaseError(f"no check cells for variant {variant!r}")


def _answer_source(name: str, sources: Sources, variant: str) -> str:
    if variant == "student":
        return ANSWER_STUB
    if variant == "nbgrader":
        return f"{BEGIN}\n{RUBRIC} {sources.answers[name]}\n{END}"
    raise ReleaseError(f"no answer cells for variant {variant!r}")


def step_heading(step: Step, number: int, new: list[str]) -> str:
    writes = (f"you write `{'`, `'.join(new)}`" if new
              else f"uses your `{'`, `'.join(step.functions)}` from above")
    return (f"## Step {number}: {step.title}\n\n"
            f"*{step.section} · {step.points:g} points · step id `{step.id}` · {writes}*\n\n"
            f"**Task.** {step.task}")


def step_cells(step: Step, number: int, sources: Sources, variant: str,
               defined: set[str]) -> list:
    """One step: its heading and lesson, a solution cell per new function, and its check cell.

    `defined` holds the functions earlier steps already gave a solution cell; this step adds its
    own.
    """
    new = [name for name in step.functions if name not in defined]
    defined.update(new)
    cells = [_markdown(f"{step_heading(step, number, new)}\n\n{sources.sections[step.id]}",
                       "lesson", step.id)]
    cells += [_graded(_code(_solution_source(name, sources, variant), "solution", step.id, name),
                      solution=True)
              for name in new]
    check = _code(_check_source(step, number, variant), "check", step.id)
    # A failing check is an error (Validate and autograde count it), yet Run All goes on past it:
    # JupyterLab and nbclient do not stop at a cell tagged raises-exception.
    check.metadata["tags"] = [RUN_ON]
    cells.append(_graded(check, points=step.points, locked=True))
    return cells


def answer_cells(sources: Sources, variant: str) -> list:
    cells = [_markdown(sources.sections["answers"], "lesson", "answers")]
    for number, (name, question) in enumerate(ANSWERS, 1):
        cells.append(_markdown(f"**{name}** (exercise {number}). {question}", "question", name))
        cells.append(_graded(_markdown(_answer_source(name, sources, variant), "answer", name),
                             solution=True, points=ANSWER_POINTS))
    return cells


def notebook_cells(variant: str = "student", sources: Sources | None = None) -> list:
    """Every cell of the notebook, in order; each with a fixed id made from its role and step."""
    if variant not in VARIANTS:
        raise ReleaseError(f"unknown notebook variant {variant!r}; known: {', '.join(VARIANTS)}")
    sources = sources or Sources.read()
    cells = [_markdown(sources.sections["intro"], "lesson", "intro"),
             setup_cell(sources, variant),
             _graded(_code(CHECK_IMPORT, "check", None), locked=True)]
    defined: set[str] = set()
    for number, step in enumerate(STEPS, 1):
        cells += step_cells(step, number, sources, variant, defined)
    cells += answer_cells(sources, variant)
    cells += [_markdown(sources.sections["plot"], "lesson", "plot"),
              _code(PLOT.format(positions=json.dumps(list(POSITIONS))), "plot", None),
              _markdown(sources.sections["heatmap"], "lesson", "heatmap")]
    return cells


def notebook_text(cells: list) -> str:
    notebook = v4.new_notebook(cells=cells, metadata={"kernelspec": KERNELSPEC,
                                                      "language_info": {"name": "python"}})
    try:
        nbformat.validate(notebook)
    except nbformat.ValidationError as error:
        raise ReleaseError(f"the generated notebook is not valid nbformat 4: {error}") from None
    return nbformat.writes(notebook, version=4) + "\n"


# --- the release --------------------------------------------------------------------------------

def _json(value) -> str:
    return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def _json_lines(value, depth: int = 0, opened: int = 7) -> str:
    """JSON with the outer `opened` levels one item a line and everything deeper on one line: the
    self-check's tables stay small, and each outcome is still a line of its own in a diff."""
    if depth >= opened or not isinstance(value, (dict, list)) or not value:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    pad, end = " " * (depth + 1), " " * depth
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(key, ensure_ascii=False)}: {_json_lines(item, depth + 1, opened)}"
                 for key, item in sorted(value.items())]
        return "{\n" + ",\n".join(items) + f"\n{end}}}" + ("\n" if depth == 0 else "")
    items = [f"{pad}{_json_lines(item, depth + 1, opened)}" for item in value]
    return "[\n" + ",\n".join(items) + f"\n{end}]"


def build_release(sources: Sources | None = None) -> dict[str, bytes]:
    """Every file of assignments/attention_head/, by name."""
    sources = sources or Sources.read()
    missing = [name for step in STEPS for name in step.functions
               if name not in function_sources(sources.reference)]
    if missing:
        raise ReleaseError(f"the reference solution defines no {', '.join(sorted(set(missing)))}")
    step_table = {
        "steps": [{"id": s.id, "title": s.title, "section": s.section, "points": s.points,
                   "functions": list(s.functions), "uses": list(s.uses), "task": s.task}
                  for s in STEPS],
        "answers": [{"name": name, "question": question} for name, question in ANSWERS],
    }
    rows = "\n".join(f"| `{s.id}` | {s.title} | {s.section} | {s.points:g} |" for s in STEPS)
    example = {key: sources.data[key] for key in EXAMPLE_KEYS}
    texts = {
        "attention_head.py": sources.stub,
        "attention_head.ipynb": notebook_text(notebook_cells("student", sources)),
        "chapter_example.json": _json_lines(example),
        "steps.json": _json(step_table),
        "README.md": README.format(steps=rows),
        "pytest.ini": PYTEST_INI,
    }
    for name in PUBLIC_FILES:
        texts[name] = (PUBLIC / name).read_text(encoding="utf-8")
    files = {name: text.encode("utf-8") for name, text in texts.items()}
    # no time or name in the header: the same sources give the same bytes
    files[MISTAKES] = gzip.compress(_json_lines(example_mistakes(example)).encode("utf-8"), 9, mtime=0)
    return dict(sorted(files.items()))


def _same_content(name: str, mine: bytes, generated: bytes) -> bool:
    """Are a release file's bytes what the sources generate? A gzipped file by what it holds: zlib
    builds may compress the same text to other bytes."""
    if mine == generated:
        return True
    if not name.endswith(".gz"):
        return False
    try:
        return gzip.decompress(mine) == gzip.decompress(generated)
    except (OSError, EOFError, ValueError):
        return False


def _plain(value, digits: int | None = 10):
    """A value as JSON data: arrays as nested lists, tuples as lists, numbers to `digits`
    significant digits (None: every digit, as Python writes a float back exactly)."""
    if isinstance(value, np.ndarray):
        return _plain(value.tolist(), digits)
    if isinstance(value, (tuple, list)):
        return [_plain(item, digits) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item, digits) for key, item in value.items()}
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.floating, float)):
        return float(value) if digits is None else float(f"{float(value):.{digits}g}")
    return int(value) if isinstance(value, np.integer) else value


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    try:
        x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    except (TypeError, ValueError):
        return isinstance(b, list) and len(a) == len(b) and all(_same(p, q) for p, q in zip(a, b))
    return x.shape == y.shape and bool(np.allclose(x, y, rtol=1e-9, atol=1e-9, equal_nan=True))


# --- what the self-check may say: the hidden graders' models, on public calls only -------------

SECOND_SEED = 1515  # fixes the public probes' numbers: the same on every run, and public
MOST_ALTERNATIVES = 3
"""The self-check names at most this many mistakes that fit equally well, and none when more do."""
UNNAMED_STEPS = ("batch",)
"""Steps whose mistakes the self-check never names: where the head works on one sequence (which the
self-check requires before it names anything on a step built on it), the hidden graders say only
that a batch's axes are mixed."""
NEAR = 1e-3
"""A model whose values lie this close to the reference's must be matched to a tenth of that
distance (as the hidden graders require), or float32 noise would pass for it."""


def _numbers(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """Small numbers with two decimals, none repeated: ties and symmetries would let different
    mistakes give the same values."""
    return np.round(rng.uniform(-2.0, 2.0, size=shape), 2)


def public_probes(example: dict) -> dict[str, list[tuple[str, tuple]]]:
    """Every public call the self-check may use to tell mistakes apart, step by step: the calls of
    its own check on the chapter's example, then the same functions on a second small example
    (T=4, d_in=3, d_k=5, d_v=2), a square one (T = d_in = d_k = d_v = 3), a batch of two and
    further situations of the exercises. Their numbers are fixed and public; none is a hidden case."""
    from autograder import cases
    from solutions import attention_head as ref

    ex = {name: np.array(value, dtype=float) for key in ("inputs", "exact", "values")
          for name, value in example[key].items()}
    rng = np.random.default_rng(SECOND_SEED)
    two = (_numbers(rng, 4, 3), _numbers(rng, 3, 5), _numbers(rng, 3, 5), _numbers(rng, 3, 2))
    square = (_numbers(rng, 3, 3), _numbers(rng, 3, 3), _numbers(rng, 3, 3), _numbers(rng, 3, 3))
    batch = (np.stack([two[0], _numbers(rng, 4, 3)]),) + two[1:]
    one = (_numbers(rng, 1, 3),) + two[1:]  # T = 1: one position, which attends to itself alone
    head = (ex["X"], ex["W_Q"], ex["W_K"], ex["W_V"])

    def chain(x, w_q, w_k, w_v):
        q, k, v = ref.project_qkv(x, w_q, w_k, w_v)
        d = ref.scores(q, k)
        s = ref.scale(d, q.shape[-1])
        return q, k, v, d, s, ref.softmax_rows(s)

    sets = [(ex["Q"], ex["K"], ex["V"], ex["D"], ex["S"], ex["A"])] + [chain(*inputs) for inputs in (two, square, batch,
                                                                                                       one)]
    shift = np.array(example["exercises"]["ex3_value_shift"]["shift"], dtype=float)
    rows = list(example["exercises"]["ex3_value_shift"]["rows"])
    a2, v2 = sets[1][5], sets[1][2]
    shift2 = np.array([0.5, -1.5])
    column_stochastic = a2.T.copy()
    negative = a2.copy()
    negative[1, :2] += [0.5, -0.5 - negative[1, 1]]
    negative[1] /= negative[1].sum()
    zero = a2.copy()
    zero[2] = [0.0, 0.25, 0.75, 0.0]
    later = a2.copy()
    later[3] *= 0.5
    near, inside, outside = a2.copy(), a2.copy(), a2.copy()
    near[2] *= 1.0 + 1e-6
    inside[1] += 5e-10 / 4
    outside[2] += 5e-9 / 4
    # one row just outside 1e-9, the mean row sum just inside it: a test of the mean (or of the
    # total against T times the tolerance) is not one of the total
    mean_inside = a2.copy()
    mean_inside[3] += 3e-9 / 4
    # rows that sum to one exactly in float32 as in float64, and columns that do not (a zero among them)
    dyadic = np.array([[0.5, 0.25, 0.25, 0.0], [0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0]])
    wide = ref.softmax_rows(_numbers(rng, 4, 6))
    # a row of zeros, which sums to nothing: a predicate that divides each row by its sum first
    # gets NaN there, where one that skips the sums test gets True
    zero_row = a2.copy()
    zero_row[1] = 0.0
    facts = example["exercises"]["ex4_shapes"]
    calls = {
        "qkv": [("project_qkv", inputs) for inputs in (head, two, square, batch, one)],
        "scores": [("scores", (q, k)) for q, k, *_ in sets],
        "scale": [("scale", (d, q.shape[-1])) for q, _, _, d, _, _ in sets],
        "softmax": [("softmax_rows", (s,)) for *_, s, _ in sets] + [  # scores in the thousands, and rows far below
            ("softmax_rows", (sets[1][4] * 1000.0,)), ("softmax_rows", (sets[1][4] + [[0.0], [-850.0], [30.0], [-1200.0]],))],
        "mix": [("mix", (a, v)) for _, _, v, _, _, a in sets] + [  # zeros between the weights that count
            ("mix", (cases.INTERLEAVED.copy(), sets[1][2]))],
        "attention": [("attention", (q, k, v)) for q, k, v, *_ in sets] + [
            ("attention", (40.0 * sets[1][0], 40.0 * sets[1][1], sets[1][2]))],
        "head": [("self_attention_head", inputs) for inputs in (head, two, square, one, (40.0 * two[0],) + two[1:])],
        "batch": [("self_attention_head", (np.stack([ex["X"], 2 * ex["X"]]),) + head[1:]),
                  ("self_attention_head", (2 * ex["X"],) + head[1:]), ("self_attention_head", batch)],
        "ex1_zero_query": [("zero_query_mixture", (k, v)) for _, k, v, *_ in sets[:3] + sets[4:]],
        "ex2_row_normalization": [("is_attention_weights", (matrix,)) for matrix in (
            ex["A"], ex["A"].T, a2, column_stochastic, negative, zero, later, near, inside, outside, wide,
            ex["A"][None], ex["A"][0], np.array([1.5, 0.5]), mean_inside, dyadic, zero_row,
            np.full((4, 4), 0.125))] + [  # every row summing to a half, as a hidden case has it
            ("column_normalized_counterexample", ())],
        "ex3_value_shift": [("shifted_output", (ex["A"], ex["V"], shift, None)),
                            ("shifted_output", (ex["A"], ex["V"], shift, rows)),
                            ("shifted_output", (a2, v2, shift2, None)), ("shifted_output", (a2, v2, shift2, [1, 3])),
                            ("output_change", (ex["A"], shift, None)), ("output_change", (ex["A"], shift, rows)),
                            ("shifted_output", (sets[4][5], sets[4][2], shift2, None)),
                            ("output_change", (a2, shift2, None)), ("output_change", (a2, shift2, [1, 3])),
                            # no row listed, as the docstring allows: a span of the listed rows raises here
                            ("shifted_output", (a2, v2, shift2, [])), ("output_change", (a2, shift2, [])),
                            ("output_change", (sets[4][5], shift2, None))],
        "ex4_shapes": [("head_facts", (facts["t"], facts["d_k"], facts["d_v"])), ("head_facts", (4, 5, 2)),
                       ("head_facts", (7, 2, 6))],
        "ex5_intervention": [("value_intervention", head + (np.zeros_like(ex["W_V"]),)),
                             ("value_intervention", two + (_numbers(rng, 3, 2),)),
                             ("value_intervention", square + (_numbers(rng, 3, 3),)),
                             ("value_intervention", one + (_numbers(rng, 3, 2),))],
    }
    missing = [step.id for step in STEPS if step.id not in calls]
    if missing:
        raise ReleaseError(f"no public probe calls for {', '.join(missing)}")
    return calls


def _argument(value):
    """A call's argument as JSON data: an array tagged as one, so that `rows=[0]` stays a list."""
    if isinstance(value, np.ndarray):
        return {"array": _plain(value, None)}
    return _plain(value, None)


def _outcome(fn: str, function, args, reference=None):
    """What `function` gives on `args`, as JSON data: its value, or {"raises": "Type: message"};
    None when it returns what no grader reads as the function's value. A model that cannot occur
    on this call (diagnoses.Inapplicable) gives the reference's value."""
    import warnings

    from autograder import diagnoses, judge

    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = function(*args)
    except diagnoses.Inapplicable:
        return reference
    except Exception as error:
        return {"raises": f"{type(error).__name__}: {error}"}
    if judge.RETURNS[fn][0] == "facts":  # the facts a slip gets wrong, the reference's for the rest
        return {**reference, **_plain(value)} if isinstance(value, dict) else None
    try:
        judge.canonical(fn, value)
    except judge.WrongType:
        return None
    return _plain(value)


def _effect(value, reference) -> float:
    """The largest finite difference between a model's value and the reference's."""
    try:
        x, y = np.asarray(value, dtype=float), np.asarray(reference, dtype=float)
    except (TypeError, ValueError):
        if isinstance(value, list) and isinstance(reference, list) and len(value) == len(reference):
            return max((_effect(p, q) for p, q in zip(value, reference)), default=0.0)
        if isinstance(value, dict) and isinstance(reference, dict):
            return max((_effect(value[k], reference[k]) for k in value if k in reference), default=0.0)
        return float("inf")
    if x.shape != y.shape:
        return float("inf")
    finite = np.isfinite(x) & np.isfinite(y)
    return float(np.max(np.abs(x - y)[finite])) if finite.any() else 0.0


def _step_models(fn: str):
    """The hidden graders' single models of `fn`: the hand-written slips, then the derived edits."""
    from autograder import derived, diagnoses

    yield from ((tuple(codes), False, model) for codes, model in diagnoses.MODELS.get(fn, ()))
    yield from (((code,), True, model) for code, model in derived.models(fn))


IDENTITY_SEEDS = (1, 2, 3)
"""Hidden-case seeds (under a key of the release's own) whose calls tell apart edits that agree on
the public calls: edits that give the same on all of them are taken to be one mistake."""


@lru_cache(maxsize=None)
def _identity_calls(fn: str) -> list[tuple]:
    from autograder import cases

    return [call.args for seed in IDENTITY_SEEDS for step_cases in cases.build(seed, key=b"release-identity").values()
            for case in step_cases for call in case.calls if call.fn == fn]


def _distinct_edits(fn: str, groups: list[tuple]) -> list[tuple]:
    """Of derived edits (one code each) that give the same on the public calls, one of each set
    that also gives the same on many hidden-style calls: the one the hidden graders would name
    (`derived.preference`, then the order of the reference's lines), as they do for such edits."""
    from autograder import derived
    from solutions import attention_head as reference

    if len(groups) < 2:
        return groups
    calls = _identity_calls(fn)
    wants = [_plain(getattr(reference, fn)(*args), None) for args in calls]
    kept: list[tuple[tuple, list]] = []
    for codes in sorted(groups, key=lambda codes: derived.preference(codes[0])):
        model = derived.model(codes[0])
        values = [_outcome(fn, model, args, want) for args, want in zip(calls, wants)]
        if not any(all(map(_same_outcome, values, theirs)) for _, theirs in kept):
            kept.append((codes, values))
    chosen = {codes for codes, _ in kept}
    return [codes for codes in groups if codes in chosen]


def _same_outcome(a, b) -> bool:
    if isinstance(a, dict) and "raises" in a or isinstance(b, dict) and "raises" in b:
        return a == b
    if a is None or b is None:
        return a is b
    return _same(a, b)


def example_mistakes(example: dict) -> dict:
    """What the self-check needs to name a mistake, and nothing it could grade with: for each step,
    its public calls (the check's and the probes) with the reference's value, and for each single
    model of the hidden graders (the slips of diagnoses.MODELS and the edits of derived.py), which
    of the outcomes seen on each call it gives (-1: the reference's value). Models are grouped by
    what they give and named by their codes, and kept only where some call's value tells them from
    the reference; a derived edit that gives exactly what a slip gives on every public call is left
    out, as the hidden graders try the slip first, and so is a group of more than three codes,
    which the self-check would not name. A model whose values lie within NEAR of the reference's
    on a call carries that distance ("near"), which the student's numbers must then be much closer
    than. Each code's explanation is in the hidden graders' words."""
    from autograder import derived, feedback
    from autograder.slips import SLIPS
    from solutions import attention_head as reference

    whole_result = sorted({slip.code for slip in SLIPS if slip.knob == "result"})
    found = {}
    probes = public_probes(example)
    for step in STEPS:
        calls = probes[step.id]
        wants = [_plain(getattr(reference, fn)(*args), None) for fn, args in calls]
        values: list[list] = [[] for _ in calls]
        keys: list[dict] = [{} for _ in calls]
        by_vector: dict[tuple, list] = {}
        for fn in dict.fromkeys(fn for fn, _ in calls):
            mine = [i for i, (name, _) in enumerate(calls) if name == fn]
            for codes, is_derived, model in _step_models(fn) if step.id not in UNNAMED_STEPS else ():
                vector, near, differs = [], [], False
                for i in mine:
                    got, effect = _outcome(fn, model, calls[i][1], wants[i]), 0.0
                    if got is None:
                        vector.append(-2)  # nothing a grader would read as a value
                        near.append(0.0)
                        continue
                    if not (isinstance(got, dict) and "raises" in got):
                        if fn != "column_normalized_counterexample" and _same(got, wants[i]):
                            vector.append(-1)  # the reference's value here
                            near.append(0.0)
                            continue
                        differs = True
                        effect = _effect(got, wants[i])
                    key = json.dumps(got, sort_keys=True)
                    if key not in keys[i]:
                        keys[i][key] = len(values[i])
                        values[i].append(got)
                    vector.append(keys[i][key])
                    near.append(float(f"{effect:.3g}") if 0.0 < effect <= NEAR else 0.0)
                if differs:
                    by_vector.setdefault((fn, tuple(vector), tuple(near)), []).append((codes, is_derived))
        models: dict[str, dict] = {}
        for (fn, vector, near), members in by_vector.items():
            slips = [codes for codes, is_derived in members if not is_derived]
            # a slip outranks an edit it cannot be told from; of edits that give the same on every
            # input, the hidden graders tell the one derived.preference puts first, and so does this
            kept = slips or _distinct_edits(fn, [codes for codes, _ in members])
            codes = list(dict.fromkeys(code for group in kept for code in group))
            if len(codes) > MOST_ALTERNATIVES:
                continue  # values that many mistakes give name none of them
            entry = models.setdefault(f"{fn}:{'+'.join(codes)}", {"function": fn, "codes": codes, "ways": []})
            if all(derived.is_derived(code) and derived.inside_a_call(code) for code in codes):
                entry["inside"] = True  # an edit of a line the function gets by calling another
            entry["ways"].append(list(vector) if not any(near) else {"outcomes": list(vector), "near": list(near)})
        # Only the outcomes some model gives, renumbered; to 8 digits, or 10 where a model is near.
        used, precise = [set() for _ in calls], [set() for _ in calls]
        for entry in models.values():
            mine = [i for i, (name, _) in enumerate(calls) if name == entry["function"]]
            for way in entry["ways"]:
                for i, index in zip(mine, way if isinstance(way, list) else way["outcomes"]):
                    if index >= 0:
                        used[i].add(index)
                        if isinstance(way, dict):
                            precise[i].add(index)
        renumber = [{old: new for new, old in enumerate(sorted(indexes))} for indexes in used]
        for entry in models.values():
            mine = [i for i, (name, _) in enumerate(calls) if name == entry["function"]]
            for way in entry["ways"]:
                outcomes = way if isinstance(way, list) else way["outcomes"]
                outcomes[:] = [renumber[i][index] if index >= 0 else index for i, index in zip(mine, outcomes)]
        codes = list(dict.fromkeys(code for entry in models.values() for code in entry["codes"]))
        found[step.id] = {
            "calls": [{"function": fn, "args": [_argument(arg) for arg in args],
                       "reference": None if fn == "column_normalized_counterexample" else want,
                       "outcomes": [_plain(values[i][old], 10 if old in precise[i] else 8)
                                    for old in sorted(used[i])]}
                      for i, ((fn, args), want) in enumerate(zip(calls, wants))],
            "models": dict(sorted(models.items())),
            "explanations": {code: "\n".join(feedback.diagnosis_lines([code], step)) for code in codes},
        }
    return {"steps": found, "whole_result": whole_result}


def sample_submission(sources: Sources | None = None,
                      release: dict[str, bytes] | None = None) -> dict[str, bytes]:
    """data/sample-submission/: the same finished work (one slip, every answer written) as a
    module and as the notebook filled in, beside the release's files the notebook reads, so that
    it runs (and Validate judges it) where it is shipped. `release` is build_release's output,
    when already made."""
    sources = sources or Sources.read()
    release = release or build_release(sources)
    module = re.sub(r"^[ \t]*### (BEGIN|END) SOLUTION\n", "", sources.reference, flags=re.M)
    for old, new in SAMPLE_MISTAKE:
        if old not in module:
            raise ReleaseError(f"the sample's mistake no longer applies: {old!r} is not in the reference")
        module = module.replace(old, new)
    functions = function_sources(module)
    cells = notebook_cells("student", sources)
    for cell in cells:
        role = cell.metadata.get("qkv", {}).get("role")
        if role == "solution":
            cell.source = functions[re.match(r"def (\w+)", cell.source).group(1)]
        elif cell.id.startswith("answer-"):
            cell.source = sources.answers[cell.id.removeprefix("answer-")]
    files = {"attention_head.py": module.encode("utf-8"),
             "attention_head.ipynb": notebook_text(cells).encode("utf-8")}
    files.update({name: release[name] for name in BESIDE_NOTEBOOK})
    return dict(sorted(files.items()))


def drift(files: dict[str, bytes], folder: Path) -> list[str]:
    """How `folder` differs from the generated files, one line per file."""
    lines = []
    for name, content in files.items():
        path = folder / name
        if not path.is_file():
            lines.append(f"missing     {name}")
        elif not _same_content(name, path.read_bytes(), content):
            lines.append(f"differs     {name}")
    if folder.is_dir():
        for path in sorted(folder.rglob("*")):
            relative = path.relative_to(folder)
            if path.is_file() and not IGNORED.intersection(relative.parts) \
                    and relative.as_posix() not in files:
                lines.append(f"unexpected  {relative.as_posix()}")
    return lines


def write_release(files: dict[str, bytes], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (folder / name).write_bytes(content)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="qkv-release",
        description="Generate assignments/attention_head/ from the reference solution, the step "
                    "table, the lesson prose and the chapter's values.")
    parser.add_argument("--out", type=Path, default=RELEASE, metavar="DIR",
                        help="the release folder to write, or to compare with --check "
                             "(default: %(default)s)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 and name the files that differ from what "
                             "would be generated")
    args = parser.parse_args(argv)
    try:
        sources = Sources.read()
        outputs = {args.out: build_release(sources)}
        if args.out == RELEASE:  # the sample submission goes with the project's own release
            outputs[SAMPLE] = sample_submission(sources, outputs[args.out])
    except ReleaseError as error:
        print(f"qkv-release: {error}", file=sys.stderr)
        return 2
    status = 0
    for folder, files in outputs.items():
        if args.check:
            problems = drift(files, folder)
            if problems:
                print(f"qkv-release --check: {folder} is not what the sources generate:")
                print("\n".join(f"  {line}" for line in problems))
                print("Run qkv-release to regenerate it (and delete unexpected files).")
                status = 1
            else:
                print(f"qkv-release --check: {folder} is up to date ({len(files)} files).")
            continue
        write_release(files, folder)
        print(f"qkv-release: wrote {len(files)} files to {folder}")
        stale = [line for line in drift(files, folder) if line.startswith("unexpected")]
        if stale:
            print("\n".join(f"  {line} (not generated; delete it)" for line in stale))
    return status


if __name__ == "__main__":
    sys.exit(main())
