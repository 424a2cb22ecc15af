"""The judge: turns what a submission returned into per-step scores, statuses and diagnoses.

It runs in the grader's own process and never touches submission code: its inputs are the plain
values the runner brought back. Expected values come from the reference solution, run here on
the same inputs.

Scoring: a step's points are split evenly across its cases. A case passes when every call in it
returns the right types and shapes, matches the reference within 1e-9 (absolute and relative),
and leaves its arguments unchanged. The step's status is `passed` (every case), `partial` (some),
`failed` (none), `not_implemented` (every call still raises NotImplementedError), `timeout` (a
call ran past its limit) or `error` (a crash, an exit call, or a module that would not import).

Diagnoses: faults and changed arguments come from the runner. Wrong values are compared with the
models in `diagnoses.py`, each run on the same inputs: a model that reproduces the failures and
contradicts no passing call names the mistake. A step built on an earlier failing step first tries
that step's diagnosis, passed through the reference's own calls, so a mistake is named the same way
wherever it shows and the feedback points to where it was made. Single slips are tried first; only
when none explains the failures does the search go on to compositions of two, screened on one wrong
value and pruned by shape before they run, or, where only exceptions are left, screened on the
student's very exception (a correct submission never reaches the search). What no model explains
is reported by its look: right on the example only, the wrong shape, NaN or infinity,
float32-sized errors in numbers a float32 can hold, or an exception.
"""
from __future__ import annotations

import inspect
import itertools
import math
import operator
import re
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import numpy as np

from . import atlas, derived, diagnoses, feedback
from .cases import Case
from .protocol import Bad, plain_text
from .results import StepResult, printable
from .runner import EXACT, Outcome, Run
from .steps import BY_ID, SETUP_ARRAYS, STEPS, Step

# The models run on every hidden case, empty ones too (weights of no rows): numpy's warnings of a
# mean of nothing, or a variance of one number, say nothing here that the values do not.
warnings.filterwarnings("ignore", category=RuntimeWarning, module="numpy")

RTOL = ATOL = 1e-9
MODEL_RTOL, MODEL_ATOL = 1e-6, 1e-8

# What each function returns: ("array", name), ("tuple", names), ("dict", names), ("bool",), ("facts",).
RETURNS: dict[str, tuple] = {
    "project_qkv": ("tuple", ("q", "k", "v")),
    "scores": ("array", "d"),
    "scale": ("array", "s"),
    "softmax_rows": ("array", "a"),
    "mix": ("array", "o"),
    "attention": ("tuple", ("o", "a")),
    "self_attention_head": ("tuple", ("o", "a")),
    "zero_query_mixture": ("tuple", ("weights", "output")),
    "is_attention_weights": ("bool",),
    "column_normalized_counterexample": ("array", "counterexample"),
    "shifted_output": ("array", "output"),
    "output_change": ("array", "change"),
    "head_facts": ("facts",),
    "value_intervention": ("dict", ("weights_before", "weights_after", "output_before", "output_after")),
}
FACTS = ("divisor", "score_shape", "output_shape", "softmax_axis")
NOT_IMPLEMENTED = ("NotImplementedError", "MissingName")


class WrongType(Exception):
    pass


# ------------------------------------------------------------------ reading returned values ------


def _as_array(value, name: str, limit: int | None = None) -> np.ndarray:
    """`value` as a float64 array. Given `limit`, the elements of the array expected, a value
    holding more (which cannot have the shape expected) is never converted: an array becomes a
    stand-in of its shape holding no data, a list is refused. So the judge holds at most what the
    reference holds per call, however narrow the dtype the value came in (a uint8 array of 8 MiB
    would be 64 MiB of float64)."""
    if limit is not None and isinstance(value, np.ndarray) and value.dtype != np.float64 and value.size > limit:
        return np.broadcast_to(np.float64(np.nan), value.shape)  # only its shape is ever read
    if limit is not None and isinstance(value, (list, tuple)) and _numbers(value, limit) > limit:
        raise WrongType(f"{name} holds more numbers than the array expected ({limit})")
    if isinstance(value, Bad):
        raise WrongType(f"{name} has type {value.type}, not a plain numpy array")
    if value is None:
        raise WrongType(f"{name} is None; did you forget a `return`?")
    if isinstance(value, bool):
        raise WrongType(f"{name} is a bool, not an array")
    if isinstance(value, np.ndarray):
        return value.astype(np.float64, copy=False)  # as it came (read-only) when already float64
    if isinstance(value, (list, tuple, int, float)):
        try:
            return np.asarray(_plain(value), dtype=np.float64)
        except (TypeError, ValueError):
            raise WrongType(f"{name} is a {type(value).__name__} that is not a rectangular array of numbers")
    raise WrongType(f"{name} has type {type(value).__name__}, not numpy.ndarray")


def _numbers(value, limit: int) -> int:
    """How many numbers a nested list or tuple holds, its arrays' elements included; counting stops
    past `limit`."""
    count, todo = 0, [value]
    while todo and count <= limit:
        item = todo.pop()
        if isinstance(item, (list, tuple)):
            todo.extend(item)
        else:
            count += item.size if isinstance(item, np.ndarray) else 1
    return count


def _plain(value):
    if isinstance(value, Bad) or value is None:
        raise TypeError
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _as_shape(value, name: str) -> tuple:
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                               and float(v).is_integer() for v in value):
        return tuple(int(v) for v in value)
    raise WrongType(f"{name} should be a tuple of ints, got {_kind(value)}")


def loose_value(value, limit: int | None = None) -> dict | None:
    """A value of the wrong type read as plainly as it allows: one float array (a bare array where
    a tuple was due), or a tuple or list of them (a tuple of the wrong length); None for anything
    else, or for more numbers than `limit`. Models that return the same wrong structure are
    compared with it."""
    parts = value if isinstance(value, (tuple, list)) else (value,)
    if not parts or not all(isinstance(part, np.ndarray) and part.dtype.kind in "fiub" for part in parts):
        return None
    if limit is not None and sum(part.size for part in parts) > limit:
        return None
    if isinstance(value, np.ndarray):
        return {"whole": value.astype(np.float64)}
    return {f"part {n}": part.astype(np.float64) for n, part in enumerate(parts)}


def _kind(value) -> str:
    return value.type if isinstance(value, Bad) else type(value).__name__


def canonical(fn: str, value, expected: dict | None = None) -> dict:
    """The returned value as a dict of named parts; raises WrongType for anything unusable.

    `expected`, the reference's canonical value, bounds the elements converted (see _as_array)."""
    spec = RETURNS[fn]
    sizes = {name: part.size for name, part in (expected or {}).items() if isinstance(part, np.ndarray)}
    if spec[0] == "array":
        return {spec[1]: _as_array(value, spec[1], sizes.get(spec[1]))}
    if spec[0] == "tuple":
        names = spec[1]
        if not isinstance(value, (tuple, list)):
            raise WrongType(f"expected a tuple {tuple(names)}, got {_kind(value)}".replace("'", ""))
        if len(value) != len(names):
            raise WrongType(f"expected a tuple of {len(names)} ({', '.join(names)}), got {len(value)} items")
        return {name: _as_array(item, name, sizes.get(name)) for name, item in zip(names, value)}
    if spec[0] == "dict":
        if not isinstance(value, dict):
            raise WrongType(f"expected a dict with keys {', '.join(spec[1])}, got {_kind(value)}")
        missing = [name for name in spec[1] if name not in value]
        if missing:
            raise WrongType(f"the dict is missing {', '.join(missing)}")
        return {name: _as_array(value[name], name, sizes.get(name)) for name in spec[1]}
    if spec[0] == "bool":
        if isinstance(value, bool):
            return {"value": value}
        raise WrongType(f"expected True or False, got {_kind(value)}")
    if not isinstance(value, dict):
        raise WrongType(f"expected a dict with keys {', '.join(FACTS)}, got {_kind(value)}")
    missing = [name for name in FACTS if name not in value]
    if missing:
        raise WrongType(f"the dict is missing {', '.join(missing)}")
    divisor = value["divisor"]
    if isinstance(divisor, bool) or not isinstance(divisor, (int, float)):
        raise WrongType(f"divisor should be a float, got {_kind(divisor)}")
    axis = value["softmax_axis"]
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise WrongType(f"softmax_axis should be an int, got {_kind(axis)}")
    return {"divisor": float(divisor), "score_shape": _as_shape(value["score_shape"], "score_shape"),
            "output_shape": _as_shape(value["output_shape"], "output_shape"), "softmax_axis": axis}


def allclose(got: np.ndarray, want: np.ndarray, rtol: float, atol: float, equal_nan: bool = False,
             keep: bool = True) -> bool:
    """np.allclose for same-shaped float arrays, without its overhead (it runs thousands of times).

    `want` is an array kept for the whole class (a reference value, a model's value): the
    tolerance of each of its elements is worked out once. As in numpy, a finite number is never
    close to an infinity, equal infinities are, and NaN is only given `equal_nan`. Grading runs
    under np.errstate(all="ignore"), so infinities cost no warning here. `keep=False`: `want` is
    one student's, so its tolerance is not kept.
    """
    known = _TOLERANCES.get(id(want)) if keep else (want, rtol, atol, _tolerance(want, rtol, atol))
    if keep and (known is None or known[0] is not want or known[1] != rtol or known[2] != atol):
        want.flags.writeable = False  # its tolerance stays true to it: nothing may write into it
        known = (want, rtol, atol, _tolerance(want, rtol, atol))
        _TOLERANCES[id(want)] = known
        _HELD[0] += known[3].nbytes + _ARRAY_BYTES  # unlocked: see _shared
    ok = np.abs(got - want) <= known[3]
    if _count(ok) == ok.size:  # ok.all(), at a third of the cost
        return True
    ok |= got == want  # equal infinities
    if equal_nan:
        ok |= np.isnan(got) & np.isnan(want)
    return _count(ok) == ok.size


def _tolerance(want: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    # only equality, in allclose, is close to an infinity; a 0-d array gives a 0-d array too
    return np.where(np.isfinite(want), np.abs(want) * rtol + atol, -1.0)


_count = np.count_nonzero

# The tolerance of each element of a kept array: id -> (array, rtol, atol, tolerances). The array
# is held, so its id stays its own while it is here.
_TOLERANCES: dict[int, tuple] = {}

# The judge's caches of model values (below) are kept for the whole class: they grow with the
# distinct mistakes a class shows, never with the number of its submissions. What they hold is
# counted in bytes as it is added (_HELD): the arrays of the distinct values (_SHARED_VALUES) and of
# their tolerances (_TOLERANCES), each with its Python objects, and a measured cost for every entry
# that points at them. Once that reaches _MOST_BYTES, every cache starts afresh before the next step
# begins, so the memory they take is bounded. The bound is a threshold, not a ceiling: a step under
# way finishes first (though once the caches are full it keeps no more pairs of edits). It is set
# below what a mistake-heavy class of two hundred fills (some 30 MiB as counted), so that classes of
# two hundred and of thousands both empty their caches and reach the same fullness: what their peak
# memories still differ by grows beside the caches (the index of results written, pages a refilling
# cannot reuse). The counted bytes overstate what the caches take in memory (about 18 MiB of
# objects for those 30). Nothing a submission is graded on depends on what the caches hold.
_MOST_BYTES = 16 << 20
_HELD = [0]  # bytes of the values and tolerances added since the caches were last emptied
_ENTRY_BYTES = 300  # an entry of a cache of models' values: its key, its tuple, the dict's slot
_ARRAY_BYTES = 112  # an array's own object, beside its data
_VALUE_BYTES = 400  # a value's dict and its key in _SHARED_VALUES, beside its arrays


def held() -> int:
    """The bytes the caches hold, as counted (see above)."""
    entries = sum(len(cache) for cache in (_MODEL_VALUES, _MODEL_RAW, _LOOSE_VALUES, _TOLERANCES,
                                           _EFFECTS, _DIFFERS, _CARRIED, _EXPLAINED))
    return _HELD[0] + entries * _ENTRY_BYTES


def _full() -> bool:
    return held() >= _MOST_BYTES


# A step being graded reads back what it put in the caches (a model's value, the object of the wrong
# type it returned), so the caches are never emptied under it, in this thread or another: while
# they are full, a step does not begin until none is being graded, and the last step to end
# empties them. So as a step begins the caches hold less than the bound, and a step adds to them
# only what it computes itself.
_STEPS = threading.Condition()
_RUNNING = [0]


@contextmanager
def _step_running():
    with _STEPS:
        while _full() and _RUNNING[0]:
            _STEPS.wait()
        if _full():
            forget()
        _RUNNING[0] += 1
    try:
        yield
    finally:
        with _STEPS:
            _RUNNING[0] -= 1
            if _full() and not _RUNNING[0]:
                forget()
                _STEPS.notify_all()


def forget() -> None:
    """Empty the class-wide caches of model values (each is filled again as it is needed)."""
    for cache in (_MODEL_VALUES, _MODEL_RAW, _LOOSE_VALUES, _SHARED_VALUES, _TOLERANCES, _EFFECTS,
                  _DIFFERS, _PRUNED, _RAISING, _CARRIED, _EXPLAINED):
        cache.clear()
    _HELD[0] = 0
    atlas.forget()
    # The models made for the mistakes this class met go too: kept, they would pin the pages their
    # neighbours in the emptied caches held, and each refill would take fresh pages beside them.
    for made in (diagnoses.through_reference, diagnoses._pipeline, derived._pair, derived._pair_model):
        made.cache_clear()
    _give_back()


_TRIM: list = []


def _give_back() -> None:
    """Return the pages the emptied caches held to the system (glibc's malloc_trim), so that filling
    them again takes fresh pages in their place rather than beside them: without it, a large class
    that empties its caches twenty times ends up holding some 50 MiB more than a class of 200."""
    if not _TRIM:
        try:
            import ctypes

            _TRIM.append(ctypes.CDLL(None).malloc_trim)
        except (OSError, AttributeError, TypeError):  # not glibc: its allocator is left as it is
            _TRIM.append(None)
    if _TRIM[0] is not None:
        _TRIM[0](0)


def isclose(got: float, want: float, rtol: float, atol: float) -> bool:
    """np.isclose for two numbers, in plain Python."""
    got, want = float(got), float(want)
    return got == want or abs(got - want) <= atol + rtol * abs(want)


def differences(actual: dict, expected: dict, public: bool, rtol=RTOL, atol=ATOL, describe: bool = True) -> list[str]:
    """Every way `actual` differs from `expected` (both canonical); empty when they agree.

    With describe=False only the names of the differing parts are listed, which is much cheaper.
    """
    found = []
    for name, want in expected.items():
        got = actual.get(name)
        if isinstance(want, np.ndarray):
            if got.shape != want.shape or not allclose(got, want, rtol, atol):
                found.append(feedback.array_mismatch(got, want, public, name) if describe and rtol == RTOL else name)
        elif name == "softmax_axis":
            if got not in ((1, -1) if want == -1 else (want,)):
                found.append(f"softmax_axis is {_shown(got, public)}"
                             + (f", expected {want!r}" + (" (or 1)" if want == -1 else "") if public else ""))
        elif name == "divisor":
            if not isclose(got, want, rtol, atol):
                found.append(f"divisor is {_shown(got, public)}" + (f", expected {want!r}" if public else ""))
        elif got != want:
            found.append(f"{name} is {_shown(got, public)}" + (f", expected {want!r}" if public else ""))
    return found


_SHOWN_ON_HIDDEN = 4
"""The most numbers of a returned shape quoted on a hidden case (a shape of four axes)."""


def _shown(value, public: bool = True) -> str:
    """A returned value as feedback shows it: its repr, cut short (a shape may be 10 000 numbers long).

    On a hidden case, as every number quoted there, each number to six significant digits at most
    and a shape's first four alone: the digits of what a submission returns could otherwise spell
    the hidden values it was handed (a float's bits as an int), case after case."""
    if not public:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return _six_digits(value)
        if isinstance(value, tuple) and all(isinstance(n, int) and not isinstance(n, bool) for n in value):
            shown = [_six_digits(n) for n in value[:_SHOWN_ON_HIDDEN]]
            more = ", …" if len(value) > _SHOWN_ON_HIDDEN else "," if len(value) == 1 else ""
            return f"({', '.join(shown)}{more})"
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"


def _six_digits(number) -> str:
    """A number in six significant digits at most: a small int as it is, any other in `.6g`."""
    return str(number) if isinstance(number, int) and abs(number) < 10 ** 6 else feedback._fmt(number)


# ------------------------------------------------------------------ grading one step ------------


@dataclass
class _CallVerdict:
    ok: bool
    kind: str  # ok, mismatch, wrong-type, raised, not-implemented, fault, skipped
    detail: str = ""
    codes: list[str] = field(default_factory=list)
    """What the runner saw for itself: a fault, a changed argument, NotImplementedError."""
    actual: dict | None = None
    raised: str | None = None
    """The type name of the exception the call raised."""
    raised_message: str = ""
    """Its message, as the runner brought it back."""
    raised_in: str | None = None
    """The submission's function the exception came from, when the runner could tell."""
    loose: dict | None = None
    """A value of the wrong type read as plainly as it allows (see `loose_value`), for the models."""
    nonfinite: bool = False
    shape: bool = False
    arrays: list | None = None
    """The (returned, expected) array pairs of a wrong value, for `close` and `float32`."""
    describe: Callable | None = None
    """Writes how the value differs, numpy-style; called only for the call the feedback shows."""
    note: str = ""
    """A further remark, such as which arguments the call changed."""
    raw: object = None
    """What a call of the wrong type returned, as it came: a model may return the very same."""

    def close(self) -> bool:
        """Is every array within float32-sized errors of the reference's (1e-4)?"""
        return bool(self.arrays) and all(got.shape == want.shape and allclose(got, want, 1e-4, 1e-6)
                                         for got, want in self.arrays)

    def close16(self) -> bool:
        """Is every array within float16-sized errors of the reference's: about 1e-3 of each number,
        or of the array's largest (a dot product whose terms cancel keeps its terms' rounding)?"""
        return bool(self.arrays) and all(got.shape == want.shape and allclose(got, want, 4e-3, _half_atol(want))
                                         for got, want in self.arrays)

    def float16(self) -> bool:
        """Does a differing array hold only numbers a float16 can hold: the mark of half precision?"""
        return any(got.shape == want.shape and not allclose(got, want, RTOL, ATOL) and np.isfinite(got).all()
                   and np.array_equal(got.astype(np.float16).astype(np.float64), got)
                   for got, want in self.arrays or ())

    def float32(self) -> bool:
        """Does a differing array hold only numbers a float32 can hold: the mark of a float32
        computation? (Asked only of values no misconception explains.)"""
        return any(got.shape == want.shape and not allclose(got, want, RTOL, ATOL) and np.isfinite(got).all()
                   and np.array_equal(got.astype(np.float32).astype(np.float64), got)
                   for got, want in self.arrays or ())

    def full_detail(self) -> str:
        described = self.describe() if self.describe else ""
        return "\n".join(part for part in (self.detail, described, self.note) if part)


def _half_atol(want: np.ndarray) -> float:
    """The absolute part of the float16 tolerance of an array: its rounding, relative to its largest number."""
    return 2e-3 + 4e-3 * float(np.max(np.abs(want), initial=0.0)) if np.isfinite(want).all() else 2e-3


_RAISED_IN = re.compile(r", in (\w+)$")


def raised_in(where: str | None) -> str | None:
    """The submission's function an exception came from, read off the line the runner reports."""
    found = _RAISED_IN.search(where or "")
    return found.group(1) if found else None
_EXPECTED_KIND = {"array": "a plain numpy array", "tuple": "a tuple", "dict": "a dict", "bool": "True or False",
                  "facts": "a dict of facts"}



def _known_exceptions() -> frozenset[str]:
    """Names of the exceptions Python and numpy raise themselves: on a hidden case, only these are
    shown by name (a submission can name a class of its own after a hidden input)."""
    import builtins

    names = {name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)}
    names |= {name for name in dir(np.exceptions) if not name.startswith("_")}
    return frozenset(names | {"LinAlgError", "_ArrayMemoryError"})


KNOWN_EXCEPTIONS = _known_exceptions()
_CONTRACT_FUNCTIONS = frozenset(fn for step in STEPS for fn in step.functions)


def _hidden_raise(kind: str, raised_in: str | None, public: str = "the chapter's example") -> str:
    """What a hidden case says of an exception: its type if Python or numpy made it, and the
    student's function it came through; never its message, file, line or a class named by the
    submission, each of which the submission could spell from the hidden input."""
    shown = kind if kind in KNOWN_EXCEPTIONS else "an exception of a class of its own"
    where = f" in `{raised_in}`" if raised_in in _CONTRACT_FUNCTIONS else ""
    return f"It raised {shown}{where}; its message and line are shown only for {public}."


def _judge_call(case: Case, call_index: int, outcome: Outcome | None, expected: dict,
                public: str = "the chapter's example") -> _CallVerdict:
    """`public`: the label of the step's case whose messages are shown (the example a student runs)."""
    call = case.calls[call_index]
    if outcome is None:
        return _CallVerdict(False, "skipped", "not run: an earlier call in this step did not finish")
    if outcome.fault == "budget":
        return _CallVerdict(False, "fault", "The call was not run: the calls before it had used up the "
                            "submission's time budget.", ["time-budget"])
    if outcome.fault:
        code = {"timeout": "timeout", "exit": "exit-called", "memory": "memory-limit"}.get(outcome.fault, "crashed")
        detail = {"timeout": "it ran past the time limit", "exit": "it called exit",
                  "memory": "it ran out of memory",
                  "protocol": f"its process sent the grader something that is not a result ({outcome.detail})",
                  "lost": str(outcome.detail),
                  "disk": f"its scratch folder outgrew its quota ({outcome.detail})",
                  }.get(outcome.fault, f"its process died ({outcome.detail})")
        return _CallVerdict(False, "fault", f"The call did not finish: {detail}.", [code])
    if outcome.raised:
        kind = outcome.raised.get("type", "Exception")
        where = outcome.raised.get("where")
        came_from = raised_in(where)
        if kind in NOT_IMPLEMENTED:
            return _CallVerdict(False, "not-implemented", "", ["not-implemented"], raised=kind, raised_in=came_from)
        if kind == "ValueError" and "read-only" in outcome.raised.get("message", ""):
            # Arguments arrive read-only, so an in-place write fails right where it happens.
            # (where: the submission's own words, a function's name among them, said on the example
            # alone; on a hidden case only the contract's function it came through, as the grader knows it)
            said = where if case.public else (f"in `{came_from}`" if came_from in _CONTRACT_FUNCTIONS else "")
            return _CallVerdict(False, "mutated", "It wrote into an array it was given" + (f" ({said})" if said else "")
                                + ": arguments are read-only; work on a copy or build a new array.",
                                ["mutates-input"], raised=kind, raised_in=came_from)
        if case.public:
            message = f"It raised {feedback.raised_text(kind, outcome.raised.get('message', ''), where)}"
        else:  # the submission's own words: on a hidden case they could carry the case out
            message = _hidden_raise(kind, came_from, public)
        return _CallVerdict(False, "raised", message, raised=kind, raised_in=came_from,
                            raised_message=outcome.raised.get("message", ""))
    if outcome.value is EXACT:  # it returned exactly what the reference returns
        return _CallVerdict(True, "ok", actual=expected)
    try:
        actual = canonical(call.fn, outcome.value, expected)
    except WrongType as exc:
        text = str(exc)
        if not case.public:  # a type's name, a dtype's fields: the submission's own words, which could spell the case
            text = (f"{call.fn} returned something other than what it should ({_EXPECTED_KIND[RETURNS[call.fn][0]]}); "
                    f"what it was is shown only for {public}")
        limit = 4 * sum(part.size for part in expected.values() if isinstance(part, np.ndarray))
        text = printable(text, one_line=True)
        return _CallVerdict(False, "wrong-type", f"Wrong type: {text}" + ("" if text.endswith("?") else "."),
                            ["wrong-type"], raw=outcome.value, loose=loose_value(outcome.value, limit))
    if call.fn == "column_normalized_counterexample":
        problems = _counterexample_problems(actual["counterexample"])
        verdict = _CallVerdict(not problems, "ok" if not problems else "mismatch", "\n".join(problems), actual=actual)
    else:
        # Which parts differ is cheap; how they differ is written only for the call the feedback shows.
        found = differences(actual, expected, case.public, describe=False)
        verdict = _CallVerdict(not found, "ok" if not found else "mismatch", actual=actual)
        if found and RETURNS[call.fn][0] == "bool":
            verdict.describe = lambda: _predicate_reason(call.args[0], actual["value"])
        elif found:
            verdict.describe = lambda: "\n".join(differences(actual, expected, case.public))
            _describe(verdict, actual, expected)
    return verdict


