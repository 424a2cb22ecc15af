"""The one message builder: every line of feedback a student reads is made here.

Like numpy's `assert_allclose`, an array mismatch reports the shape first, then how many elements
differ, the first few differing indices and the largest error. Expected values are shown only for
the chapter's public example; for hidden cases the student sees the call, the shapes, where the
numbers differ and by how much, which is enough to find the bug without learning the case.
"""
from __future__ import annotations

import re

import numpy as np

from .diagnoses import describe
from .results import printable
from .steps import Step

FIRST_DIFFERENCES = 3


def _near(x, near) -> bool:
    """Is `x` so close to `near` that six significant digits would hide their difference?"""
    x, near = float(x), float(near)
    return bool(np.isfinite(x) and np.isfinite(near) and abs(x - near) < 1e-5 * max(1.0, abs(near)))


def _fmt(x, near=None) -> str:
    """Six significant digits, or every digit when that would hide a small difference from `near`."""
    x = float(x)
    if not np.isfinite(x):
        return str(x)
    if near is not None and _near(x, near):
        return repr(x)
    return f"{x:.6g}"


def _shape(array: np.ndarray) -> str:
    return str(list(array.shape))


ARRAY_NAMES = {"q": "queries q", "k": "keys k", "v": "values v", "d": "scores d", "s": "scaled scores s",
               "a": "weights a", "o": "output o"}
"""How feedback names a returned array: in the chapter's words, then the name the code gives it."""


def array_mismatch(actual: np.ndarray, expected: np.ndarray, public: bool, name: str = "result") -> str:
    """Describe how `actual` differs from `expected`, numpy-style; returns '' when they agree."""
    name = ARRAY_NAMES.get(name, name)
    if actual.shape != expected.shape:
        return f"{name} has shape {_shape(actual)}, expected {_shape(expected)}."
    # np.isclose(rtol=1e-9, atol=1e-9), at a fraction of its cost: nothing but an equal infinity
    # is close to an infinity, and NaN to nothing
    tolerance = np.where(np.isfinite(expected), 1e-9 + 1e-9 * np.abs(expected), -1.0)
    bad = ~((np.abs(actual - expected) <= tolerance) | (actual == expected))
    if not bad.any():
        return ""
    count, total = int(bad.sum()), bad.size
    lines = [f"{name}: mismatched elements: {count} / {total} ({100.0 * count / total:.3g}%)"]
    for index in list(zip(*np.nonzero(bad)))[:FIRST_DIFFERENCES]:
        where = "[" + ", ".join(str(int(i)) for i in index) + "]"
        if public:
            lines.append(f"  at {where}: got {_fmt(actual[index], expected[index])}, "
                         f"expected {_fmt(expected[index], actual[index])}")
        elif _near(actual[index], expected[index]):
            # a near miss's digits would spell the hidden value beside it: only how far off it is
            lines.append(f"  at {where}: off by {abs(float(actual[index]) - float(expected[index])):.3g}")
        else:
            lines.append(f"  at {where}: got {_fmt(actual[index])}")
    finite = np.isfinite(actual) & np.isfinite(expected)
    if finite[bad].any():
        lines.append(f"  largest absolute difference: {np.max(np.abs(actual - expected)[bad & finite]):.3g}")
    if not np.isfinite(actual).all():
        lines.append("  your result contains NaN or infinity")
    return "\n".join(lines)


MOST_ALTERNATIVES = 3
"""The most mistakes told as "one of"; beyond, the cases are said to tell little."""


def diagnosis_lines(codes: list[str], step: Step, carried: frozenset[str] = frozenset(),
                    alternatives: list[tuple] = (), looks: dict[str, str] | None = None,
                    seen: dict[str, list[str]] | None = None, told: dict[str, list[str]] | None = None) -> list[str]:
    """Each code's explanation; a code `carried` skips its advice (said once for every step).

    `alternatives`: groups of code tuples the evidence cannot tell apart, introduced as "one of";
    `looks`: advice that replaces a code's general advice; `seen`: the cases where a code read from
    the look of the values (NaN, a shape, an exception) shows; `told`: codes an earlier step this one
    builds on has explained already, by the names of those steps: named here, not explained again."""
    looks, seen, told = looks or {}, seen or {}, told or {}
    lines = []
    opened = set()
    for code in codes:
        group = next((g for g in alternatives if any(code in option for option in g)), None)
        if group is not None and id(group) not in opened:
            opened.add(id(group))
            options = "; ".join(" with ".join(option) for option in group)
            if len(group) <= MOST_ALTERNATIVES:
                lines.append(f"Your numbers fit more than one mistake, each reproducing every failing case; "
                             f"one of: {options}.")
            else:  # so many that the cases say little: no claim that the mistake is among them
                lines.append(f"Your numbers fit many different mistakes ({len(group)} found), each reproducing "
                             f"every failing case: these cases cannot tell which you made, and it may be another "
                             f"still. They are: {options}.")
        if code in told:
            lines.append(f"[{code}] Told above, at your {listed([f'`{name}`' for name in told[code]])} "
                         f"step{'s' if len(told[code]) > 1 else ''}: the same mistake reaches this step's numbers.")
            continue
        info = describe(code, step.id)
        where = ""
        if seen.get(code):
            labels = list(dict.fromkeys(seen[code]))  # a step of two functions has two example cases
            where = f" (on {', '.join(labels[:3])}{', …' if len(labels) > 3 else ''})"
        what = info.what.rstrip(".") + where + "."
        lines.append(f"[{code}] {what[0].upper()}{what[1:]}")
        if code not in carried:
            lines.append(f"  Where to look: {looks.get(code, info.look)} Reread {info.section or step.section}.")
    return lines


