"""Public checks: does your attention head reproduce the chapter's worked example?

Whether a check passes depends on Example 15.1 of Chapter 15 (the three positions red, key and .)
or one of the chapter's exercise situations, nothing else. `pytest` in this folder runs one check
per graded step on attention_head.py, or on the code cells of attention_head.ipynb (all but the
checks and the plot, run in order as the hidden graders run them) when there is no attention_head.py; the notebook's check cells call `check` directly. Passing them is a good
sign, not a grade: the hidden graders try other shapes, large scores, batches and other situations.

The step list (ids, titles, chapter sections, functions) comes from steps.json and the example's
values from chapter_example.json, both next to this file. Beside them, known_mistakes.json.gz
(gzipped JSON) holds, for each step, a few more public calls (a second small example, a square one,
a batch, other exercise situations) and what each mistake the hidden graders know returns on each
of them. When a check fails, your
functions are called on those too, and a mistake is named, in the hidden graders' words, only
where your numbers are that mistake's on every one of the step's public calls; where several
mistakes fit equally well, all of them are named as possibilities, and where more than three do,
none is. A step built on an earlier step whose check fails names nothing: fix that one first.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import gzip
import importlib.util
import json
import math
import sys
import textwrap
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np

HERE = Path(__file__).resolve().parent
MODULE = "attention_head.py"
NOTEBOOK = "attention_head.ipynb"
SKIPPED_CELL_ROLES = ("check", "plot")  # the notebook's code cells a grader skips; it runs all others
ATOL = 1e-9  # absolute tolerance of every comparison
CALL_SECONDS = 10
"""How long one call on the chapter's example may run (where the system can stop it): far more
than any correct function needs, so only a loop that never ends reaches it."""
SHOWN_MISMATCHES = 5  # how many differing elements a message lists
WRAP = 76  # a check cell's line length: nbgrader's Validate indents by 4 and cuts lines near 90
SLIP_RTOL, SLIP_ATOL = 1e-6, 1e-8  # how closely a wrong value must match a known mistake's
MOST_ALTERNATIVES = 3  # mistakes that fit equally well; when more do, none is named


# --- what the checks read -----------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    id: str
    """The step id, as in the grader's results."""
    title: str
    """A short heading."""
    section: str
    """The chapter section to reread."""
    functions: tuple[str, ...]
    """The functions the step calls."""
    uses: tuple[str, ...] = ()
    """Earlier steps whose functions a typical solution calls."""


@functools.cache
def steps() -> dict[str, Step]:
    """The graded steps in order, read from steps.json."""
    table = json.loads((HERE / "steps.json").read_text(encoding="utf-8"))
    return {row["id"]: Step(row["id"], row["title"], row["section"], tuple(row["functions"]),
                            tuple(row["uses"])) for row in table["steps"]}


def step_ids() -> list[str]:
    return list(steps())


@functools.cache
def answer_names() -> tuple[str, ...]:
    """The module-level strings that hold the written answers in a .py submission."""
    table = json.loads((HERE / "steps.json").read_text(encoding="utf-8"))
    return tuple(row["name"] for row in table["answers"])


@functools.cache
def known_mistakes() -> dict:
    """For each step: its public calls, what each known mistake returns on each, and the mistakes'
    explanations (see _named_mistake)."""
    try:  # gzipped JSON (every student's folder holds a copy); without it, checks name no mistake
        with gzip.open(HERE / "known_mistakes.json.gz", "rt", encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, EOFError, ValueError):
        return {}


@functools.cache
def example() -> SimpleNamespace:
    """Example 15.1 and the exercise situations, as float64 arrays (read-only)."""
    data = json.loads((HERE / "chapter_example.json").read_text(encoding="utf-8"))
    arrays = {**data["inputs"], **data["exact"], **data["values"]}
    ex = SimpleNamespace(**{name: _frozen(rows) for name, rows in arrays.items()})
    ex.exercises = data["exercises"]
    return ex


def _frozen(rows) -> np.ndarray:
    array = np.array(rows, dtype=np.float64)
    array.flags.writeable = False
    return array


# --- outcomes -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    step: str
    """The step id."""
    status: str
    """"passed", "failed" or "not_implemented"."""
    message: str
    """What went wrong and where to look; empty when the step passed."""


class _Problem(Exception):
    """Ends a check: the submission did something other than the chapter."""
    status = "failed"


class _NotImplemented(_Problem):
    status = "not_implemented"