def _predicate_reason(matrix, said: bool) -> str:
    """Which property of valid attention weights the matrix has or lacks, without its numbers."""
    a = np.asarray(matrix, dtype=float)
    if not said:
        return ("It returned False, but the matrix is valid attention weights: 2-D, every entry "
                "non-negative, and every row summing to one within 1e-9.")
    failed = []
    if a.ndim != 2:
        failed.append(f"it is {a.ndim}-D, not a 2-D matrix")
    else:
        if (a < 0).any():
            failed.append("it has a negative entry")
        if np.isnan(a).any():
            failed.append("it has an entry that is NaN")
        if not np.all(np.abs(a.sum(axis=1) - 1.0) <= 1e-9):
            failed.append("not every row sums to one within 1e-9")
    return f"It returned True, but the matrix is not valid attention weights: {'; '.join(failed)}."


def _describe(verdict: _CallVerdict, actual: dict, expected: dict) -> None:
    """Note what a wrong value looks like: the wrong shape, NaN or infinity, or merely imprecise."""
    arrays = [(actual[n], w) for n, w in expected.items() if isinstance(w, np.ndarray)]
    verdict.shape = any(got.shape != want.shape for got, want in arrays)
    verdict.nonfinite = any(got.shape == want.shape and not np.isfinite(got).all() and np.isfinite(want).all()
                            for got, want in arrays)
    verdict.arrays = arrays  # how close, and whether float32: worked out only if asked


# ------------------------------------------------------------------ misconception models ---------


