"""The grammar of slips: the reference computation in stages, and the ways each stage goes wrong.

The reference computation is cut into stages ("knobs"): project, compare, divisor, mask, shift,
normalize, weights, mix and result for the head, and a few more for the exercises (`REFERENCE`).
A slip (`SLIPS`) replaces one stage by one way a student gets it wrong, and carries one code (its
words are in `diagnoses.CODES`). A misconception is a composition of at most two slips on
different stages; its model is the pipeline of a contract function (`PIPELINES`) with those
stages replaced, run on the student's own inputs.

This module needs nothing but numpy, so the same text can also run as a submission: the corpus
generator in tests/submissions/grammar.py writes modules made of it, one per composition.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np

Model = Callable[..., object]


class Inapplicable(Exception):
    """The slip cannot occur in this function (it needs a size the function is not given)."""


@dataclass(frozen=True)
class Slip:
    code: str
    knob: str
    """The stage it replaces; two slips of one stage do not combine."""
    variants: tuple[Callable, ...]
    """The ways of writing the slipped stage, each with the stage's signature."""
    only_beside: int = 0
    """How many of the last variants change too little to show on their own (no case can tell
    them from the chapter's computation), and show only beside another slip."""


def _t(a):
    return np.swapaxes(a, -1, -2)


def _need(sizes: dict, name: str) -> int:
    if name not in sizes:
        raise Inapplicable(name)
    return sizes[name]


def _scores(s):
    if s is None:
        raise Inapplicable("mix is given weights only")
    return s


def _transpose_first(value):
    if isinstance(value, tuple):
        return (_transpose_first(value[0]),) + value[1:]
    if not isinstance(value, np.ndarray) or value.ndim < 2:
        raise Inapplicable("transpose")
    return _t(value)


def _dot_t_first(value):
    """`.T` on the first array: on a batch it reverses every axis, not only the last two (on one
    sequence it is the swap, so that a step built on this one carries the same `.T` to a batch)."""
    if isinstance(value, tuple):
        return (_dot_t_first(value[0]),) + value[1:]
    if not isinstance(value, np.ndarray) or value.ndim < 2:
        raise Inapplicable("transpose")
    return value.T


def _swap_pair(value):
    if not isinstance(value, tuple) or len(value) != 2:
        raise Inapplicable("swap")
    return value[::-1]


def _each_array(value, change):
    if isinstance(value, tuple):
        return tuple(_each_array(part, change) for part in value)
    if not isinstance(value, np.ndarray):
        raise Inapplicable("not an array")
    return change(value)


def _causal(s):
    t = s.shape[-1]
    return np.where(np.tril(np.ones((s.shape[-2], t), dtype=bool)), s, -np.inf)


def _split_at(cuts):
    """The fused product `x @ [W_Q | W_K | W_V]` split at two widths, each d_k or d_v (`cuts`: 0 for
    d_k, 2 for d_v, the first cut and the width after it), where the right cuts are d_k and 2·d_k."""
    def project(x, w):
        widths = [np.shape(w[0])[-1], None, np.shape(w[2])[-1]]
        first, then = widths[cuts[0]], widths[cuts[1]]
        return tuple(np.split(x @ np.concatenate(w, axis=-1), [first, first + then], axis=-1))
    return project


def _masked(keep, fill):
    """A mask that keeps the scores where `keep(rows, columns)` (np.tril or np.triu with an offset)
    and puts `fill` elsewhere: -inf, or a large negative number as `masked_fill(mask, -1e9)` does,
    which leaves a row masked whole uniform where -inf leaves it NaN."""
    def mask(s):
        return np.where(keep(np.ones(s.shape[-2:], dtype=bool)), s, fill)
    return mask


def _one_hot(a):
    return (a == a.max(axis=-1, keepdims=True)).astype(float)


def _set_rows(target, rows, value):
    out = np.array(target, dtype=float)
    out[list(rows)] += value
    return out