class _TooSlow(BaseException):
    """Raised into a call that ran past CALL_SECONDS (a BaseException, so `except Exception` in
    the student's loop does not swallow it)."""


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Stop the call inside after `seconds`, where a timer signal can (Unix, the main thread);
    elsewhere the call just runs."""
    import signal
    import threading

    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(_signum, _frame):
        raise _TooSlow()

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- calling the student's code -----------------------------------------------------------------

@dataclass(frozen=True)
class _Arg:
    label: str
    """How the argument is shown in messages, e.g. "Q" or "rows=[0]"."""
    value: object
    keyword: str | None = None


def _call(namespace: dict, name: str, *args: _Arg):
    """Call `name` with copies of the arguments; return (result, the call as text).

    Copies keep the chapter's arrays safe; comparing them afterwards shows whether the function
    changed an argument it was given.
    """
    call = f"{name}({', '.join(arg.label for arg in args)})"
    function = namespace.get(name)
    if function is None:
        raise _NotImplemented(f"there is no function named {name}.")
    if not callable(function):
        raise _Problem(f"{name} is {_describe(function)}, not a function.")
    given = [np.array(arg.value) if isinstance(arg.value, np.ndarray) else copy.deepcopy(arg.value)
             for arg in args]
    for value in given:  # read-only, as the hidden graders hand them: writing into one raises there
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
    positional = [value for arg, value in zip(args, given) if arg.keyword is None]
    keywords = {arg.keyword: value for arg, value in zip(args, given) if arg.keyword is not None}
    try:
        with _time_limit(CALL_SECONDS):
            result = function(*positional, **keywords)
    except _TooSlow:
        raise _Problem(f"Called {call}; it was still running after {CALL_SECONDS} s, so it was stopped: "
                       f"look for a loop that never ends.") from None
    except NotImplementedError:
        raise _NotImplemented(f"calling {call} raised NotImplementedError: {name}, or a function "
                              f"it calls, is still a stub.") from None
    except ValueError as error:
        if "read-only" in str(error):
            raise _Problem(f"Called {call}; it wrote into an argument it was given ({_error_text(error)}). "
                           f"Work on new arrays and leave the ones you are given as they were.") from None
        raise _Problem(f"Called {call}; it raised {_error_text(error)}.") from None
    except (Exception, SystemExit) as error:
        raise _Problem(f"Called {call}; it raised {_error_text(error)}.") from None
    for arg, value in zip(args, given):
        if not _unchanged(arg.value, value):
            raise _Problem(f"Called {call}; it changed its argument {arg.label.split('=')[0]}. "
                           f"Work on new arrays and leave the ones you are given as they were.")
    return result, call


def _unchanged(original, given) -> bool:
    if isinstance(original, np.ndarray):
        return (isinstance(given, np.ndarray) and given.shape == original.shape
                and bool(np.array_equal(given, original)))
    return given == original


def _error_text(error: BaseException) -> str:
    """The exception's type and message, and the student's line it came from when we know it."""
    text = f"{type(error).__name__}: {error}"
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if Path(frame.filename).name.startswith(Path(MODULE).stem)]
    if frames:
        text += f" (at {Path(frames[-1].filename).name}, line {frames[-1].lineno})"
    return text


def _describe(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, np.ndarray):
        if type(value) is np.ndarray:
            return f"an array of shape {value.shape}"
        return f"an ndarray subclass ({type(value).__name__}) of shape {value.shape}"
    if isinstance(value, str):
        return f"a string {value[:40]!r}"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


# --- judging what came back ---------------------------------------------------------------------

def _array(value, what: str, call: str) -> np.ndarray:
    """`value` as a float64 array, as the hidden graders read it (np.matrix and longdouble are
    array-likes too); None, a string or a dict is a wrong type."""
    wrong = value is None or isinstance(value, (str, bytes, dict))
    array = None
    if not wrong:
        try:
            array = np.asarray(value)
        except Exception:
            wrong = True
        else:
            wrong = array.dtype.kind not in "biuf"
    if wrong:
        raise _Problem(f"Called {call}; {what} came back as {_describe(value)}, which is the "
                       f"wrong type: expected a numpy array of numbers.")
    return array.astype(np.float64)


def _parts(value, names: tuple[str, ...], call: str) -> tuple:
    """Unpack a returned tuple (a list is accepted) of the expected length."""
    expected = f"a tuple of {len(names)} ({', '.join(names)})"
    if not isinstance(value, (tuple, list)):
        raise _Problem(f"Called {call}; it returned {_describe(value)}, but the tests expected {expected}.")
    if len(value) != len(names):
        raise _Problem(f"Called {call}; it returned {_describe(value)} of {len(value)} items, but the tests "
                       f"expected {expected}.")
    return tuple(value)


def _same(actual, expected: np.ndarray, what: str, call: str, source: str) -> None:
    """Compare an array with the chapter's, and explain any difference in numpy's manner."""
    array = _array(actual, what, call)
    report = mismatch_report(array, expected)
    if report:
        raise _Problem(f"Called {call}; {what} came back different from {source}.\n{report}")


def mismatch_report(actual: np.ndarray, expected: np.ndarray, atol: float = ATOL) -> str:
    """Explain how `actual` differs from `expected`, or return "" when they agree within atol.

    Shape first, then how many elements differ, the first few indices with the returned and the
    expected value, the largest error, and both arrays.
    """
    lines = []
    if actual.shape != expected.shape:
        lines.append(f"  shape {actual.shape}, expected {expected.shape}")
    else:
        bad = ~np.isclose(actual, expected, rtol=0.0, atol=atol)
        if not bad.any():
            return ""
        count, size = int(bad.sum()), expected.size
        lines.append(f"  shape {actual.shape}, as expected")
        lines.append(f"  mismatched elements: {count} / {size} ({100 * count / size:.1f}%) "
                     f"beyond atol {atol:g}")
        lines.append("  first mismatches [index]: returned, expected")
        for index in list(zip(*np.nonzero(bad)))[:SHOWN_MISMATCHES]:
            position = ", ".join(str(int(i)) for i in index)
            lines.append(f"    [{position}]: " + ", ".join(_digits(float(actual[index]), float(expected[index]))))
        with np.errstate(invalid="ignore"):
            errors = np.abs(actual - expected)
        if np.isfinite(errors).all():
            worst = np.unravel_index(int(np.argmax(errors)), errors.shape)
            position = ", ".join(str(int(i)) for i in worst)
            lines.append(f"  largest absolute error: {float(errors[worst]):.3g} at [{position}]")
        else:
            lines.append("  largest absolute error: not finite (the returned array holds NaN "
                         "or inf)")
    lines.append(f"  returned:\n{_show(actual)}")
    lines.append(f"  expected:\n{_show(expected)}")
    return "\n".join(lines)


def _digits(returned: float, expected: float) -> tuple[str, str]:
    """Both numbers to six significant digits, or as many more as it takes to tell them apart."""
    for digits in (6, 9, 12, 17):
        shown = (f"{returned:.{digits}g}", f"{expected:.{digits}g}")
        if shown[0] != shown[1]:
            return shown
    return shown


def _show(array: np.ndarray) -> str:
    if array.size > 60:
        return f"    (an array of shape {array.shape}, too large to show)"
    with np.printoptions(precision=6, suppress=True):
        text = np.array2string(array, separator=", ")
    return "\n".join("    " + line for line in text.splitlines())


def _dict_with(value, keys: tuple[str, ...], call: str) -> None:
    if not isinstance(value, dict):
        raise _Problem(f"Called {call}; it returned {_describe(value)}, but the tests expected a "
                       f"dict.")
    missing = [key for key in keys if key not in value]
    if missing:
        raise _Problem(f"Called {call}; the dict has no {', '.join(missing)}.")


def _flag(value, call: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise _Problem(f"Called {call}; it returned {_describe(value)}, which is the wrong type: "
                       f"expected True or False.")
    return bool(value)


def _whole(value, what: str, call: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise _Problem(f"Called {call}; {what} came back as {_describe(value)}: expected an int.")
    return int(value)


# --- one check per step -------------------------------------------------------------------------

def _parameters(ex) -> tuple[_Arg, ...]:
    """The example's three W matrices, as the head's last three arguments."""
    return _Arg("W_Q", ex.W_Q), _Arg("W_K", ex.W_K), _Arg("W_V", ex.W_V)


def _same_output_and_weights(out, call: str, ex) -> None:
    """The (o, a) pair of attention or of the head, against the chapter's O and Table 15.1."""
    o, a = _parts(out, ("o", "a"), call)
    _same(o, ex.O, "the output o", call, "the chapter's O")
    _same(a, ex.A, "the weights a", call, "the chapter's weights A (Table 15.1)")


