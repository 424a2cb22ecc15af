"""Mistakes made by machine: the reference solution with one small edit of its source.

The hand-written corpora (variants.py, realistic.py, unlisted.py, heldout.json) hold the mistakes
people thought of. These are every single edit of a few general kinds, made on the syntax of the
reference's functions, so that what the feedback claims is tested on mistakes no one chose:

- an operator swapped for another (+ - * / @), its operands swapped, or one operand kept alone;
- a comparison swapped for another;
- a number changed (to 0, 1, its negative, twice it, a thousand times or a thousandth of it), a
  flag flipped;
- a numpy function swapped within its family (exp, log, sqrt, abs, square; sum, mean, max, min;
  zeros, ones), or left out (its first argument in its place);
- a reduction's axis changed or dropped, keepdims dropped;
- a call's first two arguments swapped; a step of the chapter's own left out or done twice;
- a name replaced by another of the function's names, or transposed;
- a returned tuple's first two items swapped, two of a returned dict's values swapped;
- an `if` replaced by one of its branches, an in-place update left out.

The edits are made on the syntax tree, independently of how the grader derives its own models
(autograder/derived.py edits the reference's dataflow, not its source), and every mutant is valid
Python. `mutants()` lists them in a fixed order, `sample(n)` draws a fixed selection of them and
`pairs(n)` a fixed set of mutants with two edits in one function.
"""
from __future__ import annotations

import ast
import copy
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator

REFERENCE = Path(__file__).resolve().parents[2] / "solutions" / "attention_head.py"

_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.MatMult)
_COMPARISONS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
_FAMILIES = (("exp", "log", "sqrt", "abs", "square"), ("sum", "mean", "max", "min"), ("zeros", "ones"))
_REDUCTIONS = ("sum", "mean", "max", "min")


@dataclass(frozen=True)
class Mutant:
    function: str
    edit: str
    """What was changed, in the reference's words: `line 57: np.exp -> np.log`."""
    source: str

    def text(self) -> str:
        return self.source

    @property
    def name(self) -> str:
        return f"{self.function}: {self.edit}"