UNREACHED = "unreached"
"""In place of a step's status "not_implemented", for its feedback only: its functions were never
defined because the notebook cells holding their defs stopped with an error before them."""
DISCARDED = "discarded"
"""Likewise, where their defs are in `%%timeit` cells, whose bindings IPython discards."""
_NEVER = {UNREACHED: ("a cell stopped before its def", "a cell stopped before their defs"),
          DISCARDED: ("its def is in a `%%timeit` cell", "their defs are in `%%timeit` cells")}


def step_feedback(step: Step, status: str, passed: int, total: int, codes: list[str],
                  shown_call: str | None, detail: str, root_causes: dict[str, str],
                  told: dict[str, list[str]] | None = None, alternatives: list[tuple] = (),
                  looks: dict[str, str] | None = None, seen: dict[str, list[str]] | None = None) -> str:
    """The full feedback for one step.

    `root_causes` maps each earlier step this one builds on, and that should be fixed first, to its
    status; they are named before anything else. `told` maps the codes those steps already explain
    to the steps that do: each is named here, once, and sent back there for its explanation.
    """
    if status == "passed":
        return f"{step.title}: all {total} cases pass."
    lines = []
    unwritten = [name for name, state in root_causes.items() if state == "not_implemented"]
    wrong = [name for name, state in root_causes.items() if state not in ("not_implemented", *_NEVER)]
    if wrong:
        lines.append(_root_line(wrong, "wrong (see above)", "fix"))
    if unwritten:
        lines.append(_root_line(unwritten, "not implemented yet", "write"))
    for never, (one, _) in _NEVER.items():
        names = [name for name, state in root_causes.items() if state == never]
        if names:
            lines.append(_root_line(names, f"never defined, as {one} (see above)", "fix"))
    if status in _NEVER and not root_causes:
        lines.append(f"{step.title}: never defined ({', '.join(step.functions)}): {_NEVER[status][0]} (see below).")
    elif status in ("not_implemented", *_NEVER) and not root_causes:
        lines.append(f"{step.title}: not implemented yet ({', '.join(step.functions)}).")
    else:
        lines.append(f"{step.title}: {passed} of {total} cases pass.")
    if shown_call:
        lines.append(f"Called {shown_call}.")
    if detail:
        lines.append(detail)
    lines.extend(diagnosis_lines([code for code in codes if code != "not-implemented"], step, frozenset(),
                                 alternatives, looks, seen, told))
    # each section once, though a code's may name two ("§15.5 and §15.8")
    named = " ".join([describe(code, step.id).section or "" for code in codes] + [step.section])
    sections = sorted(set(re.findall(r"§[\d.]*\d", named)) or {step.section},
                      key=lambda name: [int(part) for part in re.findall(r"\d+", name)])
    lines.append(f"The task: {step.task} Reread {', '.join(sections)}.")
    return "\n".join(lines)