def _check_qkv(ns: dict, ex) -> None:
    out, call = _call(ns, "project_qkv", _Arg("X", ex.X), *_parameters(ex))
    q, k, v = _parts(out, ("q", "k", "v"), call)
    _same(q, ex.Q, "q", call, "the chapter's Q = X W_Q")
    _same(k, ex.K, "k", call, "the chapter's K = X W_K")
    _same(v, ex.V, "v", call, "the chapter's V = X W_V")


def _check_scores(ns: dict, ex) -> None:
    d, call = _call(ns, "scores", _Arg("Q", ex.Q), _Arg("K", ex.K))
    _same(d, ex.D, "the score matrix d", call, "the chapter's D = Q Kᵀ")


def _check_scale(ns: dict, ex) -> None:
    d_k = ex.Q.shape[-1]
    s, call = _call(ns, "scale", _Arg("D", ex.D), _Arg(str(d_k), d_k))
    _same(s, ex.S, "s", call, f"the chapter's S = D / √{d_k}")


def _check_softmax(ns: dict, ex) -> None:
    a, call = _call(ns, "softmax_rows", _Arg("S", ex.S))
    _same(a, ex.A, "the weights a", call, "the chapter's weights A (Table 15.1)")


def _check_mix(ns: dict, ex) -> None:
    o, call = _call(ns, "mix", _Arg("A", ex.A), _Arg("V", ex.V))
    _same(o, ex.O, "the output o", call, "the chapter's O = A V")


def _check_attention(ns: dict, ex) -> None:
    out, call = _call(ns, "attention", _Arg("Q", ex.Q), _Arg("K", ex.K), _Arg("V", ex.V))
    _same_output_and_weights(out, call, ex)


def _check_head(ns: dict, ex) -> None:
    out, call = _call(ns, "self_attention_head", _Arg("X", ex.X), *_parameters(ex))
    _same_output_and_weights(out, call, ex)


def _check_batch(ns: dict, ex) -> None:
    # Example 15.1 stacked with a copy scaled by 2: each slice must be what the head gives alone.
    batch = np.stack([ex.X, 2 * ex.X])  # [2, T, d_in]
    out, call = _call(ns, "self_attention_head", _Arg("np.stack([X, 2 * X])", batch),
                      *_parameters(ex))
    o, a = _parts(out, ("o", "a"), call)
    o, a = _array(o, "the output o", call), _array(a, "the weights a", call)
    t, d_v = ex.O.shape
    for array, name, shape in ((o, "the output o", (2, t, d_v)), (a, "the weights a", (2, t, t))):
        if array.shape != shape:
            raise _Problem(f"Called {call}; {name} has shape {array.shape}, expected {shape}: "
                           f"one result per example, stacked along a leading batch axis.")
    _same(o[0], ex.O, "slice 0 of o", call, "the chapter's O")
    _same(a[0], ex.A, "slice 0 of a", call, "the chapter's weights A (Table 15.1)")
    alone, alone_call = _call(ns, "self_attention_head", _Arg("2 * X", 2 * ex.X), *_parameters(ex))
    o_alone, a_alone = _parts(alone, ("o", "a"), alone_call)
    o_alone, a_alone = _array(o_alone, "the output o", alone_call), _array(a_alone, "the weights a", alone_call)
    for array, name, shape in ((o_alone, "the output o", (t, d_v)), (a_alone, "the weights a", (t, t))):
        if array.shape != shape:  # then no slice can be compared with it
            raise _Problem(f"Called {alone_call}, one sequence alone, to compare slice 1 of the batch "
                           f"with; {name} has shape {array.shape}, expected {shape}.")
    _same(o[1], o_alone, "slice 1 of o", call, f"the output of {alone_call} run alone")
    _same(a[1], a_alone, "slice 1 of a", call, f"the weights of {alone_call} run alone")


def _check_ex1(ns: dict, ex) -> None:
    expected = ex.exercises["ex1_zero_query"]
    out, call = _call(ns, "zero_query_mixture", _Arg("K", ex.K), _Arg("V", ex.V))
    weights, output = _parts(out, ("weights", "output"), call)
    source = f"the mixture a query of {expected['query']} receives (exercise 1)"
    _same(weights, np.array(expected["weights"]), "weights", call, source)
    _same(output, np.array(expected["output"]), "output", call, source)


def _check_ex2(ns: dict, ex) -> None:
    valid, call = _call(ns, "is_attention_weights", _Arg("A", ex.A))
    if not _flag(valid, call):
        raise _Problem(f"Called {call} with Table 15.1's weights; it returned False, but the tests "
                       f"expected True: every row is non-negative and sums to one.")
    columns, call = _call(ns, "is_attention_weights", _Arg("A.T", ex.A.T))
    if _flag(columns, call):
        sums = np.array2string(ex.A.sum(axis=0), precision=6, separator=", ")
        raise _Problem(f"Called {call}, Table 15.1 transposed so that every column sums to one; it "
                       f"returned True, but the tests expected False: its rows sum to {sums}.")
    matrix, call = _call(ns, "column_normalized_counterexample")
    c = _array(matrix, "the matrix", call)
    if c.shape != (3, 3):
        raise _Problem(f"Called {call}; it returned shape {c.shape}, expected (3, 3).")
    with np.printoptions(precision=8, suppress=True):
        column_sums = np.array2string(c.sum(axis=0), separator=", ")
    facts = (f"\n  returned:\n{_show(c)}\n  column sums: {column_sums}"
             f"\n  first-row sum: {float(c[0].sum())!r}")
    if not (c >= 0).all():
        raise _Problem(f"Called {call}; some entries are negative, expected none.{facts}")
    if not np.allclose(c.sum(axis=0), 1.0, rtol=0.0, atol=ATOL):
        raise _Problem(f"Called {call}; not every column sums to one.{facts}")
    if math.isclose(c[0].sum(), 1.0, rel_tol=0.0, abs_tol=ATOL):
        raise _Problem(f"Called {call}; its first row sums to one, so receiver 1 still gets a "
                       f"valid mixture. The tests expected a first row that is not one.{facts}")