def _same_part(name: str, got, want) -> bool:
    """Does one part of a returned value equal a model's, within the model tolerance?"""
    if isinstance(want, np.ndarray):
        if not isinstance(got, np.ndarray) or got.shape != want.shape:
            return False
        # Most models differ at the first, middle or last element: reject those without array work.
        for at in {0, want.size // 2, want.size - 1} if want.size else ():
            mine, model = float(got.flat[at]), float(want.flat[at])
            if abs(mine - model) > MODEL_ATOL + MODEL_RTOL * abs(model) and mine == mine:
                return False
        return allclose(got, want, MODEL_RTOL, MODEL_ATOL, equal_nan=True)
    if name == "softmax_axis":  # on a [T, T] matrix, 1 and -1 name the same axis, as do 0 and -2
        same = {1: -1, -2: 0}
        return same.get(got, got) == same.get(want, want)
    if name == "divisor":
        return isclose(got, want, MODEL_RTOL, MODEL_ATOL)
    if isinstance(want, (tuple, list)):
        return isinstance(got, tuple) and got == tuple(want)
    return got == want


def _agrees_canonical(value: dict, model: dict) -> bool:
    """Does a canonical value agree with a model's value (canonical, or a partial head_facts dict)?"""
    return all(_same_part(name, value[name], part) for name, part in model.items())


_EFFECTS: dict[tuple[int, int], tuple[dict, dict, float]] = {}


def _effect(model: dict, want: dict) -> float:
    """How far a model's value departs from the reference's: the largest finite difference, or
    infinity where the model is NaN or infinite and the reference is not (an overflow is no small
    effect, whatever its finite entries do).

    Model values and reference values are both kept for the whole class, so this is computed once
    per pair: one model value may stand for several calls (see _shared), each with its reference.
    """
    known = _EFFECTS.get((id(model), id(want)))
    if known is not None and known[0] is model and known[1] is want:
        return known[2]
    effect = 0.0
    for name, part in model.items():
        part, ref = _floats(part), _floats(want[name])
        if part is not None and ref is not None and part.shape == ref.shape:
            finite = np.isfinite(part) & np.isfinite(ref)
            if (np.isfinite(ref) & ~np.isfinite(part)).any():
                effect = np.inf
            elif finite.any():
                effect = max(effect, float(np.max(np.abs(part - ref)[finite])))
    _EFFECTS[(id(model), id(want))] = (model, want, effect)
    return effect


def _accounts_for(actual: dict, model: dict, want: dict) -> bool:
    """Is the student's departure from the reference the model's, not a smaller one of its own?

    The model tolerance lets rounding through; a slip whose own effect is that small (an epsilon of
    1e-8) would also swallow float32 noise. So the student must sit much closer to the model than
    the model sits to the reference. A large effect needs no check: agreeing within the model
    tolerance already puts the student that close.
    """
    effect = _effect(model, want)
    if effect == 0.0 or effect > 1e-3:
        return True
    for name, part in model.items():
        part, got, ref = _floats(part), _floats(actual[name]), _floats(want[name])
        if part is not None and got is not None and ref is not None and part.shape == ref.shape == got.shape:
            finite = np.isfinite(part) & np.isfinite(ref) & np.isfinite(got)
            if finite.any() and np.max(np.abs(got - part)[finite]) > 0.1 * effect:
                return False
    return True


def _floats(part) -> np.ndarray | None:
    """A part of a value as an array of floats: an array itself, or a float (exercise 4's divisor)
    as one of no axes; None for anything else (a shape, a bool)."""
    if isinstance(part, np.ndarray):
        return part
    if isinstance(part, (float, np.floating)):
        return np.asarray(part, dtype=float)
    return None


@dataclass
class _Candidate:
    """One misconception model, and what the step's calls say about it."""

    codes: tuple[str, ...]
    """One code per slip in the composition."""
    model: Callable
    carried: bool
    """An earlier step's diagnosis, carried through the reference's own calls to this step's function."""
    explains: set = field(default_factory=set)
    """Failing calls (by index) that the model reproduces: the same wrong value, or the same exception."""
    values: int = 0
    """How many of those are wrong values, or exceptions with the student's very message."""
    contradicted: bool = False
    """A call the student got right, where the model would not have."""
    key: tuple = ()
    """Identifies the model across submissions, so its value on a hidden call is computed once."""
    stopped: int | None = None
    """The call where weighing it stopped: the first it did not reproduce, or contradicted."""


# An earlier step with one of these (or failing with no code at all) returns values no model
# describes; a step built on it can then match one of its own models only by coincidence.
_UNMODELLED_VALUES = {"wrong-shape", "non-finite", "hard-coded"}


@lru_cache(maxsize=None)
def _pairs_by_codes(fn: str) -> dict[frozenset, list[tuple]]:
    """The compositions of two slips on `fn`, as (number, codes, model), by the set of their codes."""
    found: dict[frozenset, list[tuple]] = {}
    for n, (codes, _, model) in enumerate(diagnoses.models(fn, 2)):
        found.setdefault(frozenset(codes), []).append((n, codes, model))
    return found


def _pairs_within(fn: str, named: frozenset) -> list[tuple]:
    """The compositions of two slips on `fn` whose codes are all in `named`, as (number, codes,
    model), in the order of `diagnoses.models(fn, 2)`: found by the subsets of `named` (a
    composition has one code or two), not by reading every composition."""
    by_codes = _pairs_by_codes(fn)
    subsets = [frozenset((code,)) for code in named] + [frozenset(pair) for pair in itertools.combinations(named, 2)]
    return sorted((entry for subset in subsets for entry in by_codes.get(subset, ())), key=lambda entry: entry[0])


def _carried(fn: str, failing_uses: list[str], earlier: dict[str, StepResult]) -> list[_Candidate]:
    """Earlier steps' diagnoses, passed through the reference's own calls to `fn`."""
    found = []
    for used in failing_uses:
        named = earlier[used].diagnoses
        for used_fn in BY_ID[used].functions:
            # Single slips in the order the earlier step named them, then its named compositions.
            # Each (source, codes, model): the source names the model as the earlier step's own
            # search does, (1 or 2, its number) or ("derived", its code).
            pool = [((1, n), codes, model) for code in named for n, codes, model in _slips_coded(used_fn, code)]
            if len(named) > 1 and used_fn in diagnoses.PIPELINES:
                pool += [((2, n), codes, model) for n, codes, model in _pairs_within(used_fn, frozenset(named))]
            pool += [(("derived", code), (code,), derived.model(code)) for code in named
                     if derived.is_derived(code) and derived.fn_of(code) == used_fn]
            found += [_Candidate(codes, _carried_model(fn, used_fn, model), True, key=carried_key(fn, used_fn, source))
                      for source, codes, model in pool]
    return found


@lru_cache(maxsize=None)
def _slips_coded(fn: str, code: str) -> tuple:
    """The single slips of `fn` named `code`, as (number, codes, model)."""
    return tuple((n, codes, model) for n, (codes, model) in enumerate(diagnoses.MODELS.get(fn, ())) if codes == (code,))


def carried_key(fn: str, used_fn: str, source: tuple) -> tuple:
    """The key of a model of `used_fn` carried through the reference's `fn` (see `_carried`)."""
    return ("carried", fn, used_fn) + source


def _own_allowed(failing_uses: list[str], earlier: dict[str, StepResult]) -> bool:
    """May the step's own models be tried? Not when an earlier failing step returns unmodelled values."""
    return not any(not earlier[used].diagnoses or _UNMODELLED_VALUES & set(earlier[used].diagnoses)
                   for used in failing_uses)


def _own(fn: str, depth: int):
    """The step's own models of `depth` slips, as candidates, made one at a time as they are weighed."""
    if fn in diagnoses.PIPELINES:
        for n, (codes, _, model) in enumerate(diagnoses.models(fn, depth)):
            yield _Candidate(codes, model, False, key=(fn, depth, n))


def _after_pairs(accepted: list, fn: str, screen: "_Screen"):
    """The derived edits of `fn`, once the pairs of slips weighed before them have been: only where
    one of those pairs was accepted (else the search reaches the edits in their own turn)."""
    if accepted:
        yield from _derived(fn, screen)


def _derived(fn: str, screen: "_Screen | None" = None):
    """The step's models derived by general edits of the reference's stages (derived.py), but those
    the screen rules out, all at once (without a key looked up for each)."""
    models = derived.models(fn)
    left = screen.remaining(fn, ("derived",)) if screen is not None else None
    numbers = range(len(models)) if left is None else left + list(range(screen.size(fn, ("derived",)), len(models)))
    for n in numbers:
        code, model = models[n]
        yield _Candidate((code,), model, False, key=(fn, "derived", code))


# Pairs of derived edits screened on the probe call, at most, for one function: those of
# neighbouring stages first. Only the pairs that reproduce the probe are built as models and
# weighed on every call. What a pair gives on the probe is not kept for the class: a student whose
# numbers no single edit accounts for (float32 all through) screens thousands of pairs, nearly each
# of a value of its own, which kept would fill the caches alone and empty with them the single
# models' values every student reads; measured on a mistake-heavy class, keeping them saved nothing
# even where the caches were never emptied.
_MOST_PAIRS = 4000


def _pair_value(fn: str, first, second, call, prefixes: dict) -> tuple:
    """(canonical value or None, (exception name, message) or None) of a pair of edits on a call.
    `prefixes`: the stages pairs share, kept by `derived.run_pair` across one loop over pairs."""
    try:  # under np.errstate(all="ignore"): see grade_step
        return canonical(call.fn, derived.run_pair(fn, first, second, call.args, prefixes)), None
    except (WrongType, diagnoses.Inapplicable):
        return None, None
    except Exception as exc:
        return None, _error_of(exc)


def _derived_pairs(fn: str, indexes: list[int], calls: list, verdicts: list[_CallVerdict], expected: list[dict],
                   screen: "_Screen", passes: Callable | None = None):
    """Pairs of derived edits on two different stages, worth weighing on every call: those that
    reproduce the first failing call (its wrong value, or its very exception). Of the single edits,
    only those that change that call's value (or raise there) are paired. Pairs the screen rules
    out are never run (they count toward the pairs tried all the same). `passes(pair)`: False for
    a pair that a call already rules out (see `_passes_where_stopped`)."""
    probe = next((i for i in indexes if verdicts[i].kind == "mismatch"), None)
    if probe is None:
        probe = next((i for i in indexes if verdicts[i].kind == "raised" and verdicts[i].raised_message), None)
    if probe is None:
        return []
    call, want, verdict = calls[probe], expected[probe], verdicts[probe]
    singles = dict(derived.models(fn))
    agrees: dict[int, tuple] = {}  # id(value) -> (value, does the student's agree with it?)
    on_probe = _Screen([(call, verdict)])  # what the probe alone rules out

    def fits(value, error, shared: bool = True) -> bool:
        """As the weighing will judge it on the probe (see `_weigh`). `shared`: a value of the
        class's (a single edit's), whose answer is kept for the other edits that share it."""
        if verdict.kind == "raised":
            return error == (verdict.raised, verdict.raised_message)
        if value is None:
            return False
        if not shared:
            return _agrees_canonical(verdict.actual, value) and _accounts_for(verdict.actual, value, want)
        known = agrees.get(id(value))
        if known is None or known[0] is not value:
            known = agrees[id(value)] = (value, _agrees_canonical(verdict.actual, value)
                                         and _accounts_for(verdict.actual, value, want))
        return known[1]

    showing, fitting = [], []
    for code, edit in derived.pairable(fn):
        key = (fn, "derived", code)
        shows = on_probe.shows(key)
        if shows is False:
            continue
        if shows and on_probe.excludes(key):
            showing.append(edit)  # it changes the probe's value, but not to the student's
            continue
        value, error, differs = _value_of(key, singles[code], call, want)
        if differs or error is not None:
            showing.append(edit)
            if fits(value, error):
                fitting.append(edit)
    # A single edit that gives the probe's very value, but not every other call's: a second edit that
    # leaves the probe alone may be what tells them apart (`abs(s).max()` where the probe's scores are
    # all positive). Those pairs come first: there are few of them.
    shown = {id(edit) for edit in showing}
    refined = ((one, other) if one.at < other.at else (other, one)
               for one in fitting for _, other in derived.pairable(fn) if id(other) not in shown and other.at != one.at)
    survivors, tried = [], 0
    prefixes: dict = {}
    for (first, second), refining in itertools.chain(((pair, True) for pair in refined),
                                                     ((pair, False) for pair in stage_ordered_pairs(showing))):
        if tried >= _MOST_PAIRS:
            return survivors
        tried += 1
        if screen.excludes(("pair", first.code, second.code)):
            continue
        # A refined pair gives the probe's value whatever its second edit does: where its first
        # edit alone was ruled out is what the second must change, so it is looked at first.
        code = derived.pair_code(first.code, second.code)
        if refining and passes is not None and not passes(code):
            continue
        value, error = _pair_value(fn, first, second, call, prefixes)
        if fits(value, error, shared=False):
            key = (fn, "derived", code)
            value = value if value is None else _shared(value)
            # its value on the probe, where the weighing will look first
            _MODEL_VALUES.setdefault((key, id(call)), (call, value, error, value is not None and _differs(value, want)))
            survivors.append(_Candidate((code,), derived.model(code), False, key=key))
    return survivors


def _passes_where_stopped(code: str, stopped: dict, calls: list, verdicts: list[_CallVerdict], expected: list[dict],
                          agreed: dict, screen: "_Screen") -> bool:
    """Could the pair of edits `code` be accepted, as far as the call where the weighing of either
    of its edits alone stopped can tell? (A pair that fails that call would be ruled out there.)"""
    fn = derived.fn_of(code)
    for part in derived.pair_parts(code):
        index = stopped.get((fn, "derived", part))  # only ever a call that passed, failed or raised
        if index is None:
            continue
        candidate = _Candidate((code,), derived.model(code), False, key=(fn, "derived", code))
        _weigh(candidate, calls, verdicts, expected, agreed, [index], screen)
        return candidate.stopped is None
    return True


def stage_ordered_pairs(showing: list):
    """Pairs of edits of two different stages, `first` the earlier: stages next to each other
    first, as one line of a student's code often spans both."""
    by_stage: dict[int, list] = {}
    for edit in showing:
        by_stage.setdefault(edit.at, []).append(edit)
    stage_pairs = sorted(((i, j) for i in by_stage for j in by_stage if i < j), key=lambda ij: (ij[1] - ij[0], ij[0]))
    return (pair for i, j in stage_pairs for pair in itertools.product(by_stage[i], by_stage[j]))


class _Screen:
    """What the shipped atlas (atlas.py) rules out for one student, from their verdicts on the
    example calls it holds: a model that cannot be accepted, found without running it."""

    def __init__(self, seen: list):
        """`seen`: (call, the student's verdict on it) for calls that may be example calls."""
        self.seen = seen
        self._parts: list | None = None

    @property
    def parts(self) -> list:
        """(table, what it rules out) per example call: worked out when first asked."""
        if self._parts is None:
            self._parts = []
            for call, verdict in self.seen:
                table = atlas.table(call)
                if table is not None:
                    mask = table.excluded(verdict)
                    if mask is not None:
                        self._parts.append((table, mask))
        return self._parts

    def excludes(self, key: tuple) -> bool:
        parts = self.parts
        if not parts:
            return False
        if len(key) == 3 and key[1] == "derived" and derived.PAIR in key[2]:
            key = ("pair",) + derived.pair_parts(key[2])  # a pair of edits, as the atlas names it
        for table, mask in parts:
            n = table.entry(key)
            if n >= 0 and mask[n]:
                return True
        return False

    def remaining(self, fn: str, block: tuple) -> list[int] | None:
        """The numbers of `fn`'s models in one block of the atlas (its compositions of two slips,
        say) that no example call rules out, in order; None when the screen holds none."""
        left = None
        for table, mask in self.parts:
            kept = table.remaining(block, mask) if table.fn == fn else None
            if kept is not None:
                left = kept if left is None else left & kept
        return None if left is None else sorted(left)

    def size(self, fn: str, block: tuple) -> int:
        """How many of `fn`'s models the screen's tables hold in one block (see `remaining`)."""
        return min((table.size(block) for table, _ in self.parts if table.fn == fn), default=0)

    def shows(self, key: tuple) -> bool | None:
        """Does the model change the (first) call's value, or raise there? None: unknown."""
        for table, _ in self.parts[:1]:
            n = table.entry(key)
            if n >= 0:
                status = table.status[n]
                if status == atlas.INAPPLICABLE:
                    return False
                if status == atlas.RAISES:
                    return True
                if status in (atlas.VALUE, atlas.NONFINITE) and table.sure[n]:
                    return bool(table.differs[n])
        return None


def example_outcomes(call, want: dict, step: Step) -> list[tuple]:
    """What the search may run on an example call of `step`, as it would find it there: (key,
    (value, error, could the slip not show?, differs from the reference?, is that sure?)) for the function's
    slips, their compositions, the derived edits, the pairs of edits tried where this call is the
    probe, and every single slip, composition and derived edit of the functions it builds on,
    carried through the reference (as `_carried` makes them). For the atlas (atlas.py)."""
    fn, found = call.fn, []

    def add(key, value, error, inapplicable):
        def departs(scale: float) -> bool:
            return value is not None and not inapplicable and bool(
                differences(value, want, False, RTOL * scale, ATOL * scale, describe=False))

        differs = departs(1.0)
        # sure: ten times the tolerance either way would say the same (another build may round differently)
        found.append((key, (value, error, inapplicable, differs, departs(10.0) or not departs(0.1))))
        return differs or error is not None

    with np.errstate(all="ignore"):
        if fn in diagnoses.PIPELINES:
            for depth in (1, 2):
                for n, (_, _, model) in enumerate(diagnoses.models(fn, depth)):
                    add((fn, depth, n), *_outcome(model, call, want)[:3])
        shows = {code for code, model in derived.models(fn)
                 if add((fn, "derived", code), *_outcome(model, call, want)[:3])}
        showing = [edit for code, edit in derived.pairable(fn) if code in shows]
        prefixes: dict = {}
        for first, second in itertools.islice(stage_ordered_pairs(showing), _MOST_PAIRS):
            try:
                value, error = canonical(fn, derived.run_pair(fn, first, second, call.args, prefixes)), None
            except (WrongType, diagnoses.Inapplicable):
                value, error = None, None
            except Exception as exc:
                value, error = None, _error_of(exc)
            add(("pair", first.code, second.code), value, error, False)
        for used_fn in dict.fromkeys(f for used in _all_uses(step) for f in BY_ID[used].functions if f != fn):
            pool = [((depth, n), model) for depth in ((1, 2) if used_fn in diagnoses.PIPELINES else ())
                    for n, (_, _, model) in enumerate(diagnoses.models(used_fn, depth))]
            pool += [(("derived", code), model) for code, model in derived.models(used_fn)]
            for source, model in pool:
                add(carried_key(fn, used_fn, source),
                    *_outcome(diagnoses.through_reference(fn, used_fn, model), call, want)[:3])
    return found


_CARRIED: dict[tuple, Callable] = {}


def _carried_model(fn: str, used_fn: str, model: Callable) -> Callable:
    key = (fn, used_fn, id(model))
    if key not in _CARRIED:
        _CARRIED[key] = diagnoses.through_reference(fn, used_fn, model)
    return _CARRIED[key]


# A model's value on a hidden call depends on nothing but the call, so across a class it is
# computed once: (model key, id(call)) -> (call, canonical value or None, (exception name, message)
# or None, whether it differs from the reference). The call is kept in the entry so its id stays unique.
_MODEL_VALUES: dict[tuple, tuple] = {}

# What a model returned where it is not of the type asked for (a tuple for a dict, an array for a
# bool): (model key, id(call)) -> (call, the value as it came). Compared with a value of the wrong
# type the student returned, only when the step has no other failure.
_MODEL_RAW: dict[tuple, tuple] = {}

# Many models return the same value on a call (a slip that leaves this function alone, or two
# compositions that come to the same thing): such values share one object, content -> value, so
# that a student's value is compared with each distinct model value only once (see _weigh).
_SHARED_VALUES: dict[tuple, dict] = {}


def _shared(value: dict) -> dict:
    """`value`, or a model value seen before with the same content (the same bytes, shape and
    dtype for an array; the same type and repr otherwise)."""
    key = tuple((name, part.shape, part.dtype.str, hash(part.tobytes())) if isinstance(part, np.ndarray)
                else (name, type(part).__name__, repr(part)) for name, part in value.items())
    known = _SHARED_VALUES.setdefault(key, value)
    if known is value:
        size = sum(part.nbytes + _ARRAY_BYTES for part in value.values() if isinstance(part, np.ndarray))
        _HELD[0] += size + _VALUE_BYTES  # unlocked: two threads may lose a count, which only delays an emptying
        return value
    if all(part.tobytes() == known[name].tobytes() if isinstance(part, np.ndarray)
           else repr(part) == repr(known[name]) for name, part in value.items()):
        return known
    return value  # a hash collision: kept apart


def _model_value(candidate: _Candidate, call, want: dict) -> tuple:
    return _value_of(candidate.key, candidate.model, call, want)


def _value_of(key: tuple, model: Callable, call, want: dict) -> tuple:
    """(canonical value or None, (exception name, message) or None, differs from the reference?) of
    a model on a call, computed once per class (see _MODEL_VALUES)."""
    key = (key, id(call))
    entry = _MODEL_VALUES.get(key)
    if entry is not None and entry[0] is call:
        return entry[1:]
    value, error, inapplicable, raw = _outcome(model, call, want)
    if inapplicable:  # the slip cannot show on this call: it behaves as the reference
        _MODEL_VALUES[key] = (call, want, None, False)
        return want, None, False
    if raw is not None:
        _MODEL_RAW[key] = (call, raw)
    if value is not None:
        value = _shared(value)
    entry = (call, value, error, value is not None and _differs(value, want))
    _MODEL_VALUES[key] = entry  # one assignment: grading threads share this cache
    return entry[1:]


def _outcome(model: Callable, call, want: dict) -> tuple:
    """(canonical value or None, (exception name, message) or None, could the slip not show?, the
    object of the wrong type it returned or None) of one run of a model on a call."""
    try:  # under np.errstate(all="ignore"): see grade_step
        raw = model(*call.args)
    except diagnoses.Inapplicable:
        return None, None, True, None
    except Exception as exc:  # the model fails where the misconception would: evidence too
        return None, _error_of(exc), False, None
    if RETURNS[call.fn][0] == "facts":  # the facts a slip gets wrong, the reference's for the rest
        return ({**want, **raw} if isinstance(raw, dict) else None), None, False, None
    try:
        return canonical(call.fn, raw), None, False, None
    except WrongType:
        return None, None, False, raw


def _error_of(exc: Exception) -> tuple[str, str]:
    """(exception name, message) of a model's exception, cut as the sealed child cuts the student's
    (inside._raised), so that the two compare equal whenever the exceptions are."""
    return type(exc).__name__, plain_text(str(exc), 301)


_LOOSE_VALUES: dict[tuple, tuple] = {}


def _model_loose(candidate: _Candidate, call) -> dict | None:
    """The model's value on a call where it returns the wrong type, read as `loose_value` reads it."""
    key = (candidate.key, id(call))
    entry = _LOOSE_VALUES.get(key)
    if entry is not None and entry[0] is call:
        return entry[1]
    try:
        with np.errstate(all="ignore"):
            value = loose_value(candidate.model(*call.args))
    except Exception:
        value = None
    _LOOSE_VALUES[key] = (call, value)
    return value


def _differs(value: dict, want: dict) -> bool:
    """Does a model's value differ from the reference's as grading sees it? (A slip whose effect is
    below the model tolerance still fails.) Many models share one value, so this is worked out once
    per value and reference value, both kept for the class."""
    key = (id(value), id(want))
    known = _DIFFERS.get(key)
    if known is None or known[0] is not value or known[1] is not want:
        known = _DIFFERS[key] = (value, want, bool(differences(value, want, False, describe=False)))
    return known[2]


_DIFFERS: dict[tuple, tuple] = {}


def _weigh(candidate: _Candidate, calls: list, verdicts: list[_CallVerdict], expected: list[dict],
           agreed: dict, order: list[int], screen: "_Screen") -> None:
    """Run the model on the calls of one function that returned or raised, and tally the evidence.

    `order` lists those calls, failing calls first. A model is accepted only when it reproduces
    every failing call and contradicts no passing one, so the failing calls are weighed first,
    until one the model does not reproduce: that ends the weighing (most models are rejected by
    the first, a call that fails for most students, whose value is then computed once for the
    class); then the passing calls, until one the model gets wrong. `explains` is complete only
    for a model that reproduced every failing call. `agreed` remembers, for one step, whether a
    student's value and a model value agree, by their ids. A model the screen rules out (by what
    it gives on the example, atlas.py) is not run at all.
    """
    if screen.excludes(candidate.key):
        return
    for index in order:
        call, verdict, want = calls[index], verdicts[index], expected[index]
        value, error, differs = _model_value(candidate, call, want)
        if verdict.kind == "wrong-type":
            # the very object of the wrong type (a tuple for the dict, the per-row array for the bool),
            # or the same wrong structure holding the same numbers (the output alone, not the tuple)
            if value is None and error is None:
                raw = _MODEL_RAW.get((candidate.key, id(call)))
                if raw is not None and raw[0] is call and _same_raw(verdict.raw, raw[1]):
                    candidate.explains.add(index)
                    candidate.values += 1
                    continue
                if verdict.loose is not None:
                    model = _model_loose(candidate, call)
                    if model is not None and model.keys() == verdict.loose.keys() \
                            and _agrees_canonical(verdict.loose, model):
                        candidate.explains.add(index)
                        candidate.values += 1
                        continue
            # (weighed only where it fails with nothing else: a model must reproduce it, or is out)
            candidate.stopped = index
            return
        if verdict.kind == "raised":
            # Only the student's very exception counts: the same type and the same message, which
            # names the operation that failed and the shapes it failed on.
            if error is not None and error == (verdict.raised, verdict.raised_message) or (
                    error is None and value is not None
                    and _raised_for_nonfinite(verdict.raised, verdict.raised_message, value)):
                candidate.explains.add(index)
                candidate.values += 1
                continue
            candidate.stopped = index
            return
        if verdict.kind == "ok":  # the student matched the reference: the model must too
            if differs or error is not None:
                candidate.contradicted, candidate.stopped = True, index
                return
            continue
        if not differs:  # the reference's value here: it cannot reproduce a wrong one
            candidate.stopped = index
            return
        pair = (id(verdict.actual), id(value))
        known = agreed.get(pair)
        if known is None or known[0] is not value:  # the value is held, so its id stays its own
            known = agreed[pair] = (value, _agrees_canonical(verdict.actual, value)
                                    and _accounts_for(verdict.actual, value, want))
        if not known[1]:
            candidate.stopped = index
            return
        candidate.explains.add(index)
        candidate.values += 1


def _raised_for_nonfinite(raised: str | None, message: str, value: dict) -> bool:
    """Did the student's code raise where the model's numbers come to infinity or NaN? Python's own
    arithmetic raises where numpy's gives them: OverflowError (`math.exp`, `float ** 2`), division
    by zero, a math domain error (`math.log(0)`, `math.sqrt(-1)`): the same mistake, written with
    the other library."""
    return atlas.raised_for_nonfinite(raised, message) and any(
        not np.isfinite(part).all() for part in value.values()
        if isinstance(part, np.ndarray) and part.dtype.kind == "f")


_WHOLE_RESULT = frozenset(slip.code for slip in diagnoses.SLIPS if slip.knob == "result")


def _same_raw(got, model) -> bool:
    """Is a value of the wrong type the model's, part for part (within the model tolerance)?"""
    if isinstance(model, np.ndarray):
        if not isinstance(got, np.ndarray) or got.shape != model.shape or (got.dtype == bool) != (model.dtype == bool):
            return False
        if model.dtype == bool:
            return bool(np.array_equal(got, model))
        return bool(np.allclose(np.asarray(got, dtype=float), np.asarray(model, dtype=float),
                                rtol=MODEL_RTOL, atol=MODEL_ATOL, equal_nan=True))
    if isinstance(model, (tuple, list)):
        return isinstance(got, (tuple, list)) and len(got) == len(model) and all(map(_same_raw, got, model))
    if isinstance(model, dict):
        return isinstance(got, dict) and list(got) == list(model) and all(_same_raw(got[k], model[k]) for k in model)
    if isinstance(model, (bool, np.bool_)):
        return isinstance(got, (bool, np.bool_)) and bool(got) == bool(model)
    if isinstance(model, (int, float, np.number)):
        return isinstance(got, (int, float, np.number)) and not isinstance(got, bool) \
            and isclose(got, model, MODEL_RTOL, MODEL_ATOL)
    return False


def _gave(candidate: _Candidate, call) -> tuple | None:
    """What a weighed model gave on a call: (value, exception, object of the wrong type)."""
    entry = _MODEL_VALUES.get((candidate.key, id(call)))
    if entry is None or entry[0] is not call:
        return None
    raw = _MODEL_RAW.get((candidate.key, id(call)))
    return entry[1], entry[2], raw[1] if raw is not None and raw[0] is call else None


def _same_model_values(one: _Candidate, other: _Candidate, calls: list) -> bool:
    """Do two weighed models give the same on every call, within the model tolerance?"""
    for call in calls:
        mine, theirs = _gave(one, call), _gave(other, call)
        if mine is None or theirs is None:
            if mine is not theirs:
                return False
            continue
        if mine[1] != theirs[1] or (mine[0] is None) != (theirs[0] is None):
            return False
        if mine[0] is not None and not (mine[0].keys() == theirs[0].keys() and _agrees_canonical(mine[0], theirs[0])):
            return False
        if mine[0] is None and mine[1] is None and not _same_raw(mine[2], theirs[2]):
            return False
    return True


# What the search found for a step, by everything it reads: the calls and the reference's values
# (the class's own objects, held in the entry so their ids stay theirs), the student's verdicts by
# their contents, and the earlier steps' diagnoses it carries. Students who make the same mistake
# return the very same numbers, so a class searches once for each distinct mistake it shows.
# -> (calls, expected, codes, covered, alternatives).
_EXPLAINED: dict[tuple, tuple] = {}


def _content(value, budget: list):
    """A value the student returned, as a key of equal contents (the bytes, shape and dtype of an
    array); raises _Unkeyable where it holds something a key cannot stand for (objects, or too much)."""
    if isinstance(value, np.ndarray):
        budget[0] -= value.nbytes
        if value.dtype.hasobject or budget[0] < 0:
            raise _Unkeyable
        return value.shape, value.dtype.str, value.tobytes()
    if value is None or isinstance(value, (bool, int, float, complex, str, np.generic)):
        shown = repr(value)
        budget[0] -= len(shown)
        if budget[0] < 0:
            raise _Unkeyable
        return type(value).__name__, shown
    if isinstance(value, dict):
        return ("dict",) + tuple((_content(name, budget), _content(part, budget)) for name, part in value.items())
    if isinstance(value, (tuple, list)):
        return (type(value).__name__,) + tuple(_content(part, budget) for part in value)
    raise _Unkeyable


class _Unkeyable(Exception):
    pass


_MOST_KEY_BYTES = 1 << 16


def _explained_key(calls: list, verdicts: list[_CallVerdict], expected: list[dict], failing_uses: list[str],
                   earlier: dict[str, StepResult], own: bool) -> tuple[tuple | None, int]:
    """(the key of `_EXPLAINED`, the bytes of the contents it holds), or (None, 0) where the
    verdicts hold what no key can stand for."""
    budget = [_MOST_KEY_BYTES]
    try:
        seen = tuple((v.kind, tuple(v.codes), v.raised, v.raised_message, v.raised_in, v.nonfinite, v.shape,
                      _content(v.actual, budget), _content(v.loose, budget), _content(v.raw, budget))
                     for v in verdicts)
    except (_Unkeyable, RecursionError):
        return None, 0
    return (tuple(map(id, calls)), tuple(map(id, expected)), seen, own,
            tuple((used, tuple(earlier[used].diagnoses)) for used in failing_uses)), _MOST_KEY_BYTES - budget[0]


def _explanations(calls: list, verdicts: list[_CallVerdict], expected: list[dict],
                  failing_uses: list[str], earlier: dict[str, StepResult],
                  own: bool = True) -> tuple[list[str], set, list]:
    """What `_search` finds, searched once per class for each distinct set of verdicts."""
    key, size = _explained_key(calls, verdicts, expected, failing_uses, earlier, own)
    entry = _EXPLAINED.get(key) if key is not None else None
    if entry is None or not (all(map(operator.is_, entry[0], calls)) and all(map(operator.is_, entry[1], expected))):
        codes, covered, alternatives = _search(calls, verdicts, expected, failing_uses, earlier, own)
        if key is None:
            return codes, covered, alternatives
        entry = (tuple(calls), tuple(expected), tuple(codes), frozenset(covered), tuple(alternatives))
        _EXPLAINED[key] = entry  # one assignment: grading threads share this cache
        _HELD[0] += size + _ENTRY_BYTES * (1 + len(verdicts))  # unlocked: see _shared
    return list(entry[2]), set(entry[3]), list(entry[4])


def _zeros_throughout(verdict: _CallVerdict, want: dict) -> bool:
    """Is every part a call got wrong an array of zeros?"""
    if verdict.kind != "mismatch" or not isinstance(verdict.actual, dict):
        return False
    wrong = differences(verdict.actual, want, False, describe=False)
    return bool(wrong) and all(isinstance(verdict.actual.get(name), np.ndarray) and verdict.actual[name].size
                               and not np.any(verdict.actual[name]) for name in wrong)


def _search(calls: list, verdicts: list[_CallVerdict], expected: list[dict],
            failing_uses: list[str], earlier: dict[str, StepResult],
            own: bool = True) -> tuple[list[str], set, list]:
    """The misconception codes that account for the step's failing calls, which calls they cover,
    and the groups of codes between which the evidence cannot choose.

    A model is accepted for one function only when it reproduces every failing call of that
    function (the student's value within the model tolerance, or the student's very exception,
    type and message) and contradicts no call that passed; it must reproduce at least one wrong
    value or exception of its own, unless it carries an earlier step's diagnosis. So every code
    named is true of every case the student failed, not only of the example. Of the accepted,
    carried diagnoses come first, then the fewest slips, then codes named earlier; where models
    that rank alike name different mistakes, all of them are kept as alternatives.
    """
    failing = [i for i, v in enumerate(verdicts) if v.kind in ("mismatch", "raised")]
    # Values of the wrong type are explained only where nothing else fails: a model must then
    # return the very same object (a tuple for the dict, say) or the same structure holding the same
    # numbers, and "wrong-type" stays said.
    if not failing:
        failing = [i for i, v in enumerate(verdicts) if v.kind == "wrong-type"]
    if not failing:
        return [], set(), []
    named = {code for used in failing_uses for code in earlier[used].diagnoses}
    agreed: dict = {}
    own = own and _own_allowed(failing_uses, earlier)
    codes, covered, alternatives = [], set(), []
    for fn in dict.fromkeys(call.fn for call in calls):
        indexes = [i for i, call in enumerate(calls) if call.fn == fn]
        to_explain = {i for i in indexes if i in failing}
        if not to_explain:
            continue
        fn_calls, fn_verdicts, fn_expected = ([calls[i] for i in indexes], [verdicts[i] for i in indexes],
                                              [expected[i] for i in indexes])
        order = sorted((i for i, v in enumerate(fn_verdicts) if v.kind in ("ok", "mismatch", "raised")
                        or (v.kind == "wrong-type" and indexes[i] in failing)),
                       key=lambda i: fn_verdicts[i].kind == "ok")
        accepted = []
        # The reference's own numbers in another shape (a query kept 2-D gives uniform weights as
        # [1, T]): an edit inside a function the reference calls (softmax_rows' row maxima) that
        # happens to give that shape would name a line the student never wrote; one of the
        # function's own lines (`weights[None, :] @ v`) may. Else the shape is what wrong-shape says.
        reshaped = _only_reshaped([verdicts[i] for i in to_explain], [expected[i] for i in to_explain])
        screen = _Screen([(calls[i], verdicts[i]) for i in indexes])
        stopped: dict[tuple, int] = {}  # a derived edit's key -> where its weighing stopped (by fn_calls)
        # Where every failing call raised, only the chapter's single slips and earlier mistakes
        # carried forward are tried. Code that fails only by raising (a broadcast that works only
        # where two sizes agree, a `.T` that reverses a batch's axes) raises the same message under
        # many compositions and edits that are the reference wherever they run; none of them is told
        # as what the student wrote: the exception and the call it came from are. (A single slip,
        # `mix(v, a)` raising wherever T is not d_v, is named on its exceptions, as the self-check
        # names it.) Deeper, an accepted model reproduces every failing call, a returned value too.
        # Python's arithmetic raising where numpy's gives infinity or NaN (a division by zero in a
        # loop) is a value too: only models whose numbers are not finite there reproduce it.
        depths = (1,) if all(verdicts[i].kind == "raised" for i in to_explain) and not all(
            atlas.raised_for_nonfinite(verdicts[i].raised, verdicts[i].raised_message) for i in to_explain) \
            else (1, 2, 3, 4)
        # Arrays of zeros throughout, where the reference has other numbers, tell little: two edits
        # together come to zeros in many ways (rows normalized, then cut to integers), none of them
        # likely what was written (a factor of 0 from a division of integers, an array never filled).
        # No pair of derived edits is named for them; what the numbers show is told (_zeroed).
        if depths[-1] == 4 and all(_zeros_throughout(verdicts[i], expected[i]) for i in to_explain):
            depths = (1, 2, 3)
        for depth in depths:
            if depth == 1:
                candidates = itertools.chain(_carried(fn, failing_uses, earlier), _own(fn, 1) if own else ())
            elif depth == 2:
                candidates = _screened(fn, indexes, calls, verdicts, expected, set(), screen) if own else []
            elif depth == 3:
                candidates = _derived(fn, screen) if own else []
            else:
                candidates = _derived_pairs(fn, indexes, calls, verdicts, expected, screen,
                                            lambda pair: _passes_where_stopped(pair, stopped, fn_calls, fn_verdicts,
                                                                               fn_expected, agreed, screen)) \
                    if own else []
            derived_too = depth == 3
            if depth == 2 and own:
                # One derived edit of a line, where one reproduces the failures too, is told before two
                # of the chapter's slips that come to the same (`q.size` read for d_k is not a
                # prescaled score divided by √T as well): where a pair reproduces them, the edits are
                # weighed as well, and one that does stands in the pairs' place.
                candidates = itertools.chain(candidates, _after_pairs(accepted, fn, screen))
            for candidate in candidates:
                if not candidate.carried and any(c.carried for c in accepted):
                    break  # an earlier diagnosis explains every failure: no model of its own can outrank it
                if reshaped and candidate.key[1] == "derived" and derived.inside_a_call(candidate.codes[0]):
                    continue
                _weigh(candidate, fn_calls, fn_verdicts, fn_expected, agreed, order, screen)
                if depth == 3 and candidate.stopped is not None:
                    stopped[candidate.key] = candidate.stopped
                candidate.explains = {indexes[i] for i in candidate.explains}
                if (not candidate.contradicted and (candidate.values or candidate.carried)
                        and to_explain <= candidate.explains):
                    accepted.append(candidate)
            if depth == 2 and any(candidate.key[1] == "derived" for candidate in accepted):
                accepted, derived_too = [c for c in accepted if c.key[1] == "derived"], True
            if accepted and derived_too:
                # edits of one line that come to the same values on every call (the line skipped,
                # or its result replaced, alike; a clip at any bound the cases cannot tell apart):
                # the first, in the order of preference, stands for them. Edits of different lines,
                # or one line's operator swapped for different ones (`any` and the first row alone,
                # for a row test), that agree everywhere stay, as alternatives: the values cannot say
                # which the student wrote (the head's input `w_v_new - w_v`, or the difference of
                # the two outputs returned, for a head linear in W_V).
                kept = []
                for candidate in sorted(accepted, key=lambda c: derived.preference(c.codes[0])):
                    if not any(derived.same_line_alike(candidate.codes[0], other.codes[0])
                               and _same_model_values(candidate, other, fn_calls) for other in kept):
                        kept.append(candidate)
                accepted = kept
            if accepted:
                break  # the search goes deeper only when nothing simpler reproduces every failure
        if not accepted:
            continue

        def rank(c):
            # A slip of a stage before one of the whole result, where both reproduce the numbers:
            # `k @ q.T` is the transposed scores, and the stage is the mistake a student makes.
            return (c.carried, -len(c.codes), -len(_WHOLE_RESULT & set(c.codes)), len(named & set(c.codes)))

        best = max(rank(c) for c in accepted)
        groups = list(dict.fromkeys(c.codes for c in accepted if rank(c) == best))
        covered |= to_explain
        if len(groups) > 1:
            alternatives.append(tuple(groups))
        for group in groups:
            codes += [code for code in group if code not in codes]
    return codes, covered, alternatives


def _pairs_per_example(raw, want: dict) -> str | None:
    """Is a batch's result of the wrong type one (o, a) pair per example, each of the shapes one
    example's are? "right" where every pair holds that example's very numbers, "shaped" where only
    the shapes are; None otherwise."""
    o, a = want.get("o"), want.get("a")
    if isinstance(raw, np.ndarray) and raw.ndim >= 2 and raw.shape[1] == 2:  # the pairs stacked: [B, 2, ...]
        raw = [(pair[0], pair[1]) for pair in raw]
    if not isinstance(raw, (list, tuple)) or not isinstance(o, np.ndarray) or o.ndim != 3 or len(raw) != len(o) \
            or not isinstance(a, np.ndarray) or not raw:
        return None
    right = True
    for index, pair in enumerate(raw):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            return None
        try:
            got_o, got_a = (np.asarray(part, dtype=float) for part in pair)
        except (TypeError, ValueError, OverflowError):
            return None
        if got_o.shape != o[index].shape or got_a.shape != a[index].shape:
            return None
        right = right and allclose(got_o, o[index], RTOL, ATOL, keep=False) \
            and allclose(got_a, a[index], RTOL, ATOL, keep=False)
    return "right" if right else "shaped"


def _only_reshaped(verdicts: list[_CallVerdict], expected: list[dict]) -> bool:
    """Is every wrong value the reference's numbers, some part in another shape (the same numbers
    in another layout, or the reference's broadcast to more axes)?"""
    if not verdicts or any(v.kind != "mismatch" or v.actual is None for v in verdicts):
        return False
    moved = False
    for verdict, want in zip(verdicts, expected):
        for name, part in want.items():
            got = verdict.actual.get(name)
            if not (isinstance(part, np.ndarray) and isinstance(got, np.ndarray)):
                if not _same_part(name, got, part):
                    return False
                continue
            if got.shape != part.shape:
                moved = True
                if got.size == part.size:
                    got = got.reshape(part.shape)
                else:
                    try:
                        part = np.broadcast_to(part, got.shape)
                    except ValueError:
                        return False
            if not allclose(got, part, RTOL, ATOL, keep=False):  # `part` may be a view made here
                return False
    return moved


def _shapes(value: dict | None) -> tuple | None:
    if value is None:
        return None
    return tuple(part.shape if isinstance(part, np.ndarray) else None for part in value.values())


def _transposed(shapes: tuple) -> tuple:
    """The shapes with each array's last two axes swapped, as a transposing slip would leave them."""
    return tuple(None if shape is None else shape[:-2] + shape[-2:][::-1] for shape in shapes)


def _screened(fn: str, indexes: list[int], calls: list, verdicts: list[_CallVerdict], expected: list[dict],
              covered: set, screen: "_Screen") -> list:
    """The compositions of two slips worth weighing on every call: those that reproduce one failure.

    The probe is the first call with a wrong value that no single slip explained. A composition is
    pruned before it is run: when neither of its slips alone changes the probe's value; by shape,
    when the student's shapes are the reference's and exactly one of its slips changes them (unless
    the other's stage may drop that value, `slips.DROPPED_BY`), or when they are not and neither
    slip alone gives them (or their transpose); and when the screen rules it out. When every wrong
    value is explained and only exceptions are left, the probe is the first of those, and a
    composition is run only when one of its slips alone raises the student's very exception there
    (`_screened_by_exception`). What the pruning keeps depends only on the probe and the student's
    shapes, so it is worked out once per class (`_pruned`); each composition's value there is
    computed once per class too, and each student's values are compared with each distinct model
    value once.
    """
    probe = next((i for i in indexes if verdicts[i].kind == "mismatch" and i not in covered), None)
    if probe is None:
        return _screened_by_exception(fn, indexes, calls, verdicts, expected, covered)
    call, got, want = calls[probe], verdicts[probe].actual, expected[probe]
    agrees: dict[int, bool] = {}
    survivors = []
    # only the compositions the screen leaves (all, where it holds none)
    for n, codes, model in _pruned(fn, call, want, _shapes(got), screen.remaining(fn, ("own", 2))):
        key = (fn, 2, n)
        value, error, differs = _value_of(key, model, call, want)
        if error is not None or value is None or not differs:
            continue
        if id(value) not in agrees:
            agrees[id(value)] = _agrees_canonical(got, value)
        if agrees[id(value)]:
            survivors.append(_Candidate(codes, model, False, key=key))
    return survivors


# (fn, id(call), the student's shapes) -> (call, [(number, codes, model), ...]): the compositions the
# pruning of `_screened` keeps on that probe. Bounded: a class whose students return ever new shapes
# starts it afresh.
_PRUNED: dict[tuple, tuple] = {}
_MOST_PRUNED = 512


def _pruned(fn: str, call, want: dict, student: tuple | None, only: list[int] | None = None) -> list[tuple]:
    """`only`: the compositions, by number, to look at (those the screen leaves); None for all, the
    list then kept for the class."""
    key = (fn, id(call), student)
    entry = _PRUNED.get(key) if only is None else None
    if entry is not None and entry[0] is call:
        return entry[1]
    reference = _shapes(want)
    choice_shape, shows = {}, set()
    for candidate, (_, choice, _) in zip(_own(fn, 1), diagnoses.models(fn, 1)):
        value, error, differs = _model_value(candidate, call, want)
        choice_shape[choice[0]] = _shapes(value) if error is None else None
        if differs or error is not None or (value is not None and _changes(value, want)):
            shows.add(choice[0])
    kept = []
    compositions = diagnoses.models(fn, 2)
    for n in range(len(compositions)) if only is None else only:
        codes, choice, model = compositions[n]
        if not shows.intersection(choice):
            # neither slip changes this call alone, by the least amount: together they would not
            # either. (One may change it within the tolerance and still show beside the other: an
            # epsilon of 1e-9 in a softmax's total, on a total the missing shift left small.)
            continue
        shapes = [choice_shape.get(part) for part in choice]
        changed = [shape for shape in shapes if shape != reference]
        # A slip that raises here alone says nothing of the pair's shape: such pairs are run. So
        # are those whose other slip may never read the value whose shape the one slip changed.
        if None not in shapes and student == reference and len(changed) == 1 \
                and not _may_drop(choice, shapes, reference):
            continue
        if None not in shapes and student != reference \
                and student not in changed + [_transposed(shape) for shape in changed]:
            continue
        kept.append((n, codes, model))
    if only is not None:
        return kept
    if len(_PRUNED) >= _MOST_PRUNED:
        _PRUNED.clear()
    _PRUNED[key] = (call, kept)  # one assignment: grading threads share this cache
    return kept


def _changes(value: dict, want: dict) -> bool:
    """Is a model's value not the reference's, to the last bit (NaN where it has NaN)?"""
    if value.keys() != want.keys():
        return True
    for name, got in value.items():
        other = want[name]
        if not (isinstance(got, np.ndarray) and isinstance(other, np.ndarray)):
            if type(got) is not type(other) or got != other:
                return True
        elif got.shape != other.shape or not np.array_equal(got, other, equal_nan=got.dtype.kind == "f"):
            return True
    return False


def _may_drop(choice: tuple, shapes: list, reference: tuple) -> bool:
    """Of two slips, one changing the probe's shapes: may the other's stage drop what it changed?"""
    (first, _), (second, _) = choice
    changer, other = (first, second) if shapes[0] != reference else (second, first)
    return diagnoses.DROPPED_BY.get(changer.knob) == other.knob


def _screened_by_exception(fn: str, indexes: list[int], calls: list, verdicts: list[_CallVerdict],
                           expected: list[dict], covered: set) -> list:
    """The compositions of two slips that raise what the student raised on the first unexplained call.

    A slip that raises alone and contradicts a passing call can still be half of a composition
    whose other slip makes that call right (a shift whose value the normalization then ignores).
    The exception, message and all, is the screen: the shapes in a broadcast error name the
    operation that failed, so only compositions holding a slip that raises it alone are run.
    Which do depends only on the probe and the exception, so it is worked out once per class.
    """
    probe = next((i for i in indexes if verdicts[i].kind == "raised" and verdicts[i].raised_message
                  and i not in covered), None)
    if probe is None:
        return []
    call, want = calls[probe], expected[probe]
    raised = (verdicts[probe].raised, verdicts[probe].raised_message)
    key = (fn, id(call), raised)
    entry = _RAISING.get(key)
    if entry is None or entry[0] is not call:
        sources = set()
        for candidate, (_, choice, _) in zip(_own(fn, 1), diagnoses.models(fn, 1)):
            if _model_value(candidate, call, want)[1] == raised:
                sources.add(choice[0])
        kept = []
        if sources:
            for n, (codes, choice, model) in enumerate(diagnoses.models(fn, 2)):
                if sources.intersection(choice):
                    if _model_value(_Candidate(codes, model, False, key=(fn, 2, n)), call, want)[1] == raised:
                        kept.append((n, codes, model))
        if len(_RAISING) >= _MOST_PRUNED:
            _RAISING.clear()
        entry = _RAISING[key] = (call, kept)
    return [_Candidate(codes, model, False, key=(fn, 2, n)) for n, codes, model in entry[1]]


# (fn, id(call), (exception, message)) -> (call, [(number, codes, model), ...]): the compositions
# that raise that very exception on that probe.
_RAISING: dict[tuple, tuple] = {}


def _counterexample_problems(matrix: np.ndarray) -> list[str]:
    if matrix.shape != (3, 3):
        return [f"counterexample has shape {list(matrix.shape)}, expected [3, 3]."]
    problems = []
    if (matrix < 0).any() or not np.isfinite(matrix).all():
        problems.append("Some entries are negative or not finite; every entry must be non-negative.")
    if not np.allclose(matrix.sum(axis=0), 1.0, atol=1e-9, rtol=0):
        problems.append("Its columns do not all sum to one.")
    if np.isclose(matrix[0].sum(), 1.0, atol=1e-9, rtol=0):
        problems.append("Its first row sums to one, so receiver 1 still gets a valid mixture.")
    return problems


def _rows_sum_to_one(matrix: np.ndarray) -> bool:
    return bool(np.allclose(matrix.sum(axis=1), 1.0, atol=1e-9, rtol=0))


# Each condition of exercise 2's counterexample, as the code that says it fails (in this order).
COUNTEREXAMPLE_PROPERTIES: tuple[tuple[str, Callable], ...] = (
    ("counterexample-not-3x3", lambda m: m.shape != (3, 3)),
    ("counterexample-negative-entries", lambda m: m.shape == (3, 3) and bool((m < 0).any() or not np.isfinite(m).all())),
    ("counterexample-columns-not-normalized",
     lambda m: m.shape == (3, 3) and not np.allclose(m.sum(axis=0), 1.0, atol=1e-9, rtol=0)),
    # every row a unit total, the first included: the more telling of the two
    ("counterexample-row-normalized", lambda m: m.shape == (3, 3) and _rows_sum_to_one(m)),
    ("counterexample-first-row-sums-to-one",
     lambda m: m.shape == (3, 3) and not _rows_sum_to_one(m) and bool(np.isclose(m[0].sum(), 1.0, atol=1e-9, rtol=0))),
)


def _float32_columns(matrices: list) -> str | None:
    """Where each counterexample's columns miss one by no more than float32 rounding, and every
    number in it is one a float32 holds: what to say of it; else None."""
    misses = []
    for m in matrices:
        if not (isinstance(m, np.ndarray) and m.shape == (3, 3) and np.isfinite(m).all()
                and np.array_equal(m.astype(np.float32).astype(np.float64), m)):
            return None
        misses.append(float(np.max(np.abs(m.sum(axis=0) - 1.0))))
    if not misses or not all(1e-9 < miss <= 1e-6 for miss in misses):
        return None
    return (f"Its columns miss one by {max(misses):.2g} at most: rounding, beyond the 1e-9 the exercise allows. "
            "Every number in it is one a float32 holds, which points to an array made or cast as float32 "
            "(`dtype=np.float32`), whose numbers carry about seven digits. Build it in float64, numpy's default, "
            "or from fractions whose sums are exact.")


def counterexample_codes(matrix: np.ndarray) -> list[str]:
    """The codes of the conditions the returned matrix fails, each a true sentence about it."""
    return [code for code, fails in COUNTEREXAMPLE_PROPERTIES if fails(matrix)]


_NAMES: dict[str, tuple[str, ...]] = {}


def inspect_names(fn: str) -> tuple[str, ...]:
    """The argument names of a contract function, read from the reference's signature."""
    if fn not in _NAMES:
        from solutions import attention_head as reference

        _NAMES[fn] = tuple(inspect.signature(getattr(reference, fn)).parameters)
    return _NAMES[fn]


_TYPE_LOOKS = {
    "bool": "Return one answer, True or False, for the whole matrix: reduce a test of every entry or every "
            "row to one with `np.all(...)`, or `bool(...)`, and check that every path through the function "
            "ends in `return`.",
    "facts": "Return a dict with the four keys the docstring names: divisor (a float), score_shape and "
             "output_shape (tuples), softmax_axis (an int).",
    "dict": "Return a dict with the four keys the docstring names, each holding a plain numpy array: "
            "weights_before, weights_after, output_before, output_after.",
}
"""The advice for a value of the wrong type, where the function returns something other than arrays."""


_NOTHING_TOLD = Run(outcomes=[])
"""A run that tells nothing besides its outcomes (for a step graded on its own)."""


def grade_step(step: Step, cases: list[Case], expected: list[list[dict]], outcomes: list[list[Outcome | None]],
               earlier: dict[str, StepResult], told: Run | None = None,
               mistakes: dict[str, list] | None = None, raised: set | None = None,
               provisional: dict[str, StepResult] | None = None, unreached: dict | None = None) -> StepResult:
    """`told`: the submission's run, for what it tells besides the step's outcomes, which the
    feedback's words draw on: the notebook cells that stopped with an error (which may be why a name
    is missing), the values its functions read from outside, the names bound by two cells or more,
    names defined only in cells the graders skip or in `%%timeit` cells, parameters with defaults.
    `unreached`: the functions never defined though the notebook holds their defs, each with why
    (`unreached_functions` of `told`).
    `mistakes`: the earlier steps' own mistakes, as models (see `_reproducing`), for carrying an
    error forward; this step's are added. None grades the step on its own.
    `raised`: the earlier steps on which some call raised; this step is added when one of its calls
    does. None when unknown (the diagnosis codes stand in for it).
    `provisional`: where a step no other builds on keeps its credit carried from an earlier mistake
    that explains only exceptions, its grade on its own cases is put here, for carry.py to give it
    back if calling it again shows a wrong value of its own. None: such credit is final.

    Models run here as the student's code ran: an overflow gives infinity or NaN, never an
    exception or a warning (one np.errstate for the step, not one per model run)."""
    with _step_running(), np.errstate(all="ignore"):
        return _grade_step(step, cases, expected, outcomes, earlier, told or _NOTHING_TOLD, mistakes, raised,
                           provisional, unreached or {})


def _grade_step(step: Step, cases: list[Case], expected: list[list[dict]], outcomes: list[list[Outcome | None]],
                earlier: dict[str, StepResult], told: Run, mistakes: dict[str, list] | None,
                raised: set | None, provisional: dict[str, StepResult] | None, unreached: dict) -> StepResult:
    public = next((case.label for case in cases if case.public), "the chapter's example")
    verdicts = [[_judge_call(case, i, outcomes[c][i], expected[c][i], public) for i in range(len(case.calls))]
                for c, case in enumerate(cases)]
    if raised is not None and any(v.kind == "raised" for case_verdicts in verdicts for v in case_verdicts):
        raised.add(step.id)
    passed = [all(v.ok for v in case_verdicts) for case_verdicts in verdicts]
    flat = [v for case_verdicts in verdicts for v in case_verdicts]
    total = len(cases)
    score = round(step.points * sum(passed) / total, 2)

    kinds = {v.kind for v in flat}
    if all(v.kind == "not-implemented" for v in flat):
        status = "not_implemented"
    elif all(passed):
        status = "passed"
    elif "fault" in kinds and any("timeout" in v.codes or "time-budget" in v.codes for v in flat):
        status = "timeout"
    elif "fault" in kinds:
        status = "error"
    else:
        status = "partial" if any(passed) else "failed"

    failing_uses = _failing_uses(step, status, {v.raised_in for v in flat if v.raised_in}, earlier)
    found = _Findings([]) if status == "passed" else _diagnose(step, cases, verdicts, passed, expected, failing_uses,
                                                             earlier, raised)
    if "wrong-type" in found.codes and "wrong-type" not in found.looks:
        # what the function returns, in the words of its docstring, where "plain arrays" is not it
        kinds = {RETURNS[call.fn][0] for case, case_verdicts in zip(cases, verdicts)
                 for call, v in zip(case.calls, case_verdicts) if v.kind == "wrong-type"}
        if len(kinds) == 1 and kinds <= _TYPE_LOOKS.keys():
            found.looks["wrong-type"] = _TYPE_LOOKS[kinds.pop()]
    codes = found.codes
    first = _first_failure(cases, verdicts, _showing(found))
    if "crashed" in codes and "crashed" not in found.looks and (first is None or first[2].kind != "raised"):
        # The call shown did not raise (it has the wrong shape, say): the advice names one that did.
        raising = _first_failure(cases, verdicts, lambda v: v.kind == "raised")
        if raising is not None and raising[2].kind == "raised":
            case, index, _ = raising
            call = case.calls[index]
            found.looks["crashed"] = (f"Call {call.shown(inspect_names(call.fn))}, with the shapes of {case.label}, "
                                      "and read the error.")
    shown, detail = (None, "")
    if first is not None:
        shown, detail = _call_shown(*first[:2]), first[2].full_detail()
        if codes == ["crashed"] and first[2].kind == "raised":
            # the crash is all that is named: a call that returned a wrong answer is shown too
            # (a row loop that raises on a batch and also lets NaN through)
            wrong = _first_failure(cases, verdicts, lambda v: v.kind in ("mismatch", "wrong-type"))
            if wrong[2].kind in ("mismatch", "wrong-type"):
                detail = _joined(detail, f"{NOT_ONLY_RAISED} {_call_shown(*wrong[:2])}.", wrong[2].full_detail())
        elif "non-finite" in codes and first[2].nonfinite:
            # NaN is not all that is wrong: a call that returned finite numbers, wrong too, is shown
            # (a max taken elementwise for the row's, which is wrong everywhere and NaN on large scores)
            wrong = _first_failure(cases, verdicts, lambda v: v.kind == "mismatch" and not v.nonfinite)
            if wrong[2].kind == "mismatch" and not wrong[2].nonfinite:
                detail = _joined(detail, f"{NOT_ONLY_NONFINITE} {_call_shown(*wrong[:2])}.", wrong[2].full_detail())
    # where no modelled mistake is named: what the functions take from outside their arguments; and
    # always, a parameter the graders never pass (its default, fixed when the def ran, is on every
    # call: a model that happens to give that constant, `d_k = q.ndim` for the example's 2, may be
    # named beside it, but the parameter is what the student wrote)
    # (the setup's own example arrays are told whatever else is named: a function of the chapter's
    # that reads `W_Q` has the example's sizes on every call, which a model may only mimic)
    # (and every value read from outside where what is named is a size written in as the example's:
    # a global the function reads, or one it kept from the example's call, gives that size too)
    read_outside = _joined(_read_outside(step, told.outside, told.bound,
                                         None if set(codes) <= _UNEXPLAINED or any(derived.EXAMPLE_SIZE in code
                                                                                   for code in codes)
                                         else SETUP_NAMES),
                           _defaults_never_passed(step, told.defaults, told.unset))
    if read_outside:
        # a function that reads the example's values from outside returns the example's shapes, and
        # raises on sizes that are the example's: no sum or index of its own is what the shape look
        # would guess at, and no size of the call is what a wrong size stands for
        found.looks.pop("wrong-shape", None)
        for code in found.sized:
            found.looks.pop(code, None)
    detail = _joined(detail, found.relation, read_outside,
                     _rows_reached(step, cases, verdicts) if set(codes) <= _UNEXPLAINED else "")
    calls = [call for case in cases for call in case.calls]
    missing = sorted({call.fn for call, v in zip(calls, flat) if v.raised == "MissingName"})
    if missing and not detail:
        # (a name a stopped cell would have defined: the first line says so, and the cell is listed)
        detail = "" if set(missing) <= set(unreached) else \
            f"Your module defines no function named {', '.join(f'`{fn}`' for fn in missing)}."
        if told.stopped:
            detail = _joined(detail, feedback.stopped_cells(told.stopped, set(unreached)))
        detail = _joined(detail, *(f"`{fn}` is defined in cell {told.discarded[fn]}, a `%%timeit` cell: IPython "
                                   f"runs its body with a namespace of its own, so what it defines is gone once the "
                                   f"cell ends (after Run All, Jupyter has no `{fn}` either). Define it in a cell of "
                                   f"its own, and time it in another." for fn in missing
                                   if unreached.get(fn) == feedback.DISCARDED and fn in told.discarded))
    elif told.stopped and any(v.raised == "NameError" for v in flat):
        # a name the function looks up was never defined: a cell that stopped early may be why
        # (`from scipy.special import softmax` in a cell of its own, say)
        detail = _joined(detail, feedback.stopped_cells(told.stopped, set(unreached)))
    if status != "passed":
        detail = _joined(detail, _bound_again(step, told.bound), _only_in_skipped_cells(flat, told.skipped))
    carried_result = None
    if mistakes is not None and status != "passed":
        wants = [want for case_expected in expected for want in case_expected]
        sources = _carried_from(step, calls, flat, wants, failing_uses, mistakes) \
            or _raised_as_the_head(step, flat, told, earlier)
        if sources:
            carried_codes_ = carried_codes(codes, sources, earlier)
            # carried until called again, on its exceptions alone: said as such
            on_exceptions = provisional is not None and step.id not in _BUILT_ON and _only_raised(flat)
            carried_result = StepResult(step.id, step.points, step.points, status,
                                        feedback.carried_feedback(step, sources, carried_codes_, total,
                                                                  on_exceptions=on_exceptions),
                                        carried_codes_, sum(passed), total, list(passed),
                                        carried_from=carried_source(sources, carried_codes_, earlier))
            if provisional is None or step.id in _BUILT_ON or not _only_raised(flat):
                return carried_result
        elif codes and step.id in _BUILT_ON:
            mistakes[step.id] = _reproducing(step, calls, flat, wants, codes)
    told = {}
    for code in (code for code in codes if code not in READ_FROM_LOOK):  # (those are this step's own values')
        # told where it was explained: a step carried names it only
        showing = [used for used in failing_uses if code in earlier[used].diagnoses]
        told_at = [used for used in showing if not earlier[used].carried_from] or list(dict.fromkeys(
            earlier[used].carried_from for used in showing))
        if told_at:
            told[code] = told_at
    shown_status = next((unreached[fn] for fn in missing if fn in unreached), status) \
        if status == "not_implemented" else status
    text = feedback.step_feedback(step, shown_status, sum(passed), total, codes, shown, detail,
                                  {used: step_state(earlier[used], unreached) for used in _first_causes(failing_uses)},
                                  told,
                                  alternatives=found.alternatives, looks=found.looks, seen=found.seen)
    own = StepResult(step.id, score, step.points, status, text, codes, sum(passed), total, list(passed))
    if carried_result is not None:
        # Where it failed, it only raised, inside an earlier step's function, as that step's mistake
        # does: the lines of its own after that call never ran. Its credit stands until it is called
        # again with the chapter's functions in place (carry.py): a wrong value it then returns
        # (`v.sum(0)` behind a softmax that raised) gives it back this grade of its own cases.
        provisional[step.id] = own
        return carried_result
    return own


READ_FROM_LOOK = frozenset({"crashed", "hard-coded", "wrong-shape", "non-finite", "timeout", "time-budget", "exit-called",
                            "wrong-type", "not-implemented", "slightly-off", "low-precision", "half-precision",
                            "batch-axes-mixed", "mutates-input", "memory-limit", "unreadable"})
"""Codes read from the look of a step's own values or from how its calls ended, not from a model of
a mistake: said of each step whose values show them, with the cases they show on, never as told."""

# ------------------------------------------------------------------ the error carried forward ----

_BUILT_ON = frozenset(used for step in STEPS for used in step.uses)
"""Steps another builds on: only their mistakes can be carried forward."""

_MOST_COMBINATIONS = 64  # of the earlier steps' models tried together on one step


def carried_source(sources: list[str], codes: list[str], earlier: dict[str, StepResult]) -> str:
    """The step a carried step's `carried_from` names: the first of `sources` whose own diagnoses
    include a code the step shows (a mix that transposes 3-D weights, not a scale beside it), else
    the first cause."""
    return next((used for used in sources if set(earlier[used].diagnoses) & set(codes)), sources[0])


def carried_codes(codes: list[str], sources: list[str], earlier: dict[str, StepResult]) -> list[str]:
    """The codes a step carried forward from `sources` names. Its own work checks out, so they are
    the earlier steps' (those of them its values showed, or else all they named there), never what
    its values would suggest read alone (the batch rule's "batch-axes-mixed" for a softmax over
    axis 1, say)."""
    named = list(dict.fromkeys(code for used in sources for code in earlier[used].diagnoses))
    return [code for code in codes if code in named] or named


def _reproducing(step: Step, calls: list, flat: list[_CallVerdict], wants: list[dict], codes: list[str]) -> list:
    """The models of the step's function, with no slip but those diagnosed, that reproduce every
    call of the step within the grading tolerance: the student's mistake, exactly. Empty when the
    step has a fault, an unmodelled value or more than one function (no later step builds on those)."""
    if len(step.functions) != 1 or step.functions[0] not in diagnoses.PIPELINES:
        return []
    fn, named = step.functions[0], set(codes)
    found = []
    for depth in (1, 2) if len(named) > 1 else (1,):
        within = (_pairs_within(fn, frozenset(named)) if depth == 2 else
                  [(n, slip_codes, model) for n, (slip_codes, _, model) in enumerate(diagnoses.models(fn, 1))
                   if set(slip_codes) <= named])
        for n, slip_codes, model in within:
            if _reproduces(model, (fn, depth, n), calls, flat, wants):
                found.append((fn, model))
        if found:
            break  # the fewest slips that do
    if not found:
        found = [(fn, derived.model(code)) for code in codes if derived.is_derived(code) and derived.fn_of(code) == fn
                 and _reproduces(derived.model(code), (fn, "derived", code), calls, flat, wants)]
    return found


_HEAD_AT = next(number for number, step in enumerate(STEPS) if step.id == "head")


def _raised_as_the_head(step: Step, flat: list[_CallVerdict], told: Run, earlier: dict[str, StepResult]) -> list[str]:
    """["head"] for the batch step whose every failing call raised as the head's own failing calls
    raise (the same exception, from the same function), where the head fails with a mistake of its
    own: the batch calls the head's own function, which nothing may stand in for, and its lines
    after that point never ran. Its credit is carried on those exceptions alone, until each batch
    call made again example by example shows a wrong value of its own (carry.py); else []."""
    head = earlier.get("head")
    if step.id != "batch" or head is None or head.status == "passed" or head.carried_from \
            or len(told.outcomes) <= _HEAD_AT:
        return []
    seen = {(outcome.raised.get("type"), raised_in(outcome.raised.get("where")))
            for outcome in told.outcomes[_HEAD_AT] if outcome is not None and outcome.raised}
    failing = [verdict for verdict in flat if verdict.kind != "ok"]
    if seen and failing and all(verdict.kind == "raised" and (verdict.raised, verdict.raised_in) in seen
                                for verdict in failing):
        return ["head"]
    return []


def _only_raised(flat: list[_CallVerdict]) -> bool:
    """Did every failing call raise (none returned a wrong value)?"""
    return all(verdict.kind == "raised" for verdict in flat if verdict.kind != "ok")


def _carried_from(step: Step, calls: list, flat: list[_CallVerdict], wants: list[dict],
                  failing_uses: list[str], mistakes: dict[str, list]) -> list[str]:
    """The earlier steps whose mistakes alone explain this step's every value, first cause first;
    empty when its own work does not check out.

    Verified, never assumed: the reference's own function for this step is run with the earlier
    steps' functions replaced by the models that reproduced them there, and every call must give
    what the student's gave, within the grading tolerance (or the same exception, message and
    all). A mistake of the step's own, a guess or a value copied from the example shows as a call
    no such model gives, and the step is graded on its own.
    """
    sources = [used for used in failing_uses if mistakes.get(used)]
    if not sources or len(step.functions) != 1:
        return []
    fn = step.functions[0]
    for chosen in itertools.islice(itertools.product(*(mistakes[used] for used in sources)), _MOST_COMBINATIONS):
        replacements = tuple((used_fn, model) for used_fn, model in chosen)
        key = ("carried", fn, tuple((used_fn, id(model)) for used_fn, model in chosen))
        if _reproduces(diagnoses.through_references(fn, replacements), key, calls, flat, wants):
            return sources
    return []


def _reproduces(model: Callable, key: tuple, calls: list, flat: list[_CallVerdict], wants: list[dict]) -> bool:
    """Does `model` give, on every call, what the student's code gave, within the grading tolerance?"""
    candidate = _Candidate((), model, True, key=key)
    for call, verdict, want in zip(calls, flat, wants):
        value, error, _ = _model_value(candidate, call, want)
        if verdict.kind == "raised":
            if error != (verdict.raised, verdict.raised_message):
                return False
        elif verdict.kind not in ("ok", "mismatch") or error is not None or value is None \
                or verdict.actual is None or not _same_value(verdict.actual, value):
            return False
    return True


def _same_value(actual: dict, model: dict, keep: bool = True) -> bool:
    """Grading's comparison (1e-9), where NaN in the model's value is matched by NaN in the student's:
    an overflow the earlier mistake causes gives the same NaN downstream. `keep=False`: `model` is
    another of the student's own values (see `allclose`)."""
    for name, part in model.items():
        got = actual.get(name)
        if isinstance(part, np.ndarray):
            if not isinstance(got, np.ndarray) or got.shape != part.shape \
                    or not allclose(got, part, RTOL, ATOL, equal_nan=True, keep=keep):
                return False
        elif differences({name: got}, {name: part}, False, describe=False):
            return False
    return True


def _failing_uses(step: Step, status: str, came_from: set, earlier: dict[str, StepResult]) -> list[str]:
    """Earlier steps this one builds on that do not pass: their mistakes may be what this step shows.
    `came_from`: the submission's functions the step's exceptions came from (see `raised_in`)."""
    if status == "passed":
        return []
    failing = [used for used in _all_uses(step) if used in earlier and earlier[used].status != "passed"]
    if status == "not_implemented":  # blame an earlier step only if the NotImplementedError came from it
        sources = came_from - set(step.functions)
        return [used for used in failing if sources & set(BY_ID[used].functions)]
    return failing


def _first_causes(failing: list[str]) -> list[str]:
    """Of the failing earlier steps, those not built on another failing one: where to start fixing."""
    return [used for used in failing if not set(_all_uses(BY_ID[used])) & set(failing)]


@dataclass
class _Findings:
    """What the judge found on a failing step, for the feedback to say."""

    codes: list[str]
    alternatives: list[tuple] = field(default_factory=list)
    """Groups of code tuples: within a group, each reproduces the student's numbers equally well."""
    looks: dict[str, str] = field(default_factory=dict)
    """Advice that replaces a code's general advice, where the evidence says more."""
    seen: dict[str, list[str]] = field(default_factory=dict)
    """For a code read from the look of the values (NaN, a shape, an exception): the cases showing it."""
    relation: str = ""
    """Where no mistake is named: how every wrong value relates to the expected one, if simply."""
    sized: set = field(default_factory=set)
    """The codes whose advice reads a size off the call (`_sized_wrongly`): which of the call's sizes
    a wrong one stands for, which holds only where every size came from the call's arguments."""


def _labels(cases: list[Case], verdicts: list[list[_CallVerdict]], test) -> list[str]:
    return [case.label for case, case_verdicts in zip(cases, verdicts) if any(test(v) for v in case_verdicts)]


# Where to look when every batch raised and every single sequence ran: code for one sequence only.
# What an exception's own message says of the line that raised it, whatever the code around it.
_SIZES_DIFFER = "the docstring's sizes need not be equal (W_V's width d_v need not be d_k, nor T be d_k)"
_NUMBER_FOR_ARRAY = (
    "A single number (an array of no axes) reached a line that works on an array's axes: on the calls that "
    "raised, something meant to be an array holds one number. Look for a name used for both: a loop "
    "variable named like an argument (`for a in rows:` over the weights `a`), a size unpacked into an array's "
    "name (`t, k = x.shape`), or a sum or an index that leaves one number where a row belongs.")
_OUT_MISFIT = (
    "An array that a result is written into (`out=`, or the left of an in-place `+=`, `*=`, `/=`) does not have "
    "the result's shape on the calls that raised: it was made in another array's shape (`np.empty_like(x)`, "
    f"`np.zeros_like(d)`) or with sizes that agree only where two sizes happen to be equal: {_SIZES_DIFFER}. "
    "Make it in the shape of the result, or drop `out=` and keep what the operation returns.")
_PRODUCT_MISFIT = (
    "The two sides of a product (`@`, `np.matmul`, `np.dot`) do not fit on the calls that raised: the left's last "
    "axis must be as long as the right's second-to-last (its only axis, for a vector). One of them was built or "
    "read with another size than its partner's (`np.zeros(T)` where d_k entries belong, a size read off the "
    "wrong array), or one lacks a transpose it needs, or has one too many; `np.dot` of two vectors is their inner "
    "product, one number, where `np.outer` gives every product of the two.")
_MESSAGE_ADVICE = (
    ("axes don't match array",
     "numpy's `transpose` takes a new place for every axis (`k.transpose(0, 2, 1)` on a batch), not the two "
     "axes to swap, as torch's `k.transpose(-1, -2)` does: `np.swapaxes(k, -1, -2)` swaps the last two, "
     "whatever comes before them."),
    ("all input arrays must have the same shape",
     "Some line stacks arrays (`np.stack`, `np.array([...])`) whose shapes differ on the calls that raised: "
     f"{_SIZES_DIFFER}. Keep such arrays apart, or stack only arrays of one shape."),
    ("inhomogeneous shape",
     "Some line makes one array of arrays whose shapes differ on the calls that raised (`np.array([...])` of "
     f"rows or matrices of different lengths): {_SIZES_DIFFER}. Keep such arrays apart."),
    ("input array dimensions except for the concatenation axis must match",
     "Some line joins arrays (`np.concatenate`, `np.vstack`, `np.hstack`) whose other axes differ on the calls "
     f"that raised: {_SIZES_DIFFER}. Keep such arrays apart, or join them along the axis whose size they do not "
     "share."),
    ("is out of bounds for axis",
     "An index went past the end of an array on the calls that raised: a loop bound or an index worked out from "
     "another size than the axis it runs over (`range(d_k)` over d_v entries, a flat index `i * n + j` with n "
     "the wrong width), which sizes that happen to be equal hide. Bound each loop by the length of the axis it "
     "indexes (`a.shape[-1]`, say)."),
    ("for array of dimension 0", _NUMBER_FOR_ARRAY),
    ("does not have enough dimensions (has 0", _NUMBER_FOR_ARRAY),
    # numpy's words for an `out=` (or the left of `+=`) that cannot hold the result: before the
    # product's, whose message names the output operand's core dimension too
    ("Output operand", _OUT_MISFIT),
    ("non-broadcastable output operand", _OUT_MISFIT),
    ("output array has wrong dimensions", _OUT_MISFIT),
    ("has a mismatch in its core dimension", _PRODUCT_MISFIT),
    ("not aligned", _PRODUCT_MISFIT),
    (("matrix.", "unexpected keyword argument"),
     "An `np.matrix` reached this line: its methods (`max`, `sum`) take no `keepdims`, it is always 2-D, and its "
     "`*` is a matrix product. Somewhere before it an array became a matrix (`np.asmatrix`, `np.matrix`, "
     "`np.mat`): keep plain arrays (`np.asarray`) and write products with `@`."),
    ("list indices must be integers or slices",
     "A Python list was indexed with a list of indices, which only numpy arrays take: an array became a list on "
     "the way (`list(v)`, `v.tolist()`, a list comprehension). Keep it an array (`np.array(v, dtype=float)` makes "
     "a copy)."),
    ("could not be broadcast together",
     "Two arrays whose shapes do not broadcast met in one operation on the calls that raised (numpy lines their "
     "axes up from the last, and each pair of sizes must be equal, or one of them 1). One has a shape you did not "
     "mean: a size passed as a whole shape (`q.shape` where `q.shape[-1]` belongs), a total that dropped its axis "
     "(no `keepdims=True`), or a transpose missing or added."),
    ("is out of bounds for array of dimension",
     "An array reached a line that asks for an axis it does not have (an `axis=` or a swap beyond its number "
     "of axes), on the calls that raised. The docstrings allow such arrays where they say so: a matrix that is "
     "not 2-D, which the predicate answers False for, a batch, or T = 1. Test the number of axes first "
     "(`a.ndim`), or count axes from the end (`axis=-1`)."),
    (("Cannot cast ufunc", "to dtype('int"),
     "An in-place operation (`+=`, `*=`, `out=`) writes float results into an array of integers: that array was "
     "made with an integer type (`dtype=int`, `.astype(int)`, `np.zeros_like` of an integer array, or an "
     "argument of integers kept as it came). Make it a float array (`np.array(v, dtype=float)`) before "
     "writing into it."),
)


_ASSERTED = ("An `assert` of yours (or a check that raises AssertionError) stopped every call that failed here. "
             "Where it tests an argument, it asks more than the docstring does: the calls shown are allowed (the "
             "docstrings allow a batch where they say so, T = 1, d_k other than d_v, and any sizes). Where it "
             "tests something your code computed, the lines before it compute something else than the chapter "
             "asks for, on these calls.")


def _raised_advice(verdicts: list) -> str | None:
    """The advice of `_MESSAGE_ADVICE` where every one of the calls raised with that message."""
    for text, advice in _MESSAGE_ADVICE:
        texts = (text,) if isinstance(text, str) else text
        if verdicts and all(v.kind == "raised" and all(part in (v.raised_message or "") for part in texts)
                            for v in verdicts):
            return advice
    return None


_RAISES_ON_A_BATCH = (
    "Each batch that failed raised, where every single sequence ran: some line takes a [T, d] array "
    "only. Look for einsum subscripts with two axes (`'ti,ij->tj'`; `'...ti,ij->...tj'` takes a batch), "
    "a check or assert that an input is 2-D or square, `.T` (which reverses all three axes of a batch), "
    "`np.dot`, `np.inner` or `np.tensordot` (which pair the batch axis with every axis of the other "
    "operand, where `@` keeps it), `np.matrix` or `np.asmatrix` (always 2-D), a loop over `range(x.shape[0])` "
    "that takes B for T, or an index array built for one sequence. Count axes from the end, or run the head on each example alone and stack "
    "the results.")


def _examples_merged(verdicts: list[_CallVerdict], wants: list[dict]) -> bool:
    """Is every wrong batch value the expected one with its batch axis merged into the positions
    ([B·T, d_v] for [B, T, d_v]), its numbers right?"""
    if not verdicts:
        return False
    for verdict, want in zip(verdicts, wants):
        if verdict.kind != "mismatch" or verdict.actual is None:
            return False
        for name, part in want.items():
            got = verdict.actual.get(name)
            if not isinstance(part, np.ndarray) or not isinstance(got, np.ndarray) or part.ndim < 3 \
                    or got.shape != (part.shape[0] * part.shape[1],) + part.shape[2:] \
                    or not allclose(got.reshape(part.shape), part, RTOL, ATOL, keep=False):
                return False
    return True


_BATCH_ONLY_EDITS = ("-op-matmul-to-dot", "-op-lastdim-to-dim1")
"""Derived edits of the head that give one sequence the chapter's numbers and a batch others."""


def _batch_only_edit(step: Step, calls: list, flat: list[_CallVerdict], wants: list[dict]) -> str | None:
    """The derived edit of the head, of those that change a batch only (`np.dot` for `@`), that gives
    the student's value, or very exception, on every call of the batch step (the reference's on the
    calls that pass), where exactly one does; else None."""
    found = []
    for code, model in derived.models(step.functions[0]):
        if not code.endswith(_BATCH_ONLY_EDITS):
            continue
        candidate = _Candidate((code,), model, False, key=(step.functions[0], "derived", code))
        for call, verdict, want in zip(calls, flat, wants):
            value, error, _ = _model_value(candidate, call, want)
            if verdict.kind == "raised":
                fits = error == (verdict.raised, verdict.raised_message)
            elif verdict.kind == "ok":
                fits = error is None and value is not None and _same_value(want, value)
            else:
                fits = (verdict.kind == "mismatch" and error is None and value is not None and verdict.actual is not None
                        and _same_value(verdict.actual, value))
            if not fits:
                break
        else:
            found.append(code)
    return found[0] if len(found) == 1 else None


def _diagnose(step: Step, cases: list[Case], verdicts: list[list[_CallVerdict]], passed: list[bool],
              expected: list[list[dict]], failing_uses: list[str], earlier: dict[str, StepResult],
              raised: set | None = None) -> _Findings:
    """The step's diagnosis codes: what the runner saw, then the misconceptions that explain the values."""
    flat = [v for case_verdicts in verdicts for v in case_verdicts]
    codes: list[str] = []
    for v in flat:
        for code in v.codes:
            if code not in codes:
                codes.append(code)
    wrong = [i for i, v in enumerate(flat) if v.kind in ("mismatch", "raised", "wrong-type")]
    if step.id == "batch" and "head" in earlier and earlier["head"].status == "passed":
        # The same function works on one sequence, so only the batch axis can be at fault; but a
        # batch's results returned in another form (a list of pairs, say) is what wrong-type says.
        found = _Findings(codes + (["batch-axes-mixed"] if any(flat[i].kind != "wrong-type" for i in wrong) else []))
        wants = [want for case in expected for want in case]
        sized = _sized_wrongly([call for case in cases for call in case.calls], flat, wants, wrong)
        if sized and set(wrong) <= sized[1] and "B" not in sized[2]:
            # each example computed right, and kept in an array made beforehand of another width
            found = _Findings(codes + ["wrong-shape"], looks={"wrong-shape": sized[0]}, sized={"wrong-shape", "crashed"})
            found.seen["wrong-shape"] = _labels(cases, verdicts, lambda v: v.kind == "mismatch")
            if any(flat[i].kind == "raised" for i in wrong):
                found.codes.append("crashed")
                found.seen["crashed"] = _labels(cases, verdicts, lambda v: v.kind == "raised")
                found.looks["crashed"] = _RAISED_SIZED
            if not any(flat[i].kind == "mismatch" for i in wrong):  # every one raised: no shape was returned
                found.codes.remove("wrong-shape")
                found.looks["crashed"] = sized[0]
            return found
        missing = _examples_left_out([flat[i] for i in wrong], wants, wrong)
        if "batch-axes-mixed" in found.codes and all(flat[i].kind == "raised" for i in wrong):
            found.looks["batch-axes-mixed"] = _raised_advice([flat[i] for i in wrong]) or _RAISES_ON_A_BATCH
        typed = [i for i in wrong if flat[i].kind == "wrong-type"]
        if typed:  # (those that raised show their own exception: `np.stack` of pairs of two shapes)
            per_example = [_pairs_per_example(flat[i].raw, wants[i]) for i in typed]
            if all(per_example):
                found.looks["wrong-type"] = (
                    ("Where it returned, you" if len(typed) < len(wrong) else "You")
                    + " returned one (o, a) pair per example of the batch"
                    + (", each of them right" if all(kind == "right" for kind in per_example) else "")
                    + ": the step asks for one pair of stacked arrays, o [B, T, d_v] and a [B, T, T]. Stack "
                    "the outputs and the weights (`np.stack`) before returning them.")
        line = _batch_only_edit(step, [call for case in cases for call in case.calls], flat, wants) \
            if "batch-axes-mixed" in found.codes else None
        if line is not None:  # the very line: one that gives one sequence's numbers, and not a batch's
            found.codes.append(line)
            found.looks["batch-axes-mixed"] = ("The line named below gives the same numbers as the chapter's "
                                               "on one sequence, and not on a batch.")
        if "batch-axes-mixed" in found.codes and line is None and _examples_merged([flat[i] for i in wrong],
                                                                                   [wants[i] for i in wrong]):
            found.looks["batch-axes-mixed"] = (
                "Your results hold every example's right numbers, the examples' rows one after another: the "
                "examples were joined along the positions (`np.concatenate`, or a reshape to B·T rows), not "
                "stacked. `np.stack` puts the batch axis first, as the step asks: o [B, T, d_v], a [B, T, T].")
            if all(len(part) == 1 for i in wrong for part in wants[i].values() if isinstance(part, np.ndarray)):
                found.looks["batch-axes-mixed"] = (  # [1·T, d_v] is [T, d_v]: the batch axis dropped
                    "On a batch of one example you returned that example's right numbers without the batch axis "
                    "([T, d_v] and [T, T] for [1, T, d_v] and [1, T, T]): something drops an axis of length one "
                    "(`np.squeeze`, `[0]`, a test such as `len(x) == 1`). A batch of one is still a batch.")
        unfilled = _example_unfilled([flat[i] for i in wrong], [wants[i] for i in wrong])
        if unfilled is not None and "batch-axes-mixed" in found.codes and not missing:
            found.looks["batch-axes-mixed"] = (
                f"Your results hold every example's right numbers but the {unfilled} example's: as if the examples "
                f"were written into arrays made beforehand and the {unfilled} never was, as a loop over "
                f"`{'range(B - 1)' if unfilled == 'last' else 'range(1, B)'}` leaves it (`np.empty` holds whatever "
                f"was in memory). Loop over `range(B)`, or stack the results.")
        kept = None if missing else _one_example_kept([flat[i] for i in wrong], [wants[i] for i in wrong])
        if kept and "batch-axes-mixed" in found.codes:
            found.looks["batch-axes-mixed"] = (
                f"Your results hold the {kept} example of the batch alone, right: as a loop over the examples "
                + ("leaves them where its results are kept after it ends, from its last pass (an append, or an "
                   "assignment, outside the loop's body)" if kept == "last" else
                   "leaves them where it returns from inside its first pass")
                + ". Keep every example's output and weights, and stack them: o [B, T, d_v], a [B, T, T].")
        misplaced = None if missing or kept or unfilled else _examples_misplaced([flat[i] for i in wrong],
                                                                                 [wants[i] for i in wrong])
        if misplaced and "batch-axes-mixed" in found.codes:
            found.looks["batch-axes-mixed"] = misplaced
        if missing and "batch-axes-mixed" in found.codes:
            short = "range(B - 1)" if missing == "last" else "range(1, B)"
            found.looks["batch-axes-mixed"] = (
                f"Your results hold every example of the batch but the {missing}, each of them right: a loop over "
                f"the examples one short (`{short}`, where it should be `range(B)`), or a slice that leaves "
                f"one out. Keep every example's output and weights.")
        if "batch-axes-mixed" in found.codes and "batch-axes-mixed" not in found.looks and line is None \
                and all(flat[i].kind == "mismatch" for i in wrong):
            # Numbers left at 0, cut to whole ones or held at a bound (the weights written into an
            # integer array made for the batch, say) show nothing of an axis moved: what they show is
            # told, as on any other step, and no batch axis is blamed.
            arrays = _wrong_arrays([(flat[i], wants[i]) for i in wrong])
            shown = arrays and _numbers_cut(arrays)
            if shown:
                found.codes.remove("batch-axes-mixed")
                found.relation = shown
        return found
    if (step.id == "batch" and wrong and all(flat[i].kind == "raised" for i in wrong) and "head" in earlier
            and earlier["head"].status in ("failed", "partial")
            # the head raised on no call of its own (a model may explain an exception it raised)
            and ("head" not in raised if raised is not None else "crashed" not in earlier["head"].diagnoses)):
        # The head returns values on one sequence, and raises on every batch: code written for 2-D
        # arrays only. Only the head's own verified mistake, raising the very same exceptions on
        # every batch, may name it otherwise: another slip whose model happens to raise the same
        # text says nothing.
        calls = [call for case in cases for call in case.calls]
        wants = [want for case_expected in expected for want in case_expected]
        models, explained, alternatives = _explanations(calls, flat, wants, failing_uses, earlier, own=False)
        if set(wrong) <= explained:
            return _Findings(codes + [code for code in models if code not in codes], alternatives)
        return _Findings(codes + ["batch-axes-mixed"], looks={
            "batch-axes-mixed": _raised_advice([flat[i] for i in wrong]) or _RAISES_ON_A_BATCH})

    calls = [call for case in cases for call in case.calls]
    wants = [want for case_expected in expected for want in case_expected]
    models, explained, alternatives = _explanations(calls, flat, wants, failing_uses, earlier)
    for i, (call, verdict) in enumerate(zip(calls, flat)):
        # a counterexample no model gives is named by the conditions of the exercise it fails
        if call.fn == "column_normalized_counterexample" and verdict.kind == "mismatch" and i not in explained:
            models += [code for code in counterexample_codes(verdict.actual["counterexample"]) if code not in models]
            explained.add(i)
    codes += [code for code in models if code not in codes]
    unexplained = [v for i, v in enumerate(flat) if v.kind in ("mismatch", "raised") and i not in explained]
    alone = {id(v) for v in unexplained}
    found = _Findings(codes, alternatives)
    if "counterexample-columns-not-normalized" in codes:
        look = _float32_columns([v.actual["counterexample"] for call, v in zip(calls, flat)
                                 if call.fn == "column_normalized_counterexample" and v.kind == "mismatch"])
        if look:
            found.looks["counterexample-columns-not-normalized"] = look

    hidden = [c for c, case in enumerate(cases) if not case.public]
    # wrong values, or exceptions (`np.full(3, 1/3)` raises wherever T is not the example's 3)
    hidden_wrong = [c for c in hidden if any(v.kind in ("mismatch", "wrong-type", "raised") for v in verdicts[c])]
    example_right = all(ok for case, ok in zip(cases, passed) if case.public)
    mismatched = [v for v in flat if v.kind == "mismatch"]
    derived_codes = []
    shape_sized = None  # what `_sized_wrongly` said of the wrong shapes, where it said it
    batched = [c for c, case in enumerate(cases) if _batched(case)]
    close = bool(mismatched) and not models and all(v.close() for v in mismatched) and not any(
        v.kind == "raised" for v in flat)
    if (batched and unexplained and not models and step.id in _BATCH_ALLOWED
            and all(ok for c, ok in enumerate(passed) if c not in batched)):
        # Right on every single sequence, wrong only where a leading batch axis comes first: the
        # function's contract allows that batch, and something in it counts axes from the front.
        derived_codes.append("batch-axes-mixed")
        found.seen["batch-axes-mixed"] = _labels(cases, verdicts, lambda v: id(v) in alone)
        found.codes = codes + [code for code in derived_codes if code not in codes]
        return found
    # How every wrong array relates to the expected one, where one simple relation holds ("on every
    # case it failed": only where every failing call returned numbers); said where no model holds
    relating = not models and all(v.kind in ("ok", "mismatch") for v in flat)
    relation = _relation([(v, want) for v, want in zip(flat, wants) if v.kind == "mismatch" and id(v) in alone],
                         [call for call, v in zip(calls, flat) if v.kind == "mismatch" and id(v) in alone]) \
        if relating else ""
    if relating and example_right and hidden_wrong and _copied(cases, verdicts, hidden_wrong):
        # the example's own result, given for other inputs: whatever else the numbers look like
        relation = _example_returned(cases, hidden_wrong)
    if close and (any(v.float32() for v in mismatched)
                  or any("low-precision" in earlier[used].diagnoses for used in failing_uses)):
        derived_codes.append("low-precision")  # wrong by float32-sized errors, in numbers a float32 can hold
    elif (mismatched and not models and not any(v.kind == "raised" for v in flat)
          and all(v.close16() for v in mismatched)
          and (any(v.float16() for v in mismatched)
               or any("half-precision" in earlier[used].diagnoses for used in failing_uses))):
        derived_codes.append("half-precision")  # wrong by float16-sized errors, in numbers a float16 can hold
    elif close and not any(v.nonfinite or v.shape for v in unexplained):
        derived_codes.append("slightly-off")  # near every number, yet not within the tolerance: an epsilon, say
    elif (example_right and not models and len(hidden_wrong) >= 2 and sum(passed[c] for c in hidden) <= 1
          and not any(v.nonfinite for v in unexplained)  # NaN is no size taken from the example: said below
          # numbers clipped, or cut to whole ones, which the example's are not or never reach: said as they are
          and not any(mark in relation for mark in _OFF_THE_EXAMPLE)):
        derived_codes.append("hard-coded")  # right on the example, wrong almost everywhere else
        if _copied(cases, verdicts, hidden_wrong):
            found.looks["hard-coded"] = ("On the hidden cases you returned the very numbers of the chapter's "
                                         "example: compute them from the arguments you are given.")
        elif all(v.kind == "raised" for c in hidden_wrong for v in verdicts[c] if v.kind != "ok"):
            found.looks["hard-coded"] = _raised_off_the_example(cases, verdicts, hidden_wrong)
        elif all(v.shape for v in mismatched) and (cut := _leading_block(
                [(v, want) for v, want in zip(flat, wants) if v.kind == "mismatch"])):
            found.looks["hard-coded"] = cut  # the example's sizes hide the cut (its d_v is 2)
            found.sized.add("hard-coded")  # (it may say which of the call's sizes the error sets)
    else:
        if any(v.nonfinite for v in unexplained):
            derived_codes.append("non-finite")
            found.seen["non-finite"] = _labels(cases, verdicts, lambda v: v.nonfinite and id(v) in alone)
        if any(v.shape for v in unexplained):
            derived_codes.append("wrong-shape")
            found.seen["wrong-shape"] = _labels(cases, verdicts, lambda v: v.shape and id(v) in alone)
            look = _shape_look([(v, want) for v, want in zip(flat, wants) if v.shape and id(v) in alone])
            sized = None if look else _sized_wrongly(calls, flat, wants, [i for i, v in enumerate(flat) if id(v) in alone])
            if look or sized:
                found.looks["wrong-shape"] = look or sized[0]
                if not look:
                    found.sized.add("wrong-shape")
            shape_sized = sized
    if relating and set(derived_codes) <= {"non-finite"}:
        found.relation = relation or _wrong_where_weights_are_zero(calls, flat)
    if any(v.kind == "raised" for v in unexplained):
        derived_codes.append("crashed")
        found.seen["crashed"] = _labels(cases, verdicts, lambda v: v.kind == "raised" and id(v) in alone)
        if any(v.raised in ("ModuleNotFoundError", "ImportError") for v in unexplained):
            # an import that works where the student runs it (scipy installed), and not where graded
            found.looks["crashed"] = ("Your code imports a module the graders' Python does not have: it holds "
                                      "numpy and Python's standard library, nothing else. Write that part with numpy.")
        else:
            raised = [i for i, v in enumerate(flat) if v.kind == "raised" and id(v) in alone]
            sized = _sized_wrongly(calls, flat, wants, raised)
            if shape_sized and set(raised) <= shape_sized[1]:
                found.looks["crashed"] = _RAISED_SIZED
                found.sized.add("crashed")
            elif sized and set(raised) <= sized[1]:
                found.looks["crashed"] = sized[0]
                found.sized.add("crashed")
            elif all(flat[i].raised == "AssertionError" for i in raised):
                found.looks["crashed"] = _ASSERTED
            elif advice := _raised_where_one(calls, flat) or _raised_advice([flat[i] for i in raised]):
                found.looks["crashed"] = advice  # (where T = 1 alone raised, that says more than the message)
            elif any(case.public and any(v.kind == "raised" for v in vs) for case, vs in zip(cases, verdicts)):
                found.looks["crashed"] = "Run the function on the chapter's example and read the error."
    found.codes = codes + [code for code in derived_codes if code not in codes]
    return found


def _joined(*parts: str) -> str:
    """The feedback's detail lines, those that say something, one to a line."""
    return "\n".join(part for part in parts if part)


_RELATIONS = {  # how every wrong array relates to the expected one -> the sentence that says so
    "shift": "On every case it failed, every number of each wrong array is the expected one plus the same "
             "constant{each}.",
    "rows shift": "On every case it failed, each row of a wrong array is the expected row plus a constant of its own: "
                  "something adds or subtracts one number per row (its mean, maximum or minimum, say) that the "
                  "chapter's computation does not.",
    "columns shift": "On every case it failed, each column of a wrong array is the expected column plus a constant of "
                     "its own: something adds or subtracts one number per column (its mean, maximum or minimum, say).",
    "factor": "On every case it failed, each wrong array of yours is the expected one times the same factor{each}.",
    "rows factor": "On every case it failed, each row of a wrong array is the expected row times a factor of its own: "
                   "something multiplies or divides each row by one number (its sum, maximum or norm, say).",
    "columns factor": "On every case it failed, each column of a wrong array is the expected column times a factor of "
                      "its own: something multiplies or divides each column by one number (its sum, maximum or norm, say).",
}


def _layout(rows: int, columns: int) -> tuple:
    """(what the entries are called, mask) of each region of a [rows, columns] matrix that a loop
    stopping short, skipping, or filling only one part leaves as it was made."""
    every = np.ones((rows, columns), dtype=bool)
    diagonal = np.eye(rows, columns, dtype=bool)
    last_column, last_row, first_column, first_row = (every.copy() for _ in range(4))
    last_column[:, :-1] = last_row[:-1] = first_column[:, 1:] = first_row[1:] = False
    return (("the diagonal", diagonal), ("every entry off the diagonal", ~diagonal),
            ("every entry above the diagonal", np.triu(every, 1)), ("every entry below the diagonal", np.tril(every, -1)),
            ("the last column", last_column), ("the last row", last_row),
            ("the first column", first_column), ("the first row", first_row))


_ZEROED = ("Those numbers were set to 0, or never computed: a loop whose range stops short of them or skips "
           "them, or an array made with np.zeros and not filled there.")


def _wrong_arrays(pairs: list[tuple[_CallVerdict, dict]], finite_only: bool = False
                  ) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """(got, expected) of every array of the same shape that a failing call got wrong; None where one
    of them holds NaN or an infinity, which no simple relation describes (`finite_only`: the calls
    whose every wrong array is finite, the others left out)."""
    found = []
    for verdict, want in pairs:
        held = []
        for name, part in want.items():
            got = (verdict.actual or {}).get(name)
            if not (isinstance(part, np.ndarray) and isinstance(got, np.ndarray)) or got.shape != part.shape \
                    or not got.size or allclose(got, part, RTOL, ATOL, keep=False):
                continue
            if not (np.all(np.isfinite(got)) and np.all(np.isfinite(part))):
                if not finite_only:
                    return None
                held = None
                break
            held.append((got, part))
        found += held or []
    return found


def _zeroed(arrays: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """Where every wrong number of every failing call is 0 and every other number is right: which
    entries those are, where one region of the matrix (its diagonal, a triangle, its last column...)
    holds them on every call, and is 0 throughout on each; else "". `arrays`: `_wrong_arrays`'s."""
    regions, whole_rows = None, True
    for got, part in arrays:
        wrong = ~(np.abs(got - part) <= np.abs(part) * RTOL + ATOL)
        if np.any(got[wrong] != 0):
            return ""
        zero = got == 0
        if got.ndim < 2:
            regions, whole_rows = (), False
            continue
        fitting = {label for label, mask in _layout(*got.shape[-2:])
                   if np.all(zero[..., mask]) and not np.any(wrong[..., ~mask])}
        regions = fitting if regions is None else regions & fitting
        # each row holding a wrong number is 0 throughout
        whole_rows &= bool(np.all(zero[np.any(wrong, axis=-1)]))
    if not arrays:
        return ""
    # every wrong number between -1 and 1 and cut to 0: what an array of an integer dtype keeps
    cut = all(np.array_equal(got, np.trunc(part)) for got, part in arrays)
    named = [label for label, _ in _layout(2, 2) if label in (regions or ())]
    if all(not np.any(got) for got, _ in arrays):
        return ("On every case it failed, every number of each wrong array is 0. Look for a factor that comes "
                "out 0 (a division of integers rounds down: `1 // d_k` and `np.reciprocal(2)` are 0), an array "
                "made of zeros and never filled, or a product with an array of zeros."
                + (f" Or the numbers were written into an array of an integer dtype {_INTEGER_DTYPE}, which cuts "
                   "every number between -1 and 1 to 0." if cut else ""))
    if named:
        where = f"{named[0]} of each wrong array is 0 throughout"
    elif whole_rows:
        where = "each row of a wrong array that holds a wrong number is 0 throughout"
    else:
        where = "each wrong number is 0"
    return (f"On every case it failed, {where}, and every other number is right. {_ZEROED}"
            + (f" Or they were written into an array of an integer dtype {_INTEGER_DTYPE}, which cuts every number "
               "between -1 and 1 to 0." if cut else ""))


_INTEGER_DTYPE = "(`np.zeros(..., dtype=int)`, or `np.zeros_like` of an array of integers)"


_CUT_OFF = "the expected one cut off at ±"
_WHOLE_NUMBER = "a whole number"
_OFF_THE_EXAMPLE = (_CUT_OFF, _WHOLE_NUMBER, "cut to a whole number", "rounded down")
"""Relations that tell why a step is right on the example alone (its numbers within the bound, or
whole): said in place of `hard-coded`."""


def _clipped(arrays: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """Where every wrong number is one bound c, or -c (the same c in every array), where the expected
    one lies beyond it, and every other number is right: numbers clipped at ±c."""
    bounds = []
    for got, part in arrays:
        wrong = ~(np.abs(got - part) <= np.abs(part) * RTOL + ATOL)
        mine, want = got[wrong], part[wrong]
        if not mine.size or np.any(np.sign(mine) != np.sign(want)) or np.any(np.abs(want) <= np.abs(mine)):
            return ""
        bounds += list(np.abs(mine))
    if not bounds or not np.allclose(bounds, bounds[0], rtol=1e-9, atol=0) or bounds[0] == 0:
        return ""
    return (f"On every case it failed, each wrong number of yours is {_CUT_OFF}{bounds[0]:g}, and "
            f"every other number is right: something clips the numbers to [-{bounds[0]:g}, {bounds[0]:g}] "
            f"(`np.clip`), which the chapter's computation does not.")


def _whole(arrays: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """Where every number of every wrong array is a whole number, and some expected one is not: so
    much, and where each is the expected one cut toward 0, or rounded down, that too."""
    if not all(np.array_equal(got, np.trunc(got)) for got, _ in arrays) \
            or all(np.array_equal(part, np.trunc(part)) for _, part in arrays):
        return ""
    how = next((words for words, cut in (("cut to a whole number, toward 0", np.trunc), ("rounded down", np.floor))
                if all(np.array_equal(got, cut(part)) for got, part in arrays)), None)
    said = (f"each number of yours is the expected one {how}" if how else
            f"every number of yours is {_WHOLE_NUMBER}, where the expected ones are not")
    return (f"On every case it failed, {said}: an array of an integer dtype {_INTEGER_DTYPE} keeps only the whole "
            f"part of what is written into it{'' if how else ', at every step that writes into it'}. Make the "
            f"arrays you fill of floats (`np.zeros(shape)`), or cast to float before computing.")


def _running(arrays: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """Where every wrong array is the running total of the expected one along one axis (the same on
    all), or across the whole array in reading order: an accumulator reset too seldom."""
    readings = (("along each row", lambda a: np.cumsum(a, axis=-1), "reset once per row, not before each entry"),
                ("down each column", lambda a: np.cumsum(a, axis=-2) if a.ndim >= 2 else None,
                 "reset once per column, not before each entry"),
                ("through the whole array in reading order", lambda a: np.cumsum(a.ravel()).reshape(a.shape),
                 "never reset"))
    for where, total, when in readings:
        fits = True
        for got, part in arrays:
            running = total(part) if part.ndim >= 1 and part.size > 1 else None
            if running is None or not allclose(got, running, 1e-9, 1e-9 * max(1.0, float(np.max(np.abs(running)))),
                                               keep=False):
                fits = False
                break
        if fits:
            return (f"On every case it failed, each number of yours is the expected one plus all those before it "
                    f"{where}: a running total. An accumulator (`total += ...`) that is {when} keeps adding; set it "
                    "to 0 right before the loop that sums one entry.")
    return ""


def _aliased(arrays: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """Where every row of every wrong array (of two rows or more) is the expected last row, or the
    first: rows that were one array, filled again for each row and kept by reference."""
    for which, index in (("last", -1), ("first", 0)):
        if arrays and all(part.ndim >= 2 and part.shape[-2] > 1
                          and allclose(got, np.broadcast_to(part[..., index:index + 1 or None, :], part.shape), RTOL,
                                       ATOL, keep=False)
                          for got, part in arrays):
            return (f"On every case it failed, every row of a wrong array is the expected {which} row. Look for "
                    f"one array filled again for each row and kept by reference (`rows.append(row)` keeps the very "
                    f"same array every time, so each shows what was written {which}: keep a copy, `row.copy()`), or "
                    f"for the {which} row's numbers (its index, its weights) used for every row.")
    return ""


def _relation(pairs: list[tuple[_CallVerdict, dict]], calls: list | None = None) -> str:
    """How every wrong array relates to the expected one, where one simple relation holds on all of
    them: some numbers left at 0 (see _zeroed), a constant added (to all, or per row, or per
    column), or a factor, and which of the call's sizes that factor is, where one is; else ""."""
    exchanged = _parts_exchanged(pairs) if pairs else None
    if exchanged:
        return exchanged
    arrays = _wrong_arrays(pairs)
    if arrays is None:  # NaN or an infinity on some call: said of the others, where there are some
        finite = _wrong_arrays(pairs, finite_only=True)
        said = _relation_of(finite, pairs, None) if finite else ""
        return said.replace(_EVERY_CASE, _EVERY_FINITE_CASE, 1) if said.startswith(_EVERY_CASE) else ""
    return _relation_of(arrays, pairs, calls) if arrays else ""  # ([]: no array at all, a predicate's answers say)


_EVERY_CASE = "On every case it failed,"
_EVERY_FINITE_CASE = "On every case it failed with finite numbers,"


def _numbers_cut(arrays: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """Where the wrong numbers are left at 0, held at a bound or cut to whole ones (an array never
    filled, a clip, an array of integers written into): so much, else ""."""
    return _zeroed(arrays) or _clipped(arrays) or _whole(arrays)


def _relation_of(arrays: list[tuple[np.ndarray, np.ndarray]], pairs: list, calls: list | None) -> str:
    """`_relation`, of the wrong arrays `arrays` (all finite)."""
    zeroed = _numbers_cut(arrays) or _aliased(arrays) or _running(arrays) or _rescaled(arrays)
    if zeroed:
        return zeroed
    holding, constants, informative = set(_RELATIONS), [], set()
    for got, part in arrays:
        scale = max(1.0, float(np.max(np.abs(part))))
        difference = got - part
        nonzero = np.abs(part) > 1e-12 * scale
        ratio = np.divide(got, part, out=np.zeros_like(got), where=nonzero)
        pick = ratio[nonzero]
        tests = {
            "shift": (difference, difference.reshape(-1)[:1]),
            "factor": (got, part * pick[:1]) if pick.size else None,
        }
        if part.ndim >= 1 and part.shape[-1] > 1:
            tests["rows shift"] = (difference, difference[..., :1])
            rows = _per(ratio, nonzero, -1)
            tests["rows factor"] = None if rows is None else (got, part * rows)
        if part.ndim >= 2 and part.shape[-2] > 1:
            tests["columns shift"] = (difference, difference[..., :1, :])
            cols = _per(ratio, nonzero, -2)
            tests["columns factor"] = None if cols is None else (got, part * cols)
        for relation in list(holding):
            if relation not in tests:
                continue  # a row or column of one number: any constant fits it
            test = tests[relation]
            if test is None or not np.allclose(*test, rtol=1e-6, atol=1e-9 * scale):
                holding.discard(relation)
            elif got.size > 1 and (relation in ("shift", "factor") or np.ptp(test[1]) > 1e-9 * scale):
                informative.add(relation)  # seen on more than one number, not only trivially
        constants.append((float(difference.reshape(-1)[0]), float(pick[0]) if pick.size else None))
    holding &= informative
    # the most specific: one constant for all, before one per row or column
    for relation in ("factor", "shift", "rows shift", "columns shift", "rows factor", "columns factor"):
        if relation in holding:
            if relation in ("shift", "factor"):
                values = {round(c[0 if relation == "shift" else 1], 6) for c in constants}
                each = f" ({values.pop():g})" if len(values) == 1 else ", one for each case"
                if relation == "factor" and each == " (1)":
                    continue
                sized = _size_factor(pairs, calls) if relation == "factor" and calls else None
                if sized:
                    return (f"On every case it failed, each wrong array of yours is the expected one times {sized} "
                            f"of that call: something multiplies by {sized}, which the chapter's computation "
                            "does not.")
                return _RELATIONS[relation].format(each=each)
            return _RELATIONS[relation]
    return _dropped(arrays) or _affine(arrays) or _rows_affine(arrays)


_READINGS = (("each row of a wrong array", -1), ("each column of a wrong array", -2), ("each wrong array", None))


def _rescaled(arrays: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """Where, read the same way on every wrong array (by rows, by columns, or whole), each part is the
    expected part times a factor plus a constant of its own, and has mean 0 and standard deviation 1
    (z-scores), or least 0 and largest 1 (min-max scaling), or largest absolute value 1 with no
    constant: so much."""
    def parts(array, axis):
        if axis is None:
            return [array.ravel()]
        moved = np.moveaxis(array, axis, -1) if array.ndim >= (2 if axis == -2 else 1) else None
        return [] if moved is None else list(moved.reshape(-1, moved.shape[-1]))

    # (exactly: a layer norm's epsilon is told by _rows_affine)
    tests = {"standardized (its mean subtracted and its standard deviation divided out: z-scores)":
             lambda got: abs(float(got.mean())) <= 1e-9 and abs(float(got.std()) - 1) <= 1e-9,
             "min-max scaled (its least number subtracted and the spread divided out: from 0 to 1)":
             lambda got: abs(float(got.min())) <= 1e-9 and abs(float(got.max()) - 1) <= 1e-9,
             "divided by its largest absolute number": lambda got: abs(float(np.max(np.abs(got))) - 1) <= 1e-9}
    for where, axis in _READINGS:
        for how, holds in tests.items():
            shown = 0
            for got, part in arrays:
                scale = max(1.0, float(np.max(np.abs(part))))
                pieces = list(zip(parts(got, axis), parts(part, axis)))
                if not pieces:
                    break
                fits = True
                for mine, want in pieces:
                    if want.size < 2 or np.ptp(want) <= 1e-9 * scale:
                        continue  # one number, or all alike: any factor and constant fit it
                    line = (_line_through(want, mine, scale) if want.size >= 3 else
                            ((mine[1] - mine[0]) / (want[1] - want[0]), 0.0))
                    # (rising with the expected numbers: the expected part rescaled, not turned over)
                    if line is None or line[0] <= 0 or not holds(mine) or (
                            how.startswith("divided") and abs(line[1]) > 1e-9 * scale):
                        fits = False
                        break
                    shown += want.size >= 3
                if not fits:
                    shown = 0
                    break
            if shown:
                return (f"On every case it failed, {where} is the expected one {how}, which the chapter's "
                        f"computation does not do.")
    return ""


def _dropped(arrays: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """Where some numbers of the wrong arrays are 0 where the expected ones are not, and every other
    is the expected one times one factor above 1, the same in every array: what dropout leaves."""
    factors, zeroed = [], 0
    for got, part in arrays:
        scale = max(1.0, float(np.max(np.abs(part))))
        nonzero = np.abs(part) > 1e-12 * scale
        dropped = nonzero & (np.abs(got) <= 1e-12 * scale)
        kept = nonzero & ~dropped
        if np.any(np.abs(got[~nonzero]) > 1e-12 * scale) or not kept.any():
            return ""
        ratio = got[kept] / part[kept]
        if not np.allclose(ratio, ratio[0], rtol=1e-6, atol=0):
            return ""
        factors.append(float(ratio[0]))
        zeroed += int(dropped.sum())
    if not zeroed or not factors or factors[0] <= 1 + 1e-6 or not np.allclose(factors, factors[0], rtol=1e-6, atol=0):
        return ""
    return (f"On every case it failed, some numbers of each wrong array are 0 where the expected ones are not, and "
            f"every other number is the expected one times {factors[0]:.6g}: as dropout with p = "
            f"{1 - 1 / factors[0]:.3g} leaves them. The chapter's head applies no dropout.")


def _line_through(want: np.ndarray, got: np.ndarray, scale: float) -> tuple[float, float] | None:
    """(α, β) where every number of `got` is α times `want`'s plus β (to 1e-6, and 1e-9 of `scale`); else None."""
    alpha, beta = np.polyfit(want, got, 1)
    return (float(alpha), float(beta)) if np.allclose(got, alpha * want + beta, rtol=1e-6, atol=1e-9 * scale) else None


def _rows_affine(arrays: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """Where each row of every wrong array is the expected row times a factor plus a constant, both
    its own (shown by rows of three numbers or more, not all alike; one of two numbers fits any):
    so much, and, where every row of the student's not alike has mean 0 and standard deviation 1
    (to 1e-3), that the rows were standardized."""
    standard, flat, shown = True, True, 0
    for got, part in arrays:
        if part.ndim < 1:
            return ""
        scale = max(1.0, float(np.max(np.abs(part))))
        for row, want in zip(got.reshape(-1, part.shape[-1]), part.reshape(-1, part.shape[-1])):
            if np.ptp(want) <= 1e-9 * scale:
                continue  # a row of one number: any factor and constant fit it
            standard = standard and abs(float(row.mean())) <= 1e-6 and abs(float(row.std()) - 1) <= 1e-3
            flat = flat and float(np.ptp(row)) <= 1e-9 * scale
            if len(want) < 3:
                continue
            if _line_through(want, row, scale) is None:
                return ""
            shown += 1
    if not shown:
        return ""
    if flat:
        return ("On every case it failed, each row of a wrong array is one number repeated, where the expected row's "
                "numbers differ: every entry of a row came out alike, as a product taken of one pair for the whole "
                "row, a stride of 0 along it, or one number broadcast over it gives.")
    if standard:
        return ("On every case it failed, each row of a wrong array is the expected row shifted and rescaled, with mean "
                "0 and standard deviation 1: the rows were standardized (the row's mean subtracted and its spread "
                "divided out, as layer norm does), which the chapter's computation does not.")
    return ("On every case it failed, each row of a wrong array is the expected row times a factor plus a constant, "
            "both of its own: something shifts and rescales each row, which the chapter's computation does not.")


def _affine(arrays: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """Where each wrong array is the expected one times one factor (other than 1, the same in every
    array) plus a constant of its own (not 0 in all): so much, and, where each constant is the rest of
    that factor spread over a row (1 - α)/n, that the rows were blended with uniform ones."""
    factors, uniform = [], True
    for got, part in arrays:
        scale = max(1.0, float(np.max(np.abs(part))))
        if part.size < 2 or np.ptp(part) <= 1e-9 * scale:
            return ""  # one number, or all alike: any factor and constant fit it
        line = _line_through(part.ravel(), got.ravel(), scale)
        if line is None:
            return ""
        alpha, beta = line
        factors.append(line)
        uniform = uniform and part.ndim >= 1 and isclose(beta, (1 - alpha) / part.shape[-1], 1e-6, 1e-12)
    alphas = [alpha for alpha, _ in factors]
    if not alphas or not np.allclose(alphas, alphas[0], rtol=1e-6, atol=1e-12) or isclose(alphas[0], 1.0, 1e-6, 1e-9) \
            or all(isclose(beta, 0.0, 0.0, 1e-9) for _, beta in factors):
        return ""
    said = (f"On every case it failed, each wrong array of yours is the expected one times the same factor "
            f"({alphas[0]:.6g}) plus a constant")
    if uniform and 0 < alphas[0] < 1:
        return (said + f": (1 - ε)·A + ε/n with ε = {1 - alphas[0]:.6g} and n the length of a row, a blend with "
                "uniform weights, as label smoothing makes. The chapter's softmax returns the weights themselves.")
    constants = {round(beta, 6) for _, beta in factors}
    return said + (f" ({constants.pop():g})." if len(constants) == 1 else ", one for each case.")


_SIZE_FORMS = (("{}", lambda n: n), ("√{}", math.sqrt), ("1/{}", lambda n: 1 / n), ("1/√{}", lambda n: 1 / math.sqrt(n)))


def _size_factor(pairs: list[tuple[_CallVerdict, dict]], calls: list) -> str | None:
    """Where each failing call's wrong arrays are its expected ones times one factor, and that factor
    is, on every call, one form of one of the docstrings' sizes (√d_in, 1/T, ...) the same on all,
    and not 1 everywhere: that form (with sizes differing between the calls, so that it is told
    apart from a constant); else None."""
    factors = []
    for (verdict, want), call in zip(pairs, calls):
        arrays = _wrong_arrays([(verdict, want)])
        if not arrays:
            return None
        # (where every expected number is 0 no ratio is read: 0 is written there, never memory left unset)
        ratios = {round(float(np.divide(got, part, out=np.zeros(np.broadcast(got, part).shape),
                                        where=np.abs(part) > 1e-12).flat[int(np.argmax(np.abs(part)))]), 9)
                  for got, part in arrays}
        if len(ratios) != 1:
            return None
        factors.append((ratios.pop(), _sizes_of(call)))
    if len(factors) < 2 or len({factor for factor, _ in factors}) < 2:
        return None
    fitting = [form.format(symbol) for symbol in factors[0][1] for form, of in _SIZE_FORMS
               if all(symbol in sizes and sizes[symbol] > 0 and isclose(factor, of(sizes[symbol]), 1e-6, 1e-9)
                      for factor, sizes in factors)]
    return fitting[0] if len(fitting) == 1 else None


def _rows_reached(step: Step, cases: list[Case], verdicts: list[list[_CallVerdict]]) -> str:
    """Exercise 3, where no modelled mistake is named: the value rows a wrong answer shifted, solved
    for from the answer itself and checked by recomputing it (a slice `v[min(rows):max(rows)]`
    that stops one row short, say). Said of the first failing call it fits, and of how many more."""
    if step.id != "ex3_value_shift":
        return ""
    fitted = [(case, call, reached) for case, case_verdicts in zip(cases, verdicts)
              for call, verdict in zip(case.calls, case_verdicts) if verdict.kind == "mismatch"
              for reached in [_shifted_rows(call, verdict.actual or {})] if reached is not None]
    if not fitted:
        return ""
    case, call, reached = fitted[0]
    rows = call.args[-1] if len(call.args) == (4 if call.fn == "shifted_output" else 3) else None
    asked = "every value row" if rows is None else f"rows {[int(row) for row in rows]}"
    what = (f"output is exactly the one with the shift added to {_rows_named(reached)}" if call.fn == "shifted_output"
            else f"change is exactly the one that shifting {_rows_named(reached)} makes")
    more = len(fitted) - 1
    return (f"On {case.label}, your {what}, where the call asks for {asked}"
            + (f"; on {more} more failing call{'s' if more > 1 else ''} too, the value rows your shift reached are "
               "not the ones asked for." if more else "."))


def _rows_named(rows: list[int]) -> str:
    return "no value row" if not rows else f"value row {rows[0]}" if len(rows) == 1 else f"value rows {rows}"


def _shifted_rows(call, actual: dict) -> list[int] | None:
    """The value rows whose shift gives `actual` on an exercise 3 call, where one set of them does
    exactly (the weights full rank, so that no other set gives the same); else None."""
    if call.fn == "shifted_output" and len(call.args) >= 3:
        a, v, shift = call.args[:3]
        got = actual.get("output")
    elif call.fn == "output_change" and len(call.args) >= 2:
        (a, shift), v = call.args[:2], None
        got = actual.get("change")
    else:
        return None
    if not all(isinstance(x, np.ndarray) for x in (a, shift, got)) or a.ndim != 2 or a.shape[0] != a.shape[1] \
            or shift.ndim != 1 or got.shape != (a.shape[0], shift.shape[0]) or not np.any(shift) \
            or not np.all(np.isfinite(got)) or np.linalg.matrix_rank(a) < a.shape[0]:
        return None
    before = a @ v if v is not None else 0  # the output before the shift (output_change: none)
    moved = got - before  # [T, d_v]: the weight each row put on the shift, times it
    per_row = np.linalg.solve(a, moved @ shift / (shift @ shift))
    rows = [int(i) for i in np.flatnonzero(np.abs(per_row - 1) < 1e-6)]
    mask = np.zeros(a.shape[0])
    mask[rows] = 1.0
    return rows if allclose(a @ np.outer(mask, shift) + before, got, RTOL, ATOL, keep=False) else None


def _per(ratio: np.ndarray, nonzero: np.ndarray, axis: int) -> np.ndarray | None:
    """Each row's (axis -1) or column's (axis -2) ratio, taken where the expected value is not zero;
    None where a row or column has no such value."""
    counts = nonzero.sum(axis=axis, keepdims=True)
    if np.any(counts == 0):
        return None
    return ratio.sum(axis=axis, keepdims=True) / counts


def unreached_functions(run: Run) -> dict[str, str]:
    """The graded functions a notebook never defined though it holds their defs, each with why:
    feedback.UNREACHED where a cell that would have defined them stopped with an error first,
    feedback.DISCARDED where their def is in a `%%timeit` cell (whose bindings IPython discards)."""
    defined_in_stopped = {name for raised in run.stopped for name in raised.get("defines", ())}
    if not defined_in_stopped and not run.discarded:
        return {}
    missing = {outcome.raised.get("message") for outcomes in run.outcomes for outcome in outcomes
               if outcome is not None and outcome.raised and outcome.raised.get("type") == "MissingName"}
    found = {name: feedback.DISCARDED for name in missing if name in run.discarded}
    found.update({name: feedback.UNREACHED for name in missing & defined_in_stopped})
    return found


def step_state(result: StepResult, unreached: dict[str, str]) -> str:
    """A step's status as an earlier step's feedback names it: why it was never defined, where it was not."""
    if result.status == "not_implemented":
        for fn in BY_ID[result.id].functions:
            if fn in unreached:
                return unreached[fn]
    return result.status


def _bound_again(step: Step, bound: dict[str, list[int]]) -> str:
    """For a function of the step, or of a step it builds on, that a notebook binds in two cells or
    more: which cells, and that the graders call the last one's."""
    built_on = [fn for used in _all_uses(step) for fn in BY_ID[used].functions if fn not in step.functions]
    return "\n".join(_rebound(fn, bound[fn], "" if fn in step.functions else ", which this step builds on,",
                              "they call")
                     for fn in dict.fromkeys(list(step.functions) + built_on) if fn in bound)


def _rebound(name: str, cells: list[int], whose: str, seeing: str) -> str:
    """The sentence on a name a notebook binds in `cells`: the last one's binding is what counts."""
    return (f"Your notebook binds `{name}`{whose} in more than one cell (cells {feedback.listed(cells)}): the "
            f"graders run every cell in order, so {seeing} what cell {cells[-1]} left.")


_NOT_DEFINED = re.compile(r"name '([A-Za-z_]\w*)' is not defined")


def _only_in_skipped_cells(flat: list[_CallVerdict], skipped: dict[str, int]) -> str:
    """For a NameError whose name the notebook defines only in a cell the graders skip (a helper
    written in a check cell, say): that cell, and why the name is missing."""
    names = dict.fromkeys(found.group(1) for v in flat if v.raised == "NameError"
                          for found in [_NOT_DEFINED.search(v.raised_message or "")] if found)
    return "\n".join(f"`{name}` is defined only in cell {skipped[name]}, which the graders do not run (they "
                     f"skip the notebook's checks, its plot and nbgrader's test cells): define it in a cell of "
                     f"your own." for name in names if name in skipped)


def _defaults_never_passed(step: Step, defaults: dict[str, list[str]], unset: dict[str, list[str]] | None = None) -> str:
    """The parameters of the step's functions that the contract does not have, whose defaults every
    call of the graders' therefore uses (a `d_k` set from the example's `Q` when the def ran, say),
    or that every call leaves None for the body to fill in (`temperature = np.sqrt(T)`)."""
    sentences = []
    for fn in step.functions:
        for filled, names in ((True, (unset or {}).get(fn, ())), (False, defaults.get(fn, ()))):
            extra = [name for name in names if name not in inspect_names(fn)]
            if not extra:
                continue
            many = len(extra) > 1
            uses = (f"leaves {'them' if many else 'it'} None, and runs with what your code puts in "
                    f"{'their' if many else 'its'} place: check that what it puts there is what the step asks for."
                    if filled else
                    f"uses {'their defaults' if many else 'its default'}, fixed when the `def` ran (one taken from "
                    f"the example's values, such as `Q.shape[-1]`, is the example's on every case).")
            sentences.append(f"Your `{fn}` takes {feedback.listed([f'`{name}`' for name in extra])}, which the "
                             f"graders never pass (its arguments are {', '.join(inspect_names(fn))}): every call {uses}")
    return "\n".join(sentences)


_UNEXPLAINED = _UNMODELLED_VALUES | {"crashed"}
"""The codes of a step where no modelled mistake is named: what its functions read from outside
their arguments is then worth telling."""


SETUP_NAMES = frozenset(name for name, _ in SETUP_ARRAYS)


def _read_outside(step: Step, outside: dict[str, list[str]], bound: dict[str, list[int]],
                  only: frozenset | None = None) -> str:
    """The values defined outside the step's functions that they read (a notebook's `X`, `K` or
    `d_k`), which are no argument of theirs (`only`: those of these names alone); and of those
    that more than one cell binds, which cells, the last of them being what the graders see."""
    sentences = []
    for fn in step.functions:
        names = [name for name in outside.get(fn) or () if only is None or name in only]
        if names:
            shown = feedback.listed([f"`{name}`" for name in names])
            sentences.append(f"Your `{fn}` reads {shown}, defined outside the function rather than given to it as "
                             f"{'arguments' if len(names) > 1 else 'an argument'}: on the hidden cases "
                             f"{'they are' if len(names) > 1 else 'it is'} still what your notebook or module set, "
                             f"or an earlier call left there, not the case's own. Compute from the arguments instead.")
            sentences += [_rebound(name, bound[name], "", f"your `{fn}` sees") for name in names if name in bound]
    return "\n".join(sentences)


_SHAPE_LOOKS = {
    "more ones": "Each wrong shape is the expected one with an extra axis of length 1 ({pair}): an axis added on "
                 "the way (`x[None]`, `np.newaxis`, `keepdims=True`, `reshape(1, ...)`) is still there in what you "
                 "return. Take it away before returning (index it with `[0]`, or never add it).",
    "fewer ones": "Each wrong shape is the expected one without an axis of length 1 ({pair}): something took it "
                  "away (`np.squeeze`, an index such as `[0]`, a sum or max without `keepdims=True`); where T or a "
                  "width is 1, that axis must stay.",
    "one more": "Each wrong shape has one axis more than asked ({pair}): something is computed once per position "
                "or per row where one result is asked (a query of shape [T, d_k] for one query of [d_k], say), or "
                "a sum or mean that should remove an axis is missing.",
    "one fewer": "Each wrong shape has one axis fewer than asked ({pair}): a sum, max, mean or index removed an "
                 "axis the result should keep (`keepdims=True` keeps one), `np.squeeze` took away an axis of "
                 "length 1 (where T or a width is 1), or one row stands for them all.",
}


# The sizes a contract argument's last axes hold, as the docstrings name them (a batch adds B in front).
_ARGUMENT_AXES = {"x": ("T", "d_in"), "w_q": ("d_in", "d_k"), "w_k": ("d_in", "d_k"), "w_v": ("d_in", "d_v"),
                  "q": ("T", "d_k"), "k": ("T", "d_k"), "v": ("T", "d_v"), "a": ("T", "T"), "s": ("T", "T"),
                  "d": ("T", "T")}
_SIZE_WORDS = {"B": "B (the batch's examples)", "T": "T (the positions)", "d_in": "d_in (the input's width)",
               "d_k": "d_k (the query and key width)", "d_v": "d_v (the value width)"}
_AXIS_WORDS = {-1: "last axis", -2: "second axis from the end", -3: "third axis from the end"}
_INTO = re.compile(r"could not broadcast input array from shape \(([\d, ]*)\) into shape \(([\d, ]*)\)")
_OPERAND = re.compile(r"non-broadcastable output operand with shape \(([\d, ]*)\) doesn't match the broadcast shape "
                      r"\(([\d, ]*)\)")
_TOGETHER = re.compile(r"operands could not be broadcast together with shapes \(([\d, ]*)\) \(([\d, ]*)\) "
                       r"\(([\d, ]*)\)\s*$")


_RAISED_SIZED = "It raised where it wrote into an array of the wrong size, as said above."


def _interleaved_zero(weights) -> bool:
    """Does some row of a weights matrix hold a 0 with a weight that counts after it?"""
    if not isinstance(weights, np.ndarray) or weights.ndim != 2 or not weights.size:
        return False
    later = np.flip(np.logical_or.accumulate(np.flip(weights != 0, axis=-1), axis=-1), axis=-1)
    return bool(np.any((weights == 0)[:, :-1] & later[:, 1:]))


def _wrong_where_weights_are_zero(calls: list, verdicts: list[_CallVerdict]) -> str:
    """Where `mix` returned wrong numbers on exactly the calls whose weights hold a 0 before a weight
    that counts, and right ones on every other call: the sentence that says so, else ""."""
    looked = [(call, v) for call, v in zip(calls, verdicts) if call.fn == "mix" and v.kind in ("ok", "mismatch")]
    if len(looked) != len(verdicts) or not any(v.kind == "mismatch" for _, v in looked):
        return ""
    if not all(_interleaved_zero(call.args[0]) == (v.kind == "mismatch") for call, v in looked):
        return ""
    return ("Your `mix` is wrong exactly where a row of weights holds a 0 before a weight that counts, and "
            "right everywhere else: as a loop over the keys that stops at the first zero weight (`break` where "
            "`continue` was meant) would be. A zero weight adds nothing; the keys after it still count.")


def _raised_where_one(calls: list, verdicts: list[_CallVerdict]) -> str | None:
    """Where every call of the step that raised has a size of 1 (T, say) that every call that ran has
    larger: the advice that says so, else None. An axis of length 1 squeezed away, or a loop that
    needs two positions, fails there and nowhere else."""
    raised = [i for i, v in enumerate(verdicts) if v.kind == "raised"]
    ran = [i for i, v in enumerate(verdicts) if v.kind in ("ok", "mismatch", "wrong-type")]
    if not raised or not ran:
        return None
    sizes = [_sizes_of(calls[i]) for i in raised]
    ones = [name for name in _SIZE_WORDS if all(found.get(name) == 1 for found in sizes)
            and all(_sizes_of(calls[i]).get(name, 1) > 1 for i in ran)]
    if not ones:
        return None
    said = " and ".join(_SIZE_WORDS[name] for name in ones)
    return (f"It raised on every call where {said} {'is' if len(ones) == 1 else 'are'} 1, and ran wherever "
            f"{'it is' if len(ones) == 1 else 'they are'} larger: some line needs an axis of length 2 or more. "
            f"Look for an axis of length 1 taken away (`np.squeeze`, `.squeeze()`, `[0]` on a row), which leaves "
            f"fewer axes than the next line expects, or an index or loop that needs two rows (`x[1]`, "
            f"`range(1, T)`); then call the function with {said} equal to 1 and read the error.")


def _sizes_of(call) -> dict[str, int]:
    """The docstrings' named sizes (T, d_in, d_k, d_v, and B for a batch) as this call's arguments
    hold them; a name the arguments disagree on is left out."""
    found: dict[str, set] = {}
    for name, arg in zip(inspect_names(call.fn), call.args):
        axes = _ARGUMENT_AXES.get(name)
        if isinstance(arg, np.ndarray) and axes and arg.ndim >= len(axes):
            for symbol, size in zip(("B",) * (arg.ndim - len(axes)) + axes, arg.shape):
                found.setdefault(symbol, set()).add(int(size))
        elif name == "d_k" and type(arg) is int:
            found.setdefault("d_k", set()).add(arg)
    return {symbol: sizes.pop() for symbol, sizes in found.items() if len(sizes) == 1}


def _dims(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in text.replace(" ", "").split(",") if n)


def _wrong_axes(verdict: _CallVerdict, want: dict, fn: str) -> list[tuple] | None:
    """(part, axis from the end, the size it had, the size asked) for each axis of a returned array
    that differs from the expected one in size alone, or of an array written into where the call
    raised numpy's broadcasting error; None when the call shows nothing of the kind."""
    arrays = {name: part for name, part in want.items() if isinstance(part, np.ndarray)}
    if verdict.kind == "mismatch" and verdict.actual:
        found = []
        for name, part in arrays.items():
            got = verdict.actual.get(name)
            if isinstance(got, np.ndarray) and got.shape != part.shape:
                if got.ndim != part.ndim:
                    return None
                found += [(name, axis - part.ndim, got.shape[axis], part.shape[axis])
                          for axis in range(part.ndim) if got.shape[axis] != part.shape[axis]]
        return found or None
    if verdict.kind != "raised" or verdict.raised != "ValueError" or verdict.raised_in != fn:
        return None  # (raised in another of the submission's functions, it says nothing of this one's arrays)
    message = verdict.raised_message
    into, together, operand = _INTO.search(message), _TOGETHER.search(message), _OPERAND.search(message)
    if into:  # a result of the right shape stored into a slice of an array made beforehand
        value, target = _dims(into.group(1)), _dims(into.group(2))
    elif together:  # `o[i] += ...`: the value, and the slice written into (the third shape)
        value, target = _dims(together.group(2)), _dims(together.group(3))
    elif operand:
        value, target = _dims(operand.group(2)), _dims(operand.group(1))
    else:
        return None
    for name, part in arrays.items():
        if value and len(value) == len(target) and part.shape[part.ndim - len(value):] == value:
            found = [(name, axis - len(value), target[axis], value[axis])
                     for axis in range(len(value)) if target[axis] != value[axis]]
            return found or None
    return None


def _sized_wrongly(calls: list, verdicts: list[_CallVerdict], wants: list[dict],
                   indexes: list[int]) -> tuple[str, set, set] | None:
    """Where the arrays returned (or written into) on the calls `indexes` have, on two calls or
    more, an axis of one of the docstrings' sizes (T, d_in, d_k, d_v) where another is asked, the
    same on every one of them: what to say of it, the calls it explains and the sizes it names; else None."""
    axes: dict[tuple, list] = {}
    explained, shown = set(), None
    for i in indexes:
        wrong = _wrong_axes(verdicts[i], wants[i], calls[i].fn)
        if not wrong:
            continue
        sizes = _sizes_of(calls[i])
        for name, axis, had, asked in wrong:
            axes.setdefault((name, axis), []).append(({s for s, n in sizes.items() if n == had},
                                                       {s for s, n in sizes.items() if n == asked}))
        explained.add(i)
        if shown is None or (verdicts[i].kind == "mismatch" and verdicts[shown[0]].kind != "mismatch"):
            shown = (i, wrong[0])  # a value returned, rather than an exception, where there is one
    if len(explained) < 2 or not axes:
        return None
    sentences, named = [], set()
    for (name, axis), seen in axes.items():
        had = set.intersection(*(h for h, _ in seen)) if len(seen) >= 2 else set()
        asked = set.intersection(*(a for _, a in seen)) if len(seen) >= 2 else set()
        if not had or not asked or had & asked or axis not in _AXIS_WORDS:
            return None
        named |= had | asked
        sentences.append(f"the {_AXIS_WORDS[axis]} of your `{name}` has as many entries as "
                         f"{' or '.join(_SIZE_WORDS[s] for s in sorted(had))}, where it should have "
                         f"{' or '.join(_SIZE_WORDS[s] for s in sorted(asked))}")
    i, (name, axis, had, asked) = shown
    # an exception's message is the submission's own words (it may spell a hidden input, with
    # numpy's words beside them): its shapes are said, read off the call, never the message itself
    example = (f"{list(verdicts[i].actual[name].shape)} for {list(wants[i][name].shape)}"
               if verdicts[i].kind == "mismatch" else f"it raised {verdicts[i].raised} where {name} needs {list(wants[i][name].shape)}")
    text = ("On every call where it went wrong, " + "; ".join(sentences) + f" ({calls[i].shown(inspect_names(calls[i].fn))}: "
            f"{example}). An array made in the shape of another (`np.zeros_like`, `np.empty_like`) and filled in, or "
            "a size read off the wrong argument, does this: make it from the sizes the docstring gives, or build "
            "the result without filling an array made beforehand.")
    return text, explained, named


def _parts_exchanged(pairs: list[tuple[_CallVerdict, dict]]) -> str | None:
    """Where a result of two arrays or more has, on every failing call, each wrong part holding the
    expected value of another part (its shape and numbers), the same parts on every call: which holds
    which (parts whose expected values are alike named together); else None."""
    holds: dict[str, set] | None = None
    for verdict, want in pairs:
        arrays = {name: part for name, part in want.items() if isinstance(part, np.ndarray)}
        if len(arrays) < 2 or not verdict.actual:
            return None
        found = {}
        for name, part in arrays.items():
            got = verdict.actual.get(name)
            if not isinstance(got, np.ndarray) or not np.all(np.isfinite(got)):
                return None
            if got.shape == part.shape and allclose(got, part, RTOL, ATOL, keep=False):
                continue
            found[name] = {other for other, value in arrays.items() if other != name and value.shape == got.shape
                           and allclose(got, value, RTOL, ATOL, keep=False)}
            if not found[name]:
                return None
        if not found or (holds is not None and found.keys() != holds.keys()):
            return None
        holds = found if holds is None else {name: holds[name] & found[name] for name in found}
        if not all(holds.values()):
            return None
    if not holds:
        return None
    order = list(pairs[0][1])
    parts = []
    for name, others in holds.items():
        first, *rest = [f"`{other}`" for other in sorted(others, key=order.index)]
        parts.append(f"your `{name}` holds the expected {first}" + (f" (or {', '.join(rest)}, the same numbers)"
                                                                   if rest else ""))
    said = "; ".join(parts)
    return (f"On every case it failed, each wrong part holds what another part should: {said}. The parts went in "
            f"under the wrong names or in the wrong order: check how the result is put together (names zipped "
            f"with values listed in another order, a tuple unpacked the other way round).")


def _shape_look(pairs: list[tuple[_CallVerdict, dict]]) -> str | None:
    """Where to look when every wrong shape differs from the expected one in the same way: parts
    exchanged, axes of length 1 added, or taken away, or one axis more, or one fewer, than asked;
    else None."""
    exchanged = _parts_exchanged(pairs)
    if exchanged:
        return exchanged
    permuted = _axes_permuted(pairs) or _leading_block(pairs)
    if permuted:
        return permuted
    found, first = [], None  # (more axes than asked, only axes of length 1 differ, by one axis)
    for verdict, want in pairs:
        for name, part in want.items():
            got = (verdict.actual or {}).get(name)
            if not (isinstance(part, np.ndarray) and isinstance(got, np.ndarray)) or got.ndim == part.ndim:
                if isinstance(part, np.ndarray) and isinstance(got, np.ndarray) and got.shape != part.shape:
                    return None  # the same number of axes, other sizes
                continue
            ones = [n for n in got.shape if n != 1] == [n for n in part.shape if n != 1]
            found.append((got.ndim > part.ndim, ones, abs(got.ndim - part.ndim) == 1))
            first = first or f"{name} {list(got.shape)} for {list(part.shape)}"
    if not found or len({more for more, _, _ in found}) != 1:
        return None
    more = found[0][0]
    if all(ones for _, ones, _ in found):
        return _SHAPE_LOOKS["more ones" if more else "fewer ones"].format(pair=first)
    if all(by_one for _, _, by_one in found):
        return _SHAPE_LOOKS["one more" if more else "one fewer"].format(pair=first)
    return None


def _leading_block(pairs: list[tuple[_CallVerdict, dict]]) -> str | None:
    """Where every array of a wrong shape is the expected one cut short, its leading block (as many
    axes, none longer, and the numbers of `want[:n, :m]`), and every other array is right: so much;
    else None."""
    first = None
    for verdict, want in pairs:
        for name, part in want.items():
            got = (verdict.actual or {}).get(name)
            if not (isinstance(part, np.ndarray) and isinstance(got, np.ndarray)):
                continue
            if got.shape == part.shape:
                if got.dtype.kind not in "biuf" or not allclose(got.astype(float), part, RTOL, ATOL, keep=False):
                    return None  # a wrong array of the right shape: not only cut short
                continue
            if got.ndim != part.ndim or got.size == 0 or got.dtype.kind not in "biuf" \
                    or any(mine > theirs for mine, theirs in zip(got.shape, part.shape)):
                return None
            block = part[tuple(slice(0, length) for length in got.shape)]
            if not allclose(got.astype(float), block, RTOL, ATOL, keep=False):
                return None
            first = first or (name, got.shape, part.shape)
    if first is None:
        return None
    name, got_shape, part_shape = first
    cut = [f"{'its last axis' if axis == len(got_shape) - 1 else f'axis {axis}'} keeps {mine} of {theirs}"
           for axis, (mine, theirs) in enumerate(zip(got_shape, part_shape)) if mine != theirs]
    return (f"Each wrong array holds the expected numbers cut short, only their leading block (`{name}` "
            f"{list(got_shape)} for {list(part_shape)}; {', '.join(cut)}): a slice such as `[:, :2]` kept from "
            "printing a few numbers, or a length taken from another size, stops it early. Keep every entry.")


def _axes_permuted(pairs: list[tuple[_CallVerdict, dict]]) -> str | None:
    """Where every array of a wrong shape holds the expected numbers with the axes in another order,
    the same order on every call (a batch's axes reversed by `.T`, say): so much; else None."""
    order, first = None, None
    for verdict, want in pairs:
        for name, part in want.items():
            got = (verdict.actual or {}).get(name)
            if not (isinstance(part, np.ndarray) and isinstance(got, np.ndarray)) or got.shape == part.shape:
                continue
            if got.ndim != part.ndim or not 2 <= got.ndim <= 4 or sorted(got.shape) != sorted(part.shape):
                return None
            fitting = [perm for perm in itertools.permutations(range(part.ndim))
                       if (order is None or perm == order) and part.transpose(perm).shape == got.shape
                       and allclose(got, part.transpose(perm), RTOL, ATOL, keep=False)]
            if not fitting:
                return None
            order = order or fitting[0]
            first = first or (name, got.shape, part.shape)
    if order is None:
        return None
    name, got_shape, part_shape = first
    said = f"{list(got_shape)} for {list(part_shape)}"
    if order == tuple(reversed(range(len(order)))):
        return (f"Each wrong array holds the expected numbers with its axes in reverse order (`{name}` {said}): "
                f"`.T` and `np.transpose` without axes reverse every axis, a batch's too. To swap the last two "
                f"alone, use `np.swapaxes({name}, -1, -2)` (or `{name}.transpose(0, 2, 1)` for three axes).")
    return (f"Each wrong array holds the expected numbers with its axes in another order (`{name}` {said}: axes "
            f"{order} of the expected): a transpose, `np.moveaxis` or `np.swapaxes` moved an axis it should have "
            f"left in place.")


def _raised_off_the_example(cases: list[Case], verdicts: list[list[_CallVerdict]], hidden_wrong: list[int]) -> str:
    """Where to look when the example runs and the hidden cases raise: the two calls' shapes side by
    side, and the two sizes the exception set against each other, where its message tells them."""
    example = next(case.calls[0] for case in cases if case.public)
    raised = [(call, v) for c in hidden_wrong for call, v in zip(cases[c].calls, verdicts[c]) if v.kind == "raised"]
    crossed = next(((call, found) for call, v in raised
                    for found in [_sizes_crossed(call, v.raised_message, example)] if found), None)
    failed = crossed[0] if crossed else raised[0][0]
    text = (f"It ran on the chapter's example, {example.shown(inspect_names(example.fn))}, and raised on hidden "
            f"cases of other sizes, such as {failed.shown(inspect_names(failed.fn))}: some line holds for the "
            f"example's sizes and not for these.")
    if crossed:
        (one, first), (other, second), same = crossed[1]
        return (text + f" There numpy's error sets a size of {first}, the call's {_SIZE_WORDS[one]}, against one "
                f"of {second}, its {_SIZE_WORDS[other]}: some line takes the one for the other, which the "
                f"chapter's example cannot show, where both are {same}. Check which width each array you "
                f"build or multiply should have.")
    return (text + " Look for an array built in the shape of another whose size equals it only there, "
            "one width taken for another, a stack or reshape that needs two sizes equal, a size written as a "
            "number, or something kept from the example's call (a global, a cache); then call your function "
            "with the failing shapes and read the error.")


_CORE = re.compile(r"\(size (\d+) is different from (\d+)\)")
_TWO_SHAPES = re.compile(r"operands could not be broadcast together with shapes \(([\d, ]*)\) \(([\d, ]*)\)\s*$")


def _sizes_crossed(call, message: str, example) -> tuple | None:
    """((name, size), (name, size), their common size on the example) for the two sizes an
    exception's message sets against each other (a matrix product's inner sizes, or two axes that
    do not broadcast), where each is exactly one of the docstring's sizes on `call`, the two
    differ, and the chapter's example holds them alike; None otherwise."""
    found = _CORE.search(message or "")
    if found:
        pair = int(found.group(1)), int(found.group(2))
    else:
        found = _TWO_SHAPES.search(message or "")
        if not found:
            return None
        clashing = [(one, other) for one, other in zip(reversed(_dims(found.group(1))), reversed(_dims(found.group(2))))
                    if one != other and 1 not in (one, other)]
        if len(clashing) != 1:
            return None
        pair = clashing[0]
    sizes, on_example = _sizes_of(call), _sizes_of(example)
    names = [[name for name, size in sizes.items() if size == wanted] for wanted in pair]
    if any(len(found) != 1 for found in names) or names[0] == names[1]:
        return None
    one, other = names[0][0], names[1][0]
    if on_example.get(one) is None or on_example.get(one) != on_example.get(other):
        return None
    return (one, pair[0]), (other, pair[1]), on_example[one]


def _example_unfilled(verdicts: list[_CallVerdict], wants: list[dict]) -> str | None:
    """"first" or "last" when every wrong batch result has the asked shape and is right on every
    example but that one, the same one on every call, on a batch of two examples or more; else None.
    (A batch of one, its only example unwritten, is either.)"""
    which = set()
    for verdict, want in zip(verdicts, wants):
        if verdict.kind != "mismatch" or not verdict.actual:
            return None
        for name, part in want.items():
            got = verdict.actual.get(name)
            if not (isinstance(got, np.ndarray) and isinstance(part, np.ndarray) and got.shape == part.shape
                    and part.ndim >= 1 and part.shape[0] >= 1):
                return None
            if part.shape[0] == 1 or allclose(got, part, RTOL, ATOL):
                continue
            for end, rest in (("last", np.s_[:-1]), ("first", np.s_[1:])):
                if allclose(got[rest], part[rest], RTOL, ATOL):
                    which.add(end)
                    break
            else:
                return None
    return which.pop() if len(which) == 1 else None


def _examples_left_out(verdicts: list[_CallVerdict], wants: list[dict], indexes: list[int]) -> str | None:
    """"first" or "last" when every wrong batch result is the reference's with that one example left
    out (each remaining example right), the same one on every call; else None."""
    which = set()
    for verdict, i in zip(verdicts, indexes):
        if verdict.kind != "mismatch" or not verdict.actual:
            return None
        for name, want in wants[i].items():
            got = verdict.actual.get(name)
            if not (isinstance(got, np.ndarray) and isinstance(want, np.ndarray) and want.ndim == got.ndim
                    and got.shape[1:] == want.shape[1:] and got.shape[0] == want.shape[0] - 1):
                return None
            ends = {end for end, kept in (("last", want[:-1]), ("first", want[1:]))
                    if allclose(got, kept, RTOL, ATOL, keep=False)}
            if not ends:
                return None
            which = ends if not which else which & ends
            if not which:
                return None
    return "last" if "last" in which else "first" if which else None


# Orders in which a loop may store a batch's examples, each slot b holding example order(b, B)'s results.
_SLOT_ORDERS = {
    "behind": lambda b, B: (b - 1) % B,
    "ahead": lambda b, B: (b + 1) % B,
    "reversed": lambda b, B: B - 1 - b,
}


def _examples_misplaced(verdicts: list[_CallVerdict], wants: list[dict]) -> str | None:
    """Where every wrong batch result has the asked shape and each of its slots holds some example's
    right numbers, not always its own: what the feedback says of the order they came in; else None."""
    orders, shown = set(_SLOT_ORDERS), None
    for verdict, want in zip(verdicts, wants):
        if verdict.kind != "mismatch" or not verdict.actual:
            return None
        held = None  # per slot, the examples whose numbers it holds, in every part
        for name, part in want.items():
            got = verdict.actual.get(name)
            if not (isinstance(got, np.ndarray) and isinstance(part, np.ndarray) and got.shape == part.shape
                    and part.ndim >= 3 and part.shape[0] >= 2):
                return None
            slots = [{e for e in range(len(part)) if allclose(got[b], part[e], RTOL, ATOL, keep=False)}
                     for b in range(len(part))]
            held = slots if held is None else [one & other for one, other in zip(held, slots)]
        if not held or not all(held) or all(b in examples for b, examples in enumerate(held)):
            return None
        size = len(held)
        orders &= {order for order, slot in _SLOT_ORDERS.items() if all(slot(b, size) in held[b] for b in range(size))}
        if shown is None:
            shown = held
    lead = "Your results hold each example's right numbers, but in the wrong slots of the batch: "
    fix = " Store example b's output and weights at slot b (`o[b]`, `a[b]`), or stack the results in order."
    if len(orders) == 1:
        order = orders.pop()
        return lead + {
            "behind": "slot b holds example b - 1's, and slot 0 the last example's, as `x[b - 1]` in a loop over "
                      "b gives (index -1 is the last example).",
            "ahead": "slot b holds example b + 1's, and the last slot the first example's.",
            "reversed": "they come in reverse order, the last example's in slot 0.",
        }[order] + fix
    if orders:  # only batches of two were wrong: every order above swaps them
        return lead + "the two examples' results are swapped." + fix
    where = ", ".join(f"slot {b} example {' or '.join(map(str, sorted(examples)))}'s"
                      for b, examples in enumerate(shown))
    return lead + f"on the call shown, {where}." + fix


def _one_example_kept(verdicts: list[_CallVerdict], wants: list[dict]) -> str | None:
    """"first" or "last" when every wrong batch result holds that one example's right numbers alone
    (with its batch axis of one, or without it), the same one on every call; else None."""
    which = {"first", "last"}
    for verdict, want_all in zip(verdicts, wants):
        if verdict.kind != "mismatch" or not verdict.actual:
            return None
        for name, want in want_all.items():
            got = verdict.actual.get(name)
            if not (isinstance(got, np.ndarray) and isinstance(want, np.ndarray) and want.ndim >= 2
                    and want.shape[0] >= 2 and got.shape in (want.shape[1:], (1,) + want.shape[1:])):
                return None
            got = got.reshape(want.shape[1:])
            which &= {end for end, kept in (("first", want[0]), ("last", want[-1]))
                      if allclose(got, kept, RTOL, ATOL, keep=False)}
            if not which:
                return None
    return "last" if "last" in which else "first" if which else None


# The steps whose function's contract allows a leading batch axis (softmax_rows: s [..., T, T]). The
# batch step has a rule of its own, above: its head may fail on one sequence too.
_BATCH_ALLOWED = {"softmax"}


def _batched(case: Case) -> bool:
    """Does the case hand its function an array with a leading batch axis (more than two axes)?"""
    return any(isinstance(arg, np.ndarray) and arg.ndim > 2 for call in case.calls for arg in call.args)


def _example_returned(cases: list[Case], hidden_wrong: list[int]) -> str:
    """What to say where every hidden case that failed returned what the example returns, though its
    arguments differ: that, and whether those cases share the example's shapes."""
    example = next(case for case in cases if case.public)
    shapes = [tuple(np.shape(arg) for arg in call.args) for call in example.calls]
    alike = all([tuple(np.shape(arg) for arg in call.args) for call in cases[c].calls] == shapes for c in hidden_wrong)
    return (f"{_EVERY_CASE} you returned exactly what you return on the chapter's example, "
            f"{'on arguments of its very shapes but' if alike else 'on arguments'} with other numbers: your function "
            f"gives the example's result for other inputs too (a special case for the example's "
            f"{'shapes' if alike else 'arguments'}, a result kept from an earlier call, or a value read from outside "
            f"the function, say). Compute it from the arguments you are given.")


def _copied(cases: list[Case], verdicts: list[list[_CallVerdict]], hidden_wrong: list[int]) -> bool:
    """Did every wrong hidden case return exactly what the student returned on the example?"""
    public = [c for c, case in enumerate(cases) if case.public]
    if not public:
        return False
    example = verdicts[public[0]]
    for c in hidden_wrong:
        for verdict, shown in zip(verdicts[c], example):
            if verdict.kind in ("raised", "wrong-type"):
                return False  # no numbers at all, or not as the example's came
            if verdict.kind == "mismatch":
                if shown.actual is None or not _same_value(verdict.actual, shown.actual, keep=False):
                    return False
                if not any(isinstance(part, np.ndarray) and part.size > 1 for part in verdict.actual.values()):
                    return False  # a True, or one number, given again says nothing of where it came from
    return True


def _all_uses(step: Step) -> list[str]:
    seen: list[str] = []
    for used in step.uses:
        for inner in _all_uses(BY_ID[used]) + [used]:
            if inner not in seen:
                seen.append(inner)
    return seen


def _showing(found: "_Findings"):
    """Which failing call the feedback should show: one with the look a code names, so that the
    message never says "wrong shape" or "NaN" beside a call that has neither."""
    if "wrong-shape" in found.codes:
        return lambda v: v.shape
    if "non-finite" in found.codes:
        return lambda v: v.nonfinite
    return None


NOT_ONLY_RAISED = "Not every failing call raised; one that returned:"
NOT_ONLY_NONFINITE = "Not every failing call gave NaN or infinity; one whose finite numbers are wrong too:"


def _call_shown(case: Case, index: int) -> str:
    """How feedback names call `index` of `case`: the call with its shapes, and the case."""
    called = case.calls[index].shown(inspect_names(case.calls[index].fn))
    return f"{called}, and checked {case.label}" if case.kind == "property" else f"{called} on {case.label}"


def _first_failure(cases, verdicts, wanted=None):
    """The failing call to show: the public example first, then the first hidden one; given
    `wanted`, the first such call for which it holds (any failing call when none does)."""
    order = sorted(range(len(cases)), key=lambda c: not cases[c].public)
    for c in order:
        for i, verdict in enumerate(verdicts[c]):
            if (not verdict.ok and verdict.kind not in ("skipped", "not-implemented")
                    and (wanted is None or wanted(verdict))):
                return cases[c], i, verdict
    return _first_failure(cases, verdicts) if wanted is not None else None


def grade_run(run: Run, plan_cases: dict[str, list[Case]], expected: dict[str, list[list[dict]]],
              carry_forward: bool = True) -> list[StepResult]:
    """Grade every step of one submission's run, in step order (each after the steps it builds on).

    `carry_forward`: a step whose only fault is an earlier step's verified mistake keeps its
    points; False grades every step on its own.
    """
    results: dict[str, StepResult] = {}
    mistakes: dict[str, list] | None = {} if carry_forward else None
    run.provisional = {}
    raised: set[str] = set()
    if not run.imported:
        return _unimportable(run)
    unreached = unreached_functions(run)
    for number, step in enumerate(STEPS):
        outcomes = run.outcomes[number]
        per_case, position = [], 0
        for case in plan_cases[step.id]:
            per_case.append(outcomes[position:position + len(case.calls)])
            position += len(case.calls)
        if run.lost and all(o is None for o in outcomes):
            results[step.id] = StepResult(step.id, 0.0, step.points, "error",
                                          f"{step.title}: not graded: {run.lost}.", ["crashed"], 0, len(per_case))
            continue
        if run.lost and any(o is None for o in outcomes) and not any(o is not None and o.fault for o in outcomes):
            # the run was lost during this step: its calls without an outcome were never graded
            per_case = [[Outcome(fault="lost", detail=run.lost) if o is None else o for o in case_outcomes]
                        for case_outcomes in per_case]
        results[step.id] = grade_step(step, plan_cases[step.id], expected[step.id], per_case, results, run,
                                      mistakes, raised, run.provisional if carry_forward else None, unreached)
    return list(results.values())


def _unimportable(run: Run) -> list[StepResult]:
    if run.import_fault == "timeout":
        status, codes = "timeout", ["timeout"]
        reason = "Your module did not finish running within the time limit when it was imported."
    elif run.import_fault == "exit":
        status, codes = "error", ["exit-called"]
        reason = "Your module ended its own process while it was being imported."
    elif run.import_fault or run.lost:
        status, codes = "error", ["crashed"]
        reason = f"Your module's process died while it was being imported ({run.import_fault or run.lost})."
    else:
        error = run.import_error or {}
        status = "error"
        if error.get("type") == "ExitCalled":
            codes = ["exit-called"]
            reason = "Your module called exit (or quit, sys.exit, os._exit) while it was being imported."
        else:
            codes = ["crashed"]
            where = f" ({error['where']})" if error.get("where") else ""
            reason = (f"Your module could not be imported: it raised {error.get('type', 'an error')}: "
                      f"{error.get('message', '')}{where}.")
    # The same for every step: the reason says where to look (no section of the chapter does)
    return [StepResult(step.id, 0.0, step.points, status,
                       "\n".join([f"{step.title}: not graded.", reason]
                                 + feedback.diagnosis_lines(codes, step, carried=frozenset(codes))),
                       list(codes), 0, 1)
            for step in STEPS]