def carried_feedback(step: Step, sources: list[str], codes: list[str], total: int,
                     replaced: list[str] | None = None, unwritten: str | None = None, per_example: bool = False,
                     through: str | None = None, on_exceptions: bool = False) -> str:
    """A step that keeps its points because an earlier step's mistake alone explains its numbers:
    the mistake is explained where it was made, and named here in one line.

    `replaced`: the functions that were replaced by the chapter's when the step was called again
    (None: a model of the earlier mistake reproduced its numbers); `unwritten`: why the earlier
    steps have no functions, rather than wrong ones: "not_implemented" (not written yet), UNREACHED
    (a notebook cell stopped before their defs) or DISCARDED (defined in `%%timeit` cells only). What went wrong may be wrong numbers or exceptions (an
    earlier function that fails on the step's input), so the line speaks of neither. `through`: the
    step whose values, as the student wrote them, explain this one's, where that step's own work
    checks out and the mistake is the earlier one's (`sources`). `on_exceptions`: carried on its
    exceptions alone (every failing call raised as the earlier step's code does), until called again."""
    steps = ", ".join(f"`{name}`" for name in sources)
    plural = "s" if len(sources) > 1 else ""
    named = ", ".join(code for code in codes if code != "not-implemented")
    # Several failing steps replaced together, called again: the step passes with all of them
    # replaced at once; that shows they account for its numbers together, not that each of them
    # does (one may fail only on what this step never hands it, a read-only argument say): so "one or
    # more". A model of the named mistakes, composed, reproduces them all.
    cause = (f"your {steps} step{plural}, never defined as {_NEVER[unwritten][1 if plural else 0]}"
             if unwritten in _NEVER else
             f"your {steps} step{plural}, not written yet" if unwritten else
             f"the mistakes in the failing steps it builds on, your {steps} steps" if plural and replaced is None else
             f"one or more of the failing steps it builds on, your {steps} steps" if plural else
             f"the mistake in your {steps} step")
    cause += f", carried through your `{through}` step" if through else ""
    cause += f" ({named})" if named and not unwritten else ""
    if replaced is None:
        how = "with those as you wrote them" if plural else "with that as you wrote it"
    else:
        how = f"called again with the chapter's {listed([f'`{name}`' for name in replaced])} in place of yours"
    then = (f"{'Write' if unwritten == 'not_implemented' else 'Fix'} {'them' if plural else 'it'} there (see "
            f"above) and this step follows.")
    checks = f"{how}, your own work here checks out on all {total} cases"
    if on_exceptions:  # every failing call raised where the earlier step's code raises: nothing else ran
        checks = "on every case it failed, it raised what that step's code raises, and nothing of its own shows a mistake"
    if per_example:  # the same function, on a batch: what it does to one sequence is what goes wrong
        again = (f"called again with the chapter's {listed([f'`{name}`' for name in replaced])} in place of yours, "
                 f"on the whole batch and on each example alone, your function returns for each example what it "
                 f"returns for it within the batch" if replaced else
                 "called again on each example of the batch alone, your function returns what it returned for that "
                 "example within the batch")
        checks = f"{again}, on all {total} cases: your own work here, carrying the batch axis through, checks out"
    return (f"{step.title}: full marks, the error carried forward.\n"
            f"What goes wrong here comes from {cause}; {checks}. {then}")


def listed(items) -> str:
    """Items in a sentence: "a", "a and b", "a, b and c"."""
    items = [str(item) for item in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _root_line(names: list[str], state: str, verb: str) -> str:
    quoted = ", ".join(f"`{name}`" for name in names)
    if len(names) > 1:
        return (f"Your {quoted} steps are {state}; the chapter's solution of this step builds on them, so {verb} "
                f"those first.")
    return f"Your {quoted} step is {state}; the chapter's solution of this step builds on it, so {verb} that first."


def raised_text(kind: str, message: str, where: str | None) -> str:
    """`kind: message (where)` of an exception the submission raised: its own words (a class it
    named, a message it wrote), each kept to one line of plain characters, so that they can pass
    neither for a line of the grader's nor for a terminal's control sequence."""
    text = f"{printable(kind, one_line=True)}: {printable(message, one_line=True)}"
    return text + (f" ({printable(where, one_line=True)})" if where else "")


def stopped_cells(stopped: list[dict], missing: set[str] | frozenset = frozenset()) -> str:
    """Why a notebook may lack a function: the cells that stopped with an error, each of which ran
    only up to the line that raised, as in Jupyter; for each, the functions of `missing` (never
    defined) that it would have defined had it run to the end."""
    lines = ["A cell of your notebook stopped with an error, so what came after that line in it never ran:"
             if len(stopped) == 1 else
             f"{len(stopped)} cells of your notebook stopped with an error, so what came after those lines never ran:"]
    for raised in stopped:
        line = f"  {raised_text(raised['type'], raised['message'], raised.get('where'))}"
        never = [name for name in raised.get("defines", ()) if name in missing]
        if never:
            line += f"; the rest of that cell would have defined {', '.join(f'`{name}`' for name in never)}"
        lines.append(line)
    if any(raised["type"] == "ModuleNotFoundError" for raised in stopped):
        lines.append("Only numpy and Python's standard library are there when a notebook is graded: keep other "
                     "imports (plotting, say) in cells of their own.")
    return "\n".join(lines)