def _check_ex3(ns: dict, ex) -> None:
    situation = ex.exercises["ex3_value_shift"]
    shift, rows = np.array(situation["shift"], dtype=np.float64), list(situation["rows"])
    whole = np.array(situation["whole_shift_output"])
    partial = np.array(situation["row1_shift_output"])
    shown = str(situation["shift"])
    every, call = _call(ns, "shifted_output", _Arg("A", ex.A), _Arg("V", ex.V), _Arg(shown, shift))
    _same(every, whole, "the output", call, f"O after adding {shown} to every value row")
    some, call = _call(ns, "shifted_output", _Arg("A", ex.A), _Arg("V", ex.V), _Arg(shown, shift),
                       _Arg(f"rows={rows}", rows, "rows"))
    _same(some, partial, "the output", call, f"O after adding {shown} to value row(s) {rows} only")
    change, call = _call(ns, "output_change", _Arg("A", ex.A), _Arg(shown, shift))
    _same(change, whole - ex.O, "the change", call, "the change when every value row moves")
    change, call = _call(ns, "output_change", _Arg("A", ex.A), _Arg(shown, shift),
                         _Arg(f"rows={rows}", rows, "rows"))
    _same(change, partial - ex.O, "the change", call, f"the change when only row(s) {rows} move")


def _check_ex4(ns: dict, ex) -> None:
    facts = ex.exercises["ex4_shapes"]
    t, d_k, d_v = facts["t"], facts["d_k"], facts["d_v"]
    out, call = _call(ns, "head_facts", _Arg(str(t), t), _Arg(str(d_k), d_k), _Arg(str(d_v), d_v))
    _dict_with(out, ("divisor", "score_shape", "output_shape", "softmax_axis"), call)
    divisor = out["divisor"]
    if isinstance(divisor, (bool, np.bool_)) or not isinstance(divisor, (int, float, np.number)):
        raise _Problem(f"Called {call}; divisor came back as {_describe(divisor)}: expected a "
                       f"float.")
    if not math.isclose(float(divisor), facts["divisor"], rel_tol=0.0, abs_tol=ATOL):
        raise _Problem(f"Called {call}; divisor is {divisor!s}, expected "
                       f"{facts['divisor']!r}.")
    for key in ("score_shape", "output_shape"):
        shape = out[key]
        if not isinstance(shape, (tuple, list)):
            raise _Problem(f"Called {call}; {key} came back as {_describe(shape)}: expected a "
                           f"tuple.")
        if [_whole(n, key, call) for n in shape] != list(facts[key]):
            raise _Problem(f"Called {call}; {key} is {tuple(shape)}, expected {tuple(facts[key])}.")
    axis = _whole(out["softmax_axis"], "softmax_axis", call)
    if axis not in (-1, 1):  # for a [T, T] score matrix the last axis is both -1 and 1
        raise _Problem(f"Called {call}; softmax_axis is {axis}, expected {facts['softmax_axis']} "
                       f"(the last axis: across the keys of each receiving row).")


def _check_ex5(ns: dict, ex) -> None:
    zeros = np.zeros_like(ex.W_V)
    out, call = _call(ns, "value_intervention", _Arg("X", ex.X), *_parameters(ex),
                      _Arg(f"np.zeros({zeros.shape})", zeros))
    expected = {"weights_before": (ex.A, "Table 15.1"), "weights_after": (ex.A, "Table 15.1"),
                "output_before": (ex.O, "the chapter's O"),
                "output_after": (np.zeros_like(ex.O), "zeros: W_V = 0 makes every value row zero")}
    _dict_with(out, tuple(expected), call)
    for key, (array, source) in expected.items():
        _same(out[key], array, key, call, source)


CHECKS = {
    "qkv": _check_qkv,
    "scores": _check_scores,
    "scale": _check_scale,
    "softmax": _check_softmax,
    "mix": _check_mix,
    "attention": _check_attention,
    "head": _check_head,
    "batch": _check_batch,
    "ex1_zero_query": _check_ex1,
    "ex2_row_normalization": _check_ex2,
    "ex3_value_shift": _check_ex3,
    "ex4_shapes": _check_ex4,
    "ex5_intervention": _check_ex5,
}


def run_step(step_id: str, namespace: dict) -> Outcome:
    """Run one step's public check against the names in `namespace`.

    When it fails, and every earlier step it builds on passes its own check with the functions in
    `namespace`, the message names the mistakes whose values the step's functions give on every
    public call of the step (see _named_mistake); when an earlier step fails, it says to fix that
    one first and names nothing: what this step shows may be that step's mistake.
    """
    step = steps()[step_id]
    reread = f"Reread {step.section} ({step.title})."
    if step_id not in CHECKS:
        return Outcome(step_id, "failed", f"{step_id}: the public checks have no check for this "
                                          f"step.")
    problem = _problem(step_id, namespace)
    if problem is None:
        return Outcome(step_id, "passed", "")
    if isinstance(problem, _NotImplemented):
        return Outcome(step_id, problem.status,
                       f"{step_id}: not implemented yet: {problem}\n{reread}")
    earlier = _failing_earlier_steps(step, namespace)
    if earlier:
        return Outcome(step_id, problem.status, f"{step_id}, as the chapter solves it, builds on "
                                                f"{', '.join(earlier)}: fix that first.\n{step_id}: {problem}\n{reread}")
    off = _off_elsewhere(step, namespace) or _head_step_failing(step, namespace)
    if off:
        return Outcome(step_id, problem.status, f"{step_id}: {problem}\n{off}\n{reread}")
    named = _named_mistake(step_id, namespace)
    return Outcome(step_id, problem.status, f"{step_id}: {problem}\n{named}{reread}")


def _problem(step_id: str, namespace: dict) -> _Problem | None:
    """What the step's check found wrong, or None when it passes."""
    try:
        CHECKS[step_id](namespace, example())
    except _Problem as problem:
        return problem
    return None


def _all_uses(step_id: str) -> list[str]:
    """Every earlier step `step_id` builds on, directly or through another, earliest first."""
    found: list[str] = []
    for used in steps()[step_id].uses:
        for inner in _all_uses(used) + [used]:
            if inner not in found:
                found.append(inner)
    return found