def _moved(fn, a, v, shift, rows):
    """Exercise 3 as the reference does it: only the value rows in `rows` move."""
    if fn == "shifted_output":
        return a @ (v + shift if rows is None else _set_rows(v, rows, shift))
    weight = a.sum(axis=-1) if rows is None else a[:, list(rows)].sum(axis=-1)
    return np.outer(weight, shift)


def _receivers(fn, a, v, shift, rows):
    if rows is None:
        raise Inapplicable("every row")
    if fn == "shifted_output":
        return _set_rows(a @ v, rows, shift)
    return _set_rows(np.zeros((a.shape[0], len(shift))), rows, shift)


def _receivers_weights(fn, a, v, shift, rows):
    if rows is None or fn != "output_change":
        raise Inapplicable("every row")
    return np.outer(a[list(rows)].sum(axis=0), shift)


def _full_shift(fn, a, v, shift, rows):
    return a @ v + shift if fn == "shifted_output" else np.outer(np.ones(a.shape[0]), shift)


EXAMPLE_WEIGHTS: list = []
"""Table 15.1's weights, for the slip that offers them as a counterexample; set by `diagnoses`."""


def _example_weights():
    if not EXAMPLE_WEIGHTS:
        raise Inapplicable("the chapter's weights are not loaded")
    return np.array(EXAMPLE_WEIGHTS, dtype=float)


def _uniform(k, v, softmax):
    weights = softmax(k @ np.zeros(k.shape[-1]) / np.sqrt(k.shape[-1]))  # [T]: every score is 0
    return weights, weights @ v


# What each stage does in the reference; a slip replaces one of these.
REFERENCE: dict[str, Callable] = {
    "project": lambda x, w: (x @ w[0], x @ w[1], x @ w[2]),
    "compare": lambda q, k: q @ _t(k),
    "divisor": lambda d, sizes: (d / np.sqrt(sizes["d_k"]), 1.0),
    "mask": lambda s: s,
    "shift": lambda s: s - s.max(axis=-1, keepdims=True),
    "normalize": lambda s, shifted: np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True),
    "weights": lambda a: a,
    "reported": lambda a, s, d: a,  # the weights attention returns beside the output
    "mix": lambda a, v, s: a @ v,
    "result": lambda value: value,
    "uniform": _uniform,
    "ndim": lambda a: a.ndim == 2,
    "sign": lambda a: bool(np.all(a >= 0)),
    "rowsum": lambda a: a.sum(axis=-1),
    "close": lambda sums: bool(np.all(np.abs(sums - 1.0) <= 1e-9)),
    "counterexample": lambda: np.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]),
    "rows": lambda rows: rows,
    "after": lambda w_v, w_v_new: w_v_new,
    "moved": _moved,
    # head_facts: one stage per fact
    "divisor_fact": lambda t, d_k, d_v: {"divisor": float(np.sqrt(d_k))},
    "score_fact": lambda t, d_k, d_v: {"score_shape": (t, t)},
    "output_fact": lambda t, d_k, d_v: {"output_shape": (t, d_v)},
    "axis_fact": lambda t, d_k, d_v: {"softmax_axis": -1},
}


def _roles():
    return tuple((lambda roles: lambda x, w: tuple(x @ w[i] for i in roles))(roles)
                 for roles in ((a, b, c) for a in range(3) for b in range(3) for c in range(3))
                 if roles != (0, 1, 2))


def _exp_over(axis):
    return lambda s, shifted: np.exp(shifted) / np.exp(shifted).sum(axis=axis, keepdims=True)


def _columns(axis):
    """A softmax over the columns, shifted by each column's maximum: the shift given is not used."""
    def softmax(s, shifted):
        e = np.exp(s - s.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)
    return softmax


def _log_sum_exp_unshifted(s, shifted):
    return np.exp(s - np.log(np.exp(s).sum(axis=-1, keepdims=True)))


def _eps(epsilon):
    return lambda s, shifted: np.exp(shifted) / (np.exp(shifted).sum(axis=-1, keepdims=True) + epsilon)