def _preorder(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes under `node` in the order ast.NodeTransformer visits them (a node before its children)."""
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _preorder(child)


class _Replace(ast.NodeTransformer):
    """Replace the `target`-th node (in _preorder's order) by what `make` returns for it."""

    def __init__(self, target: int, make: Callable[[ast.AST], ast.AST]):
        self.target, self.make, self.seen = target, make, -1

    def visit(self, node):
        self.seen += 1
        if self.seen == self.target:
            return self.make(copy.deepcopy(node))
        return self.generic_visit(node)


def _np(name: str) -> ast.Attribute:
    return ast.Attribute(ast.Name("np", ast.Load()), name, ast.Load())


def _is_np_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
        and isinstance(node.func.value, ast.Name) and node.func.value.id == "np"


def _with(node: ast.AST, **fields) -> ast.AST:
    for name, value in fields.items():
        setattr(node, name, value)
    return node


def _edits(node: ast.AST, names: list[str], own: set[str]) -> Iterator[tuple[str, Callable]]:
    """(description, make) for every edit of `node` itself; `names`: the function's array names;
    `own`: the module's functions (a stage of the chapter's own)."""
    shown = ast.unparse(node) if not isinstance(node, (ast.stmt,)) or isinstance(node, ast.AugAssign) else ""
    if isinstance(node, ast.BinOp) and isinstance(node.op, _OPERATORS):
        for op in _OPERATORS:
            if not isinstance(node.op, op):
                yield (f"{shown} -> {ast.unparse(_with(copy.deepcopy(node), op=op()))}",
                       lambda n, op=op: _with(n, op=op()))
        yield f"{shown} -> {ast.unparse(_with(copy.deepcopy(node), left=node.right, right=node.left))}", \
            lambda n: _with(n, left=n.right, right=n.left)
        yield f"{shown} -> {ast.unparse(node.left)}", lambda n: n.left
        yield f"{shown} -> {ast.unparse(node.right)}", lambda n: n.right
    elif isinstance(node, ast.Compare) and len(node.ops) == 1:
        for op in _COMPARISONS:
            if not isinstance(node.ops[0], op):
                yield (f"{shown} -> {ast.unparse(_with(copy.deepcopy(node), ops=[op()]))}",
                       lambda n, op=op: _with(n, ops=[op()]))
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        yield f"{shown} -> {not node.value}", lambda n: _with(n, value=not n.value)
    elif isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        value = node.value
        for new in dict.fromkeys([0, 1, -value, 2 * value, value * 1000, value / 1000]):
            if new != value and not (isinstance(value, int) and isinstance(new, float) and new != int(new)):
                yield f"{shown} -> {new!r}", lambda n, new=new: _with(n, value=new)
    elif isinstance(node, ast.Call):
        attr = node.func.attr if isinstance(node.func, ast.Attribute) else None
        if _is_np_call(node):
            for family in _FAMILIES:
                if attr in family:
                    for other in family:
                        if other != attr:
                            yield f"np.{attr} -> np.{other} in {shown}", lambda n, o=other: _with(n, func=_np(o))
        elif attr in _REDUCTIONS:  # a method: s.max(axis=-1)
            for other in _REDUCTIONS:
                if other != attr:
                    yield (f".{attr} -> .{other} in {shown}",
                           lambda n, o=other: _with(n, func=_with(n.func, attr=o)))
        if node.args and (attr is not None or (isinstance(node.func, ast.Name) and node.func.id in own | {"bool"})):
            yield f"{shown} -> {ast.unparse(node.args[0])}", lambda n: n.args[0]
        if len(node.args) >= 2:
            yield (f"arguments swapped in {shown}",
                   lambda n: _with(n, args=[n.args[1], n.args[0], *n.args[2:]]))
        if isinstance(node.func, ast.Name) and node.func.id in own and len(node.args) == 1:
            yield f"{shown} done twice", lambda n: ast.Call(n.func, [copy.deepcopy(n)], [])
        for k, keyword in enumerate(node.keywords):
            if keyword.arg == "axis":
                for axis in (0, 1, -2):
                    if not (isinstance(keyword.value, ast.Constant) and keyword.value.value == axis):
                        yield (f"axis={axis} in {shown}",
                               lambda n, k=k, axis=axis: _with(n, keywords=[
                                   ast.keyword("axis", ast.Constant(axis)) if i == k else kw
                                   for i, kw in enumerate(n.keywords)]))
            if keyword.arg in ("axis", "keepdims"):
                yield (f"{keyword.arg} dropped in {shown}",
                       lambda n, k=k: _with(n, keywords=[kw for i, kw in enumerate(n.keywords) if i != k]))
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in names:
        for other in names:
            if other != node.id:
                yield f"{node.id} -> {other}", lambda n, o=other: ast.Name(o, ast.Load())
        yield f"{node.id} -> {node.id}.T", lambda n: ast.Attribute(n, "T", ast.Load())
    elif isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and len(node.value.elts) >= 2:
        yield (f"return {ast.unparse(node.value)} with its first two swapped",
               lambda n: _with(n, value=_with(n.value, elts=[n.value.elts[1], n.value.elts[0], *n.value.elts[2:]])))
    elif isinstance(node, ast.Return) and isinstance(node.value, ast.Dict) and len(node.value.values) >= 2:
        values = node.value.values
        for i in range(len(values)):
            for j in range(i + 1, len(values)):
                keys = [ast.unparse(node.value.keys[i]), ast.unparse(node.value.keys[j])]
                yield (f"returned {keys[0]} and {keys[1]} swapped",
                       lambda n, i=i, j=j: _with(n, value=_with(n.value, values=[
                           n.value.values[j] if m == i else n.value.values[i] if m == j else v
                           for m, v in enumerate(n.value.values)])))
    elif isinstance(node, ast.If):
        yield f"if {ast.unparse(node.test)}: always its branch", lambda n: n.body
        yield f"if {ast.unparse(node.test)}: never its branch", lambda n: n.orelse or [ast.Pass()]
    elif isinstance(node, ast.AugAssign):
        yield f"{shown} left out", lambda n: ast.Pass()


def _names(function: ast.FunctionDef) -> list[str]:
    """The function's parameters and the names it assigns, in order of appearance."""
    found = [arg.arg for arg in function.args.args]
    for node in _preorder(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.append(node.id)
    return list(dict.fromkeys(found))


def _edited(text: str, only: str | None = None) -> Iterator[tuple[str, str, str]]:
    """(function, edit, the source it gives) for every single edit of the module's functions (or of
    the function named `only`). The edited function is written back in place of its own lines: the
    rest of the module stays as it was."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    own = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    for function in tree.body:
        if not isinstance(function, ast.FunctionDef) or only not in (None, function.name):
            continue
        names = _names(function)
        order = {id(node): n for n, node in enumerate(_preorder(function))}
        before, after = "".join(lines[:function.lineno - 1]), "".join(lines[function.end_lineno:])
        body = function.body[1:] if ast.get_docstring(function) else function.body
        for statement in body:
            for node in _preorder(statement):
                for description, make in _edits(node, names, own):
                    edited = _Replace(order[id(node)], make).visit(copy.deepcopy(function))
                    yield (function.name, f"line {node.lineno}:{node.col_offset}: {description}",
                           before + ast.unparse(ast.fix_missing_locations(edited)) + "\n" + after)


@lru_cache(maxsize=None)
def mutants() -> tuple[Mutant, ...]:
    """Every single edit, in the order of the reference's lines; edits that come to the same source, once."""
    found = {}
    for function, edit, source in _edited(REFERENCE.read_text()):
        found.setdefault(source, Mutant(function, edit, source))
    return tuple(found.values())


def _spread(every: list[Mutant], count: int, pick: random.Random) -> list[Mutant]:
    """`count` of `every`, drawn in turn from each function's, so that every function has its share."""
    by_function: dict[str, list[Mutant]] = {}
    for mutant in every:
        by_function.setdefault(mutant.function, []).append(mutant)
    for group in by_function.values():
        pick.shuffle(group)
    chosen, groups = [], list(by_function.values())
    while len(chosen) < min(count, len(every)):
        for group in groups:
            if group and len(chosen) < count:
                chosen.append(group.pop())
    return chosen


def sample(count: int, seed: int = 15) -> list[Mutant]:
    """A fixed selection of `count` single edits, the same on every machine."""
    return _spread(list(mutants()), count, random.Random(seed))


def pairs(count: int, seed: int = 15) -> list[Mutant]:
    """`count` mutants with two edits in one function: a single edit, then one edit of what it gave."""
    pick = random.Random(seed)
    found = {}
    for first in _spread(list(mutants()), count, pick):
        seconds = [(edit, source) for _, edit, source in _edited(first.source, first.function)]
        if seconds:
            edit, source = pick.choice(seconds)
            found.setdefault(source, Mutant(first.function, f"{first.edit}; then {edit}", source))
    return list(found.values())