def _failing_earlier_steps(step: Step, namespace: dict) -> list[str]:
    """Of the steps `step` builds on (directly or not) whose checks do not pass with the functions
    in `namespace`, those not built on another such step: where to start fixing."""
    failing = [used for used in _all_uses(step.id) if _problem(used, namespace) is not None]
    return [used for used in failing if not set(_all_uses(used)) & set(failing)]


def _head_step_failing(step: Step, namespace: dict) -> str:
    """For an exercise: a sentence on the steps of the head whose checks fail, or "".

    An exercise's code may call the head's functions, though the chapter's does not (a shifted
    output mixed with the student's own `mix`). The hidden graders then call the exercise again with
    the chapter's functions in their place, and where that passes, carry the mistake forward from
    the head's step rather than name one here. The self-check cannot call the chapter's functions,
    so where one of those steps fails it names no mistake here either."""
    head = _all_uses("head") + ["head"]
    if step.id in head or step.id == "batch":
        return ""
    failing = [used for used in head if used not in _all_uses(step.id) and _problem(used, namespace) is not None
               and _may_call(namespace, step.functions, steps()[used].functions)]
    failing = [used for used in failing if not set(_all_uses(used)) & set(failing)]  # where to start fixing
    if not failing:
        return ""
    return (f"Your {', '.join(failing)} check{'s fail' if len(failing) > 1 else ' fails'} too: if your code "
            f"for {step.id} calls {'them' if len(failing) > 1 else 'it'}, fix {'those' if len(failing) > 1 else 'that'} "
            f"first. Until then this check names no mistake here: the hidden graders may carry the mistake "
            f"forward from there.")


# Names through which code may reach a function without naming it.
_DYNAMIC = frozenset({"globals", "locals", "vars", "getattr", "eval", "exec", "__import__", "sys", "importlib",
                      "__dict__", "__builtins__", "inspect"})


def _may_call(namespace: dict, names, targets) -> bool:
    """Could the module's functions `names` call one of `targets`, directly or through other
    functions of the module? Read from their code: the global names it looks up (nested functions
    and comprehensions included), and the functions held in closures and defaults. Anything this
    cannot read (a callable object, a name looked up dynamically) counts as a call."""
    wanted = {id(namespace[name]) for name in targets if callable(namespace.get(name))}
    seen, todo = set(), [namespace.get(name) for name in names]
    while todo:
        function = todo.pop()
        if id(function) in seen or function is None:
            continue
        seen.add(id(function))
        if id(function) in wanted:
            return True
        code = getattr(function, "__code__", None)
        if code is None:
            if callable(function) and not isinstance(function, type(len)):  # a builtin calls nothing of ours
                return True
            continue
        codes, looked_up = [code], set()
        while codes:
            current = codes.pop()
            looked_up.update(current.co_names)
            codes.extend(const for const in current.co_consts if hasattr(const, "co_names"))
        if looked_up & (_DYNAMIC | set(targets)):
            return True
        held = list(function.__defaults__ or ()) + list((function.__kwdefaults__ or {}).values())
        for cell in function.__closure__ or ():
            try:
                held.append(cell.cell_contents)
            except ValueError:  # an empty cell
                pass
        todo += [namespace.get(name) for name in looked_up if callable(namespace.get(name))]
        todo += [value for value in held if callable(value)]
    return bool(wanted & seen)  # none of them reached: a call would have returned above


BATCHED = frozenset({"softmax_rows", "self_attention_head"})
"""The functions whose docstrings accept a batch ([..., T, T], [B, T, d_in]); the others take 2-D
arrays, and the hidden graders call them with nothing else in their own steps."""


def _off_elsewhere(step: Step, namespace: dict) -> str:
    """A sentence on the first function of the steps `step` builds on that passes its check on the
    chapter's example but not some further public example of its step (a batch, one position); or "".

    The hidden graders see such a function fail, and then name no mistake in a step built on it:
    what the step shows may be that function's doing (a softmax written for 2-D scores only, say).
    So the self-check names none either, and says where to look first.
    """
    tables = known_mistakes().get("steps", {})
    for used in _all_uses(step.id):
        for call in (tables.get(used) or {}).get("calls", ()):
            if call["function"] not in BATCHED and any(np.ndim(arg["array"]) > 2 for arg in call["args"]
                                                       if isinstance(arg, dict) and "array" in arg):
                continue  # a batch its docstring does not promise to take (the head hands it one)
            seen = _seen(namespace, call)
            if seen.kind == "value" and _right(call, seen.value):
                continue
            shapes = ", ".join(str(tuple(np.shape(arg["array"]))) for arg in call["args"]
                               if isinstance(arg, dict) and "array" in arg)
            return (f"{step.id}, as the chapter solves it, builds on {call['function']}, which passes its own "
                    f"check on the chapter's example but not on a further public example (arrays of shapes "
                    f"{shapes}); fix that first. "
                    f"Until then this check names no mistake here: the hidden graders, seeing it fail, may "
                    f"name none either.")
    return ""


# --- naming a mistake ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Seen:
    """What one public call of the student's function gave."""
    kind: str
    """"value", "raised", or "stop" (not written, too slow, or it changed an argument)."""
    value: object = None
    """The value returned, or "Type: message" of the exception raised."""


def _argument(data):
    """A public call's argument from its JSON form: arrays are tagged, everything else is as is."""
    if isinstance(data, dict) and "array" in data:
        return np.array(data["array"], dtype=np.float64)
    return copy.deepcopy(data)


def _seen(namespace: dict, call: dict) -> _Seen:
    function = namespace.get(call["function"])
    if not callable(function):
        return _Seen("stop")
    given = [_argument(arg) for arg in call["args"]]
    kept = [_argument(arg) for arg in call["args"]]
    # numpy's warnings on an example the student is never shown would only puzzle; but what the
    # student asked numpy to do (np.seterr(all="raise"), say) stays as asked, as in the hidden graders
    try:
        with _time_limit(CALL_SECONDS), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            result = function(*given)
    except (_TooSlow, NotImplementedError):
        return _Seen("stop")
    except (Exception, SystemExit) as error:
        return _Seen("raised", f"{type(error).__name__}: {error}")
    if not all(_unchanged(old, new) for old, new in zip(kept, given)):
        return _Seen("stop")  # it changed an argument: its values say nothing of a mistake
    return _Seen("value", result)