SLIPS: tuple[Slip, ...] = (
    # §15.1
    Slip("swapped-roles", "project", _roles()),
    Slip("no-projection", "project", (lambda x, w: (x, x, x),)),
    Slip("elementwise-product", "project", (lambda x, w: (x * w[0], x * w[1], x * w[2]),)),
    # one fused product split in three equal parts, or at a width taken for another: right only where d_k = d_v
    Slip("fused-split-wrongly", "project", (lambda x, w: tuple(np.split(x @ np.concatenate(w, axis=-1), 3, axis=-1)),
                                            lambda x, w: tuple(np.array_split(x @ np.concatenate(w, axis=-1), 3,
                                                                              axis=-1)),
                                            *(_split_at(cuts) for cuts in ((0, 2), (2, 2), (2, 0))))),
    # §15.2. Each `.T` mistake twice: on a batch `.T` reverses all three axes.
    Slip("keys-not-transposed", "compare", (lambda q, k: k @ _t(q), lambda q, k: k @ q.T, lambda q, k: q @ k,
                                            lambda q, k: np.dot(q, k))),
    Slip("scores-prescaled", "compare", (lambda q, k: q @ _t(k) / np.sqrt(q.shape[-1]),)),
    Slip("elementwise-product", "compare", (lambda q, k: q * k,)),
    Slip("causal-mask", "mask", (_causal,)),
    Slip("causal-mask-diagonal", "mask", (_masked(lambda m: np.tril(m, -1), -np.inf),
                                          _masked(lambda m: np.tril(m, -1), -1e9))),
    Slip("reversed-mask", "mask", (_masked(np.triu, -np.inf), _masked(lambda m: np.triu(m, 1), -np.inf),
                                   _masked(lambda m: np.triu(m, 1), -1e9))),
    # §15.3: the divisor
    Slip("no-scaling", "divisor", (lambda d, sizes: (d, 1.0),)),
    Slip("scaled-by-d_k", "divisor", (lambda d, sizes: (d / sizes["d_k"], 1.0),)),
    # `len(d)` or `k.shape[0]` is T for one sequence, but B on a batch: both count rows, not d_k.
    Slip("scaled-by-positions", "divisor", (lambda d, sizes: (d / sizes["t"], 1.0),
                                            lambda d, sizes: (d / np.sqrt(sizes["t"]), 1.0),
                                            lambda d, sizes: (d / sizes["rows"], 1.0),
                                            lambda d, sizes: (d / np.sqrt(sizes["rows"]), 1.0))),
    Slip("scaled-by-d_v", "divisor", (lambda d, sizes: (d / np.sqrt(_need(sizes, "d_v")), 1.0),)),
    Slip("scaled-by-d_in", "divisor", (lambda d, sizes: (d / np.sqrt(_need(sizes, "d_in")), 1.0),)),
    Slip("scaled-weights", "divisor", (lambda d, sizes: (d, np.sqrt(sizes["d_k"])),)),
    Slip("integer-division", "divisor", (lambda d, sizes: (d // np.sqrt(sizes["d_k"]), 1.0),)),
    # §15.3: the softmax
    Slip("unstable-softmax", "shift", (lambda s: s,)),
    Slip("column-max-subtracted", "shift", (lambda s: s - s.max(axis=0, keepdims=True),
                                            lambda s: s - s.max(axis=-2, keepdims=True))),
    Slip("global-max-subtracted", "shift", (lambda s: s - s.max(),)),
    Slip("missing-keepdims", "shift", (lambda s: s - s.max(axis=-1),)),
    Slip("column-normalized", "normalize", (_exp_over(-2), _exp_over(0), _columns(-2), _columns(0))),
    Slip("whole-matrix-normalized", "normalize", (lambda s, shifted: np.exp(s - s.max()) / np.exp(s - s.max()).sum(),
                                                  lambda s, shifted: np.exp(shifted) / np.exp(shifted).sum())),
    Slip("not-exponentiated", "normalize", (lambda s, shifted: s / s.sum(axis=-1, keepdims=True),
                                            lambda s, shifted: shifted / shifted.sum(axis=-1, keepdims=True))),
    Slip("not-normalized", "normalize", (lambda s, shifted: np.exp(s), lambda s, shifted: np.exp(shifted))),
    Slip("missing-keepdims", "normalize", (lambda s, shifted: np.exp(shifted) / np.exp(shifted).sum(axis=-1),)),
    # The log-sum-exp form of the softmax, on the raw scores: exp(s - log Σ exp s) overflows to 0
    # weights on large scores and to infinity far below them; on shifted scores it is the reference.
    Slip("unstable-softmax", "normalize", (_log_sum_exp_unshifted,)),
    # An epsilon too small to show on its own (1e-9 and below) still shows beside an unshifted
    # exponential: a row whose every exponent underflows gets weights of 0 rather than NaN.
    Slip("softmax-epsilon", "normalize", tuple(_eps(10.0 ** -p) for p in range(4, 13)), only_beside=4),
    Slip("one-hot-weights", "weights", (_one_hot,)),
    # An earlier step's plain value returned in place of this one's: the scores for the weights.
    Slip("scores-as-weights", "reported", (lambda a, s, d: s, lambda a, s, d: d)),
    # §15.4
    Slip("wrong-mix-order", "mix", (lambda a, v, s: _t(a) @ v, lambda a, v, s: a.T @ v, lambda a, v, s: v @ a,
                                    lambda a, v, s: _t(v) @ a, lambda a, v, s: v.T @ a)),
    Slip("mixed-scores", "mix", (lambda a, v, s: _scores(s) @ v,)),
    Slip("output-divided-by-d_v", "mix", (lambda a, v, s: a @ v / v.shape[-1],)),
    Slip("elementwise-product", "mix", (lambda a, v, s: a * v,)),
    # Anything returned
    Slip("transposed-result", "result", (_transpose_first, _dot_t_first)),
    Slip("swapped-outputs", "result", (_swap_pair,)),
    Slip("low-precision", "result", (lambda value: _each_array(value, lambda x: x.astype(np.float32).astype(float)),)),
    Slip("rounded-result", "result", tuple((lambda n: lambda value: _each_array(value, lambda x: np.round(x, n)))(n)
                                           for n in range(2, 7))),
    # Exercise 1
    Slip("zero-output", "uniform", (lambda k, v, softmax: (np.full(k.shape[0], 1.0 / k.shape[0]), np.zeros(v.shape[-1])),
                                    lambda k, v, softmax: (np.zeros(k.shape[0]), np.zeros(v.shape[-1])))),
    Slip("summed-values", "uniform", (lambda k, v, softmax: (np.full(k.shape[0], 1.0 / k.shape[0]), v.sum(axis=0)),)),
    Slip("integer-division", "uniform", (lambda k, v, softmax: (lambda w: (w, w @ v))(
        np.full(k.shape[0], 1 // k.shape[0], dtype=float)),)),
    # Exercise 2
    Slip("accepts-column-stochastic", "rowsum", (lambda a: a.sum(axis=0),)),
    Slip("predicate-exact-equality", "close", (lambda sums: bool(np.all(sums == 1.0)),)),
    Slip("predicate-loose-tolerance", "close", (lambda sums: bool(np.allclose(sums, 1.0)),)),
    Slip("predicate-ignores-row-sums", "close", (lambda sums: True,)),
    Slip("predicate-ignores-negatives", "sign", (lambda a: True,)),
    Slip("predicate-ignores-ndim", "ndim", (lambda a: True,)),
    Slip("counterexample-row-normalized", "counterexample", (_example_weights, lambda: np.eye(3),
                                                             lambda: np.full((3, 3), 1.0 / 3.0))),
    # Exercise 3
    Slip("one-based-rows", "rows", (lambda rows: None if rows is None else [r - 1 for r in rows],
                                    lambda rows: None if rows is None else [r + 1 for r in rows])),
    Slip("full-shift-for-partial", "moved", (_full_shift,)),
    Slip("receivers-for-contributors", "moved", (_receivers, _receivers_weights)),
    # Exercise 5
    Slip("intervention-not-applied", "after", (lambda w_v, w_v_new: w_v,)),
    # Exercise 4
    Slip("divisor-sqrt-positions", "divisor_fact", (lambda t, d_k, d_v: {"divisor": float(np.sqrt(t))},)),
    Slip("scaled-by-positions", "divisor_fact", (lambda t, d_k, d_v: {"divisor": float(t)},)),
    Slip("scaled-by-d_k", "divisor_fact", (lambda t, d_k, d_v: {"divisor": float(d_k)},)),
    Slip("scaled-by-d_v", "divisor_fact", (lambda t, d_k, d_v: {"divisor": float(np.sqrt(d_v))},)),
    Slip("score-shape-d_k", "score_fact", (lambda t, d_k, d_v: {"score_shape": (t, d_k)},)),
    Slip("output-shape-d_k", "output_fact", (lambda t, d_k, d_v: {"output_shape": (t, d_k)},)),
    Slip("column-normalized", "axis_fact", (lambda t, d_k, d_v: {"softmax_axis": 0},
                                            lambda t, d_k, d_v: {"softmax_axis": -2})),
)


# ------------------------------------------------------------ pipelines --------------------------


def _softmax_with(r, s):
    return r["weights"](r["normalize"](s, r["shift"](s)))


def _attend(r, q, k, v, sizes):
    sizes = {**sizes, "d_k": q.shape[-1], "d_v": v.shape[-1], "t": q.shape[-2], "rows": q.shape[0]}
    d = r["compare"](q, k)  # [T, T]
    s, after = r["divisor"](d, sizes)
    a = _softmax_with(r, r["mask"](s))
    if after != 1.0:
        a = a / after
    return r["mix"](a, v, s), r["reported"](a, s, d)


def _head(r, x, w_q, w_k, w_v):
    q, k, v = r["project"](x, (w_q, w_k, w_v))
    return _attend(r, q, k, v, {"d_in": x.shape[-1]})


def _scale(r, d, d_k):
    s, after = r["divisor"](d, {"d_k": d_k, "t": d.shape[-1], "rows": d.shape[0]})
    if after != 1.0:
        raise Inapplicable("scaled-weights")
    return s


def _predicate(r, a):
    a = np.asarray(a, dtype=float)
    if not r["ndim"](a):
        return False
    return bool(r["sign"](a) and r["close"](r["rowsum"](a)))


def _facts(r, t, d_k, d_v):
    return {key: value for knob in ("divisor_fact", "score_fact", "output_fact", "axis_fact")
            for key, value in r[knob](t, d_k, d_v).items()}


def _intervention(r, x, w_q, w_k, w_v, w_v_new):
    # The exercise runs the head twice; what the head returns wrongly, it reports wrongly.
    o1, a1 = r["result"](_head(r, x, w_q, w_k, w_v))
    o2, a2 = r["result"](_head(r, x, w_q, w_k, r["after"](w_v, w_v_new)))
    return {"weights_before": a1, "weights_after": a2, "output_before": o1, "output_after": o2}


HEAD_KNOBS = ("compare", "divisor", "mask", "shift", "normalize", "weights", "mix", "reported")

# A stage whose value a slip of a later stage may never read, so that its shape need not reach the
# result: a normalization of the raw scores drops the shift (whose exceptions still show).
DROPPED_BY: dict[str, str] = {"shift": "normalize"}

# For each contract function: the pipeline that computes it from the stages, and its stages in order.
PIPELINES: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "project_qkv": (lambda r, x, w_q, w_k, w_v: r["project"](x, (w_q, w_k, w_v)), ("project", "result")),
    "scores": (lambda r, q, k: r["compare"](q, k), ("compare", "result")),
    "scale": (_scale, ("divisor", "result")),
    "softmax_rows": (_softmax_with, ("shift", "normalize", "weights", "result")),
    "mix": (lambda r, a, v: r["mix"](a, v, None), ("mix", "result")),
    "attention": (lambda r, q, k, v: _attend(r, q, k, v, {}), HEAD_KNOBS + ("result",)),
    "self_attention_head": (_head, ("project",) + HEAD_KNOBS + ("result",)),
    "zero_query_mixture": (lambda r, k, v: r["uniform"](k, v, lambda s: _softmax_with(r, s)),
                           ("uniform", "shift", "normalize", "result")),
    "is_attention_weights": (_predicate, ("ndim", "sign", "rowsum", "close")),
    "column_normalized_counterexample": (lambda r: r["counterexample"](), ("counterexample",)),
    "shifted_output": (lambda r, a, v, shift, rows: r["moved"]("shifted_output", a, v, shift, r["rows"](rows)),
                       ("rows", "moved")),
    "output_change": (lambda r, a, shift, rows: r["moved"]("output_change", a, None, shift, r["rows"](rows)),
                      ("rows", "moved")),
    "head_facts": (_facts, ("divisor_fact", "score_fact", "output_fact", "axis_fact")),
    "value_intervention": (_intervention, ("project",) + HEAD_KNOBS + ("after", "result")),
}

Choice = tuple  # ((slip, variant index), ...): at most one per stage


def _guarded(variant: Callable, default: Callable) -> Callable:
    """A slipped stage that behaves as the reference where the slip cannot show (a 1-D `.T`, say)."""
    def stage(*args):
        try:
            return variant(*args)
        except Inapplicable:
            return default(*args)
    return stage


def _model(fn: str, choice: Choice) -> Model:
    pipeline, knobs = PIPELINES[fn]
    recipe = dict(REFERENCE)
    for slip, index in choice:
        recipe[slip.knob] = _guarded(slip.variants[index], REFERENCE[slip.knob])
    if "result" in knobs:
        return lambda *args: recipe["result"](pipeline(recipe, *args))
    return lambda *args: pipeline(recipe, *args)


def codes_of(choice: Choice) -> tuple[str, ...]:
    """A composition's codes, in the order of the computation, each once."""
    return tuple(dict.fromkeys(slip.code for slip, _ in choice))


def _singles(fn: str) -> list[Choice]:
    knobs = PIPELINES[fn][1]
    return [((slip, i),) for knob in knobs for slip in SLIPS if slip.knob == knob for i in range(len(slip.variants))]


@lru_cache(maxsize=None)
def models(fn: str, depth: int) -> tuple[tuple[tuple[str, ...], Choice, Model], ...]:
    """Every composition of exactly `depth` slips (1 or 2) on `fn`'s stages: (codes, choice, model)."""
    singles = _singles(fn)
    if depth == 1:
        choices = singles
    else:
        choices = [first + second for n, first in enumerate(singles) for second in singles[n + 1:]
                   if first[0][0].knob != second[0][0].knob]
    return tuple((codes_of(choice), choice, _Composed(fn, choice)) for choice in choices)


class _Composed:
    """The model of a slip or a composition of slips, made each time it is run: most of a
    function's thousands of compositions never are (the judge rules them out first), the judge
    runs each at most once per hidden call, and a made model holds a recipe of its own, which kept
    for every composition a class ever ran would make the grader's memory grow with the class."""

    __slots__ = ("fn", "choice")

    def __init__(self, fn: str, choice: Choice):
        self.fn, self.choice = fn, choice

    def __call__(self, *args):
        return _model(self.fn, self.choice)(*args)


def apply(fn: str, choice: Choice, *args):
    """`fn` with the slips in `choice`, on `args`; where a slip cannot show, the reference's value."""
    try:
        return _model(fn, choice)(*args)
    except Inapplicable:
        return _model(fn, ())(*args)