def _named_mistake(step_id: str, namespace: dict) -> str:
    """The mistakes of the hidden graders that the step's functions reproduce on every public call
    of the step, explained; or "".

    Judged function by function, as the hidden graders judge: a mistake fits a function when, on
    each of the step's public calls of it that the hidden graders make too (a batch only into a
    function whose docstring takes one), the function returns what the mistake returns (the
    reference's value where it is right, the mistake's where it is wrong, within 1e-6), or raises
    the very exception the mistake raises; and at least one of those is a wrong value, not only an
    exception. Hand-written slips come before edits derived from the reference, and a slip of a
    stage before one of the whole result, as the hidden graders rank them. A function that changed
    an argument, or did not return in time, names nothing; neither do more than three mistakes
    that fit equally well.
    """
    known = known_mistakes()
    table = known.get("steps", {}).get(step_id)
    if not table or not table["models"]:
        return ""
    # Only the calls the hidden graders make too: a batch into a function whose docstring takes
    # 2-D arrays only (`scores`, say) could tell apart mistakes the hidden graders cannot, and then
    # name one they would not.
    calls = table["calls"]
    seen = [_seen(namespace, call) if _promised(call) else None for call in calls]
    if any(one is not None and one.kind == "stop" for one in seen):
        return ""
    whole_result = set(known.get("whole_result", ()))
    found: list[list[str]] = []
    for function in dict.fromkeys(call["function"] for call in calls):
        every = [i for i, call in enumerate(calls) if call["function"] == function]  # what a way indexes
        kept = [at for at, i in enumerate(every) if seen[i] is not None]
        mine = [every[at] for at in kept]
        right = {i: seen[i].kind == "value" and _right(calls[i], seen[i].value) for i in mine}
        if all(right.values()):
            continue
        # the reference's numbers in another shape: as the hidden graders do, no edit inside a
        # function the reference calls is named for it (it would name a line never written)
        wrong = [i for i in mine if not right[i]]
        reshaped = all(seen[i].kind == "value" and _reshaped(seen[i].value, calls[i]["reference"]) for i in wrong)
        fits = [entry["codes"] for entry in table["models"].values() if entry["function"] == function
                and not (reshaped and entry.get("inside"))
                and any(_fits(_kept_of(way, kept), [calls[i] for i in mine], [seen[i] for i in mine],
                              [right[i] for i in mine]) for way in entry["ways"])]
        codes = list(dict.fromkeys(code for group in fits for code in group))
        slips = [code for code in codes if not code.startswith("derived-")]
        # Where the chapter's example raised, every call the hidden graders find failing may have
        # raised too, and then they name the chapter's slips alone: so does this.
        codes = slips if slips or (seen[every[0]] is not None and seen[every[0]].kind == "raised") else codes
        codes = [code for code in codes if code not in whole_result] or codes
        if codes:
            found.append(codes)
    if not found or any(len(codes) > MOST_ALTERNATIVES for codes in found):
        return ""
    explanations = table["explanations"]
    lines = []
    for codes in found:
        if len(codes) == 1:
            lines += ["On every public example of this step your code returns (or raises) what a known "
                      "mistake does; the hidden graders call it:", explanations[codes[0]]]
        else:
            lines += [f"On these public examples your numbers fit each of these mistakes: {', '.join(codes)}. "
                      f"They cannot tell them apart; each, in the hidden graders' words:"]
            lines += [explanations[code] for code in codes]
    return "\n".join(lines) + "\n"


def _promised(call: dict) -> bool:
    """Is this a call the function's docstring promises to take: no batch, unless it is one of BATCHED?"""
    return call["function"] in BATCHED or not any(np.ndim(arg["array"]) > 2 for arg in call["args"]
                                                  if isinstance(arg, dict) and "array" in arg)


def _kept_of(way, kept: list[int]):
    """A way a mistake goes, on the calls `kept` alone (their places among the function's calls)."""
    if isinstance(way, list):
        return [way[i] for i in kept]
    return {"outcomes": [way["outcomes"][i] for i in kept], "near": [way["near"][i] for i in kept]}


def _fits(way, calls: list[dict], seen: list[_Seen], right: list[bool]) -> bool:
    """Does one way a mistake can go give what the student's function gave on every call, with at
    least one wrong value among them (an exception alone says too little)?"""
    outcomes, near = (way, [0.0] * len(way)) if isinstance(way, list) else (way["outcomes"], way["near"])
    verdicts = [_fits_call(call, one, ok, index, close)
                for call, one, ok, index, close in zip(calls, seen, right, outcomes, near)]
    return all(verdicts) and "value" in verdicts


def _fits_call(call: dict, one: _Seen, ok: bool, index: int, close: float) -> str:
    """How one call fits a mistake's outcome `index` there: "same" (both the reference's value),
    "raised" (the same exception), "value" (the same wrong value), or "" (it does not fit)."""
    if index == -1:  # the mistake gives the reference's value here
        return "same" if ok else ""
    if index < 0 or ok:
        return ""
    outcome = call["outcomes"][index]
    if isinstance(outcome, dict) and "raises" in outcome:
        return "raised" if one.kind == "raised" and one.value == outcome["raises"] else ""
    agrees = one.kind == "value" and _agrees(one.value, outcome, SLIP_RTOL, SLIP_ATOL, True, close or None)
    return "value" if agrees else ""


def _reshaped(returned, reference) -> bool:
    """Is what the student returned the reference's numbers, some part in another shape (another
    layout of the same numbers, or the reference's broadcast to more axes)?"""
    if isinstance(reference, dict):  # a dict's parts, by name (none: not the dict asked for)
        whole = isinstance(returned, dict) and set(reference) <= set(returned)
        pairs = [(returned[key], reference[key]) for key in reference] if whole else []
    elif isinstance(returned, (tuple, list)) and isinstance(reference, list) and len(returned) == len(reference):
        pairs = list(zip(returned, reference))  # a tuple's parts, in order
    else:
        pairs = [(returned, reference)]
    verdicts = [_part_reshaped(part, want) for part, want in pairs] or ["other"]
    return "other" not in verdicts and "moved" in verdicts


def _part_reshaped(part, want) -> str:
    """"same" (the reference's part), "moved" (its numbers in another shape) or "other"."""
    try:
        got, want = np.asarray(part, dtype=np.float64), np.asarray(want, dtype=np.float64)
        kind = "same" if got.shape == want.shape else "moved"
        if got.size == want.size:
            got = got.reshape(want.shape)
        else:
            want = np.broadcast_to(want, got.shape)
    except (TypeError, ValueError, OverflowError):
        return "other"
    return kind if np.allclose(got, want, rtol=ATOL, atol=ATOL) else "other"


def _right(call: dict, value) -> bool:
    """Is `value` what the chapter's reference gives on this public call, as the checks judge?"""
    if call["function"] == "column_normalized_counterexample":
        try:
            c = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            c = np.zeros(0)
        return (c.shape == (3, 3) and bool(np.isfinite(c).all() and (c >= 0).all())
                and bool(np.allclose(c.sum(axis=0), 1.0, rtol=0.0, atol=ATOL))
                and not math.isclose(c[0].sum(), 1.0, rel_tol=0.0, abs_tol=ATOL))
    return _agrees(value, call["reference"], ATOL, ATOL, False)


def _agrees(returned, value, rtol: float, atol: float, equal_nan: bool, near: float | None = None) -> bool:
    """Does what the student returned equal `value` (JSON data) within the tolerance, read as the
    hidden graders read it? Given `near`, the distance of a mistake's values from the reference's
    when that is small, every number must also lie within a tenth of it."""
    if isinstance(value, dict):
        return isinstance(returned, dict) and all(
            key in returned and (_same_axis(returned[key], item) if key == "softmax_axis"
                                 else _agrees(returned[key], item, rtol, atol, equal_nan, near))
            for key, item in value.items())
    if isinstance(value, bool):
        return isinstance(returned, (bool, np.bool_)) and bool(returned) == value
    numeric = not (returned is None or isinstance(returned, (bool, np.bool_, str, bytes, dict)))
    try:
        got, want = np.asarray(returned, dtype=np.float64), np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):  # parts of different shapes (or an int past any
        # float, which no number the graders compare with equals): compare them one by one
        return (isinstance(returned, (tuple, list)) and isinstance(value, list) and len(returned) == len(value)
                and all(_agrees(part, item, rtol, atol, equal_nan, near) for part, item in zip(returned, value)))
    with np.errstate(all="ignore"):
        close = numeric and got.shape == want.shape and bool(np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=equal_nan))
        if close and near is not None:
            finite = np.isfinite(got) & np.isfinite(want)
            close = not finite.any() or float(np.max(np.abs(got - want)[finite])) <= 0.1 * near
    return close


def _same_axis(got, want: int) -> bool:
    """On a [T, T] matrix, 1 and -1 name the same axis, as do 0 and -2."""
    same = {1: -1, -2: 0}
    return (isinstance(got, (int, np.integer)) and not isinstance(got, (bool, np.bool_))
            and same.get(int(got), int(got)) == same.get(want, want))


def empty_answers(namespace: dict) -> list[str]:
    """The written answers that are missing, not strings, or still blank."""
    return [name for name in answer_names()
            if not isinstance(namespace.get(name), str) or not namespace[name].strip()]


class CheckFailed(AssertionError):
    """A notebook check that did not pass. It is still an error to Jupyter, nbgrader's Validate
    and autograde, but IPython shows only its message: the frames would be this file's, not
    the student's, and would push the explanation off the screen."""

    def _render_traceback_(self) -> list[str]:
        # Wrapped to fit nbgrader's Validate report, which cuts longer lines off with "...".
        first, *rest = str(self).splitlines() or [""]
        lines = [f"✗ {first}", *rest]
        wrapped = [part for line in lines for part in textwrap.wrap(
            line, width=WRAP, subsequent_indent=" " * (len(line) - len(line.lstrip()) + 2),
            break_on_hyphens=False) or [""]]
        first_lines = len(textwrap.wrap(lines[0], width=WRAP, subsequent_indent="  ")) or 1
        return [f"\x1b[1;31m{line}\x1b[0m" if i < first_lines else line
                for i, line in enumerate(wrapped)]


def check(step_id: str, *functions) -> None:
    """For the notebook: run one step's check on the given functions.

    Prints one line when they reproduce the chapter; raises CheckFailed with the explanation
    when they do not. A function of an earlier step that this one builds on is looked up among
    the notebook's names, so that the message can say which step to fix first.
    """
    step = steps()[step_id]
    if len(functions) != len(step.functions):
        raise TypeError(f"check({step_id!r}, ...) takes the step's functions, in this order: "
                        f"{', '.join(step.functions)}")
    caller = sys._getframe(1).f_globals  # the notebook's names, when a cell calls this
    outcome = run_step(step_id, {**caller, **dict(zip(step.functions, functions))})
    if outcome.status != "passed":
        raise CheckFailed(outcome.message) from None
    verb = "matches" if len(functions) == 1 else "match"
    print(f"✓ {step.id}: {' and '.join(step.functions)} {verb} the chapter's example "
          f"({step.section})")


# --- finding the submission ---------------------------------------------------------------------

@dataclass
class Submission:
    path: Path | None
    """The file the checks ran on."""
    namespace: dict
    """The names it defines."""
    error: str = ""
    """Why it could not be loaded, if it could not."""
    stopped: tuple = ()
    """A notebook's cells that stopped with an error, each as a line: where, and what it raised."""
    unreached: frozenset = frozenset()
    """The graded functions a notebook never defined because the cell holding their def stopped first."""
    discarded: frozenset = frozenset()
    """The graded functions a notebook defines only in `%%timeit` cells, whose definitions IPython discards."""

    @property
    def kind(self) -> str:
        return "notebook" if self.path is not None and self.path.suffix == ".ipynb" else "module"


def submission_path(folder: Path = HERE) -> Path | None:
    """attention_head.py when it exists, otherwise attention_head.ipynb, otherwise None."""
    for name in (MODULE, NOTEBOOK):
        if (folder / name).exists():
            return folder / name
    return None


def load_submission(path: Path | None = None) -> Submission:
    """Load `path`, or the submission in this folder (see submission_path)."""
    path = path or submission_path()
    if path is None:
        return Submission(None, {}, f"there is no {MODULE} or {NOTEBOOK} in {HERE}.")
    if not path.is_file():
        return Submission(path, {}, f"there is no file {path}.")
    if path.suffix not in (".py", ".ipynb"):
        return Submission(path, {}, f"{path.name} is neither a .py module nor an .ipynb notebook.")
    stopped: list[str] = []
    unreached: set[str] = set()
    discarded: set[str] = set()
    started = time.monotonic()
    try:
        namespace = (_load_notebook(path, stopped, unreached, discarded) if path.suffix == ".ipynb"
                     else _load_module(path))
    except (Exception, SystemExit) as error:
        return Submission(path, {}, f"{path.name} could not be loaded: {_error_text(error)}.")
    took = time.monotonic() - started
    if took > IMPORT_SECONDS:
        return Submission(path, {}, f"{path.name} took {took:.0f} s to load (every cell it runs, for a notebook), more "
                                    f"than the {IMPORT_SECONDS:.0f} s the hidden graders allow: they would grade "
                                    f"nothing. Move slow experiments out of it.")
    return Submission(path, namespace, stopped=tuple(stopped), unreached=frozenset(unreached),
                      discarded=frozenset(discarded))


IMPORT_SECONDS = 10.0
"""How long the hidden graders let a module, or a notebook's cells, take to load."""
ALLOWED = frozenset(getattr(sys, "stdlib_module_names", ())) | {"numpy", "__future__"}
"""What the hidden graders' Python can import: numpy and the standard library, nothing else."""


def _graders_builtins() -> dict:
    """Python's builtins with an `import` that finds only what the hidden graders' Python has: a
    student's `import matplotlib` raises here as it raises there, whatever this machine holds."""
    import builtins

    real = builtins.__import__

    def graders_import(name, globals=None, locals=None, fromlist=(), level=0):
        top = name.partition(".")[0]
        if level == 0 and ALLOWED and top not in ALLOWED:
            raise ModuleNotFoundError(f"No module named {top!r} where the hidden graders run your code "
                                      f"(numpy and Python's standard library only)", name=top)
        return real(name, globals, locals, fromlist, level)

    return {**vars(builtins), "__import__": graders_import}


def _load_module(path: Path) -> dict:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    module.__builtins__ = _graders_builtins()
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return vars(module)


def _load_notebook(path: Path, stopped: list, unreached: set | None = None, discarded: set | None = None) -> dict:
    """Run the notebook's code cells in order, in one namespace, as the hidden graders do: every
    one but the checks, the plot and nbgrader's test cells, a cell that raises stopping itself only
    (each such cell is added to `stopped`, with the graded functions it would have defined and that
    were never defined, which are added to `unreached`; a `%%timeit` cell's body binds into a
    namespace of its own, as IPython runs it, and the graded functions it alone defines are added
    to `discarded`). Lines of IPython's magics and shell escapes are skipped, as the graders skip
    them. Cells are numbered among all the notebook's cells, from 1."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells", []), list):
        raise ValueError("it is not a notebook (no list of cells)")
    namespace = {"__name__": path.stem, "__builtins__": {**_graders_builtins(), "get_ipython": _NoIPython}}
    failed = []  # (the line saying where and what it raised, the names it binds) of each cell that stopped
    timed = {}  # what the %%timeit cells bound, each in a namespace of its own
    for number, cell in enumerate(notebook.get("cells", []), 1):
        if not isinstance(cell, dict):
            continue
        metadata = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
        qkv = metadata.get("qkv") if isinstance(metadata.get("qkv"), dict) else {}
        nbgrader = metadata.get("nbgrader") if isinstance(metadata.get("nbgrader"), dict) else {}
        if (cell.get("cell_type") != "code" or qkv.get("role") in SKIPPED_CELL_ROLES
                or (nbgrader.get("grade") and not nbgrader.get("solution"))):
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        magic = _cell_magic(source)
        if magic is not None and magic not in RUNS_ITS_BODY:
            continue  # its body is not Python (%%writefile, %%bash, %%html): the graders leave it out
        # IPython runs a %%timeit cell's body binding into a namespace of its own: what it defines is gone after
        apart = magic == "timeit"
        source = _as_python(source, magic)
        where = f"{path.name}, cell {number}"
        code = None
        try:
            code = compile(source, where, "exec")
            if apart:
                kept = {}
                exec(code, namespace, kept)
                timed.update(kept)
            else:
                exec(code, namespace)
        except (Exception, SystemExit) as error:
            failed.append((f"cell {number}: {_error_text(error)}", _binds(code, source)))
    graded = {name for step in steps().values() for name in step.functions}
    if discarded is not None:
        discarded.update(name for name in timed if name in graded and name not in namespace)
    for line, binds in failed:
        never = [name for name in binds if name in graded and name not in namespace]
        if unreached is not None:
            unreached.update(never)
        stopped.append(line + (f"; the rest of that cell would have defined {', '.join(never)}" if never else ""))
    return namespace


RUNS_ITS_BODY = frozenset({"time", "timeit", "capture", "prun"})
"""Cell magics whose body is Python that Jupyter runs, as the hidden graders read them; a cell
starting with any other is left out."""


def _cell_magic(source: str) -> str | None:
    """The cell magic a cell starts with, on its first line that is not blank, or None."""
    first = next((line for line in source.splitlines() if line.strip()), "")
    if not first.startswith("%%"):
        return None
    words = first[2:].split()
    return words[0] if words else ""


def _as_python(source: str, magic: str | None) -> str:
    """A cell as the Python the hidden graders run: its cell magic's line passed over, and its line
    magics, shell escapes (`files = !ls` too) and help requests (`np.exp?`) rewritten by IPython's
    own transformer, each of them then doing nothing. Without IPython, such lines are skipped."""
    lines = source.splitlines(keepends=True)
    start = next((index for index, line in enumerate(lines) if line.strip()), len(lines))
    lines = lines[start:]
    if magic is not None:
        lines[0] = "pass\n"  # the body, on the lines where it was written
    source = "".join(lines)
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return "\n".join(line[:len(line) - len(line.lstrip())] + "pass" if line.lstrip()[:1] in ("%", "!")
                         else line for line in source.split("\n"))
    try:
        return TransformerManager().transform_cell(source)
    except Exception as error:  # IPython gives up on some cells: so does Jupyter
        return f"raise SyntaxError({('IPython could not read this cell (%s)' % type(error).__name__)!r})\n"


class _NoIPython:
    """What `get_ipython()` gives a cell here: every magic and shell escape does nothing, as where
    the hidden graders run it."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def _binds(code, source: str) -> list[str]:
    """The names a cell binds at its top level (a def, an import, an assignment), read from its
    bytecode; where it would not compile, the names of its `def` lines."""
    if code is None:
        return [line.lstrip()[4:].split("(")[0].strip() for line in source.splitlines()
                if line.lstrip().startswith("def ")]
    import dis

    return [op.argval for op in dis.get_instructions(code) if op.opname in ("STORE_NAME", "STORE_GLOBAL")]
