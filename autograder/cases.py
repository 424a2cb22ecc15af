"""The hidden cases: the chapter's example plus seeded cases that a hard-coded answer cannot pass.

Every step gets the chapter's worked example first (public: its values may appear in feedback),
then hidden cases drawn from a generator seeded with HMAC-SHA256(grading key, seed, step number)
(see keys.py): one seed under one key reproduces every grade exactly, and a step's inputs reveal
nothing of a later step's. Hidden shapes are non-square with d_in, d_k and d_v all
different, T runs from 1 to 16, and `scores`, `scale`, `softmax`, `attention` and `head` also get
scores in the thousands (a step is shown the magnitudes the steps built on it are, so that a slip
there shows where it is); `softmax`, `attention` and `head` get rows lying at least 800 below the
matrix's largest score (where a softmax shifted by the global maximum underflows to 0/0); `batch`
gets a batch of one example among its batches; `softmax` also gets a batch of score matrices
[B, T, T], and exercise 2's predicate gets every boundary its docstring states: arrays that are
not 2-D (a batch whose rows and columns all sum to one among them), row sums just inside and just
outside 1e-9 (one row 1.5e-9 over, where the mean row sum is still within it: a tolerance loosened
even to 2e-9 accepts that row, and is caught), a valid weight of exactly 0, a negative entry, one
of -1e-12 and one of -0.125 where no entry is above 1, a NaN entry, and a matrix whose first row
sums to one but a later row does not; exercise 3 gets rows=None, lists of rows and
an empty list (which shifts nothing). A few cases are square on purpose, so that a slip that
would only raise elsewhere runs and its result can be recognised: one case per comparison step has
T = d_k (`q @ k` without the transpose), one `mix` case has d_v = T (`v @ a`), and one `qkv` and
one `head` case have T = d_in = d_k = d_v (`x * w` in place of `x @ w`).
"""
from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from .keys import local_key
from .steps import STEP_IDS

DATA = Path(__file__).resolve().parent / "_data" / "part-iv" / "attention.json"  # _data: the project's data/


@dataclass(frozen=True)
class Call:
    fn: str
    args: tuple

    def shown(self, names: tuple[str, ...]) -> str:
        """The call as a student would write it, with each array argument's shape."""
        parts = []
        for name, arg in zip(names, self.args):
            if isinstance(arg, np.ndarray):
                parts.append(f"{name} {list(arg.shape)}")
            else:
                parts.append(f"{name}={arg!r}")
        return f"{self.fn}({', '.join(parts)})"


@dataclass(frozen=True)
class Case:
    step: str
    label: str
    """How the case is named in feedback: "the chapter's example", "hidden case 3", …"""
    kind: str
    """example, hidden, large (scores in the thousands), far (rows far below the largest score),
    reshaped (the example's shapes, other numbers) or property."""
    calls: tuple[Call, ...]

    @property
    def public(self) -> bool:
        return self.kind == "example"


@lru_cache(maxsize=1)
def chapter() -> dict:
    with DATA.open() as handle:
        return json.load(handle)


def example_arrays() -> dict[str, np.ndarray]:
    data = chapter()
    arrays = {name: np.array(value, dtype=float) for name, value in data["inputs"].items()}
    arrays.update({name: np.array(value, dtype=float) for name, value in data["exact"].items()})
    arrays.update({name: np.array(value, dtype=float) for name, value in data["values"].items()})
    return arrays


def _widths(rng: np.random.Generator) -> tuple[int, int, int]:
    d_in, d_k, d_v = rng.choice(np.arange(1, 9), size=3, replace=False)
    return int(d_in), int(d_k), int(d_v)


def _weights(rng: np.random.Generator, t: int, cols: int | None = None) -> np.ndarray:
    logits = rng.normal(scale=1.5, size=(t, cols or t))
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _sizes(rng: np.random.Generator, count: int) -> list[int]:
    """Sequence lengths for `count` hidden cases: always 1 and 16, the rest in between."""
    middle = [int(t) for t in rng.integers(2, 16, size=max(count - 2, 0))]
    return ([1, 16] + middle)[:count]


def _head_inputs(rng, t, d_in, d_k, d_v, batch=None, spread=1.0):
    lead = (t,) if batch is None else (batch, t)
    x = rng.normal(scale=spread, size=lead + (d_in,))
    return (x, rng.normal(size=(d_in, d_k)), rng.normal(size=(d_in, d_k)), rng.normal(size=(d_in, d_v)))


HIDDEN = 5  # random cases per step, besides the example and any large or property cases


def _square_last(rng, i: int, t: int) -> tuple[int, int, int]:
    """Widths for hidden case i: all different, but T = d_in = d_k = d_v in the last, so that an
    elementwise `x * w` in place of `x @ w` runs and its result can be recognised."""
    widths = _widths(rng)
    return (t, t, t) if i == HIDDEN - 1 else widths


def _cases_qkv(rng, ex):
    yield "example", (Call("project_qkv", (ex["X"], ex["W_Q"], ex["W_K"], ex["W_V"])),)
    for i, t in enumerate(_sizes(rng, HIDDEN)):
        yield "hidden", (Call("project_qkv", _head_inputs(rng, t, *_square_last(rng, i, t))),)


def _cases_scores(rng, ex):
    yield "example", (Call("scores", (ex["Q"], ex["K"])),)
    for i, t in enumerate(_sizes(rng, HIDDEN)):
        d_k = t if i == HIDDEN - 1 else _widths(rng)[1]
        yield "hidden", (Call("scores", (rng.normal(size=(t, d_k)), rng.normal(size=(t, d_k)))),)
    # Scores in the thousands, as `attention` and `head` meet them: a step is shown the magnitudes
    # the steps built on it are, so that a slip there (a clip, say) is told where it is (drawn last,
    # so that the cases before it stay what they were).
    yield "large", (Call("scores", (rng.normal(scale=40.0, size=(5, 4)), rng.normal(scale=40.0, size=(5, 4)))),)


def _cases_scale(rng, ex):
    yield "example", (Call("scale", (ex["D"], 2)),)
    for t, d_k in zip(_sizes(rng, HIDDEN), (3, 5, 8, 16, 64)):
        yield "hidden", (Call("scale", (rng.normal(scale=3.0, size=(t, t)), d_k)),)
    yield "large", (Call("scale", (rng.uniform(-3000.0, 3000.0, size=(6, 6)), 4)),)


def _cases_softmax(rng, ex):
    yield "example", (Call("softmax_rows", (ex["S"],)),)
    for t in _sizes(rng, HIDDEN):
        yield "hidden", (Call("softmax_rows", (rng.normal(scale=2.0, size=(t, t)),)),)
    t = 6
    yield "large", (Call("softmax_rows", (rng.uniform(1000.0, 3000.0, size=(t, t)),)),)
    yield "large", (Call("softmax_rows", (-rng.uniform(1000.0, 3000.0, size=(t, t)),)),)
    far = rng.normal(scale=2.0, size=(t, t)) + rng.permutation([0.0, -850.0, -1200.0, 0.0, -2000.0, 30.0])[:, None]
    yield "far", (Call("softmax_rows", (far,)),)
    # The docstring allows [..., T, T]: a batch of score matrices, each row on its own.
    yield "hidden", (Call("softmax_rows", (rng.normal(scale=2.0, size=(3, 4, 4)),)),)


INTERLEAVED = np.array([[0.5, 0.0, 0.5, 0.0], [0.0, 0.25, 0.0, 0.75], [0.0, 0.0, 1.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
"""Valid weights with zeros between the keys that count: a loop that stops at a zero weight
(`break` where `continue` was meant), or skips the keys after one, is wrong here, and a softmax's
weights never hold an exact 0."""


def _cases_mix(rng, ex):
    yield "example", (Call("mix", (ex["A"], ex["V"])),)
    for i, t in enumerate(_sizes(rng, HIDDEN)):
        d_v = t if i == HIDDEN - 1 else _widths(rng)[2]
        yield "hidden", (Call("mix", (_weights(rng, t), rng.normal(size=(t, d_v)))),)
    # drawn last, so that the cases before it stay what they were
    yield "hidden", (Call("mix", (INTERLEAVED.copy(), rng.normal(size=(4, 3)))),)


def _cases_attention(rng, ex):
    yield "example", (Call("attention", (ex["Q"], ex["K"], ex["V"])),)
    for i, t in enumerate(_sizes(rng, HIDDEN)):
        _, d_k, d_v = _widths(rng)
        d_k = t if i == HIDDEN - 1 else d_k
        yield "hidden", (Call("attention", (rng.normal(size=(t, d_k)), rng.normal(size=(t, d_k)),
                                            rng.normal(size=(t, d_v)))),)
    t, d_k, d_v = 5, 4, 3
    yield "large", (Call("attention", (rng.normal(scale=40.0, size=(t, d_k)), rng.normal(scale=40.0, size=(t, d_k)),
                                       rng.normal(size=(t, d_v)))),)
    # One query aligned with key 0 so strongly that its score is 2000 after scaling; the other rows
    # stay near 0, far below that maximum.
    q, k = rng.normal(size=(t, d_k)), rng.normal(size=(t, d_k))
    q[1] = k[0] * (2000.0 * np.sqrt(d_k) / (k[0] @ k[0]))
    yield "far", (Call("attention", (q, k, rng.normal(size=(t, d_v)))),)


def _cases_head(rng, ex):
    yield "example", (Call("self_attention_head", (ex["X"], ex["W_Q"], ex["W_K"], ex["W_V"])),)
    for i, t in enumerate(_sizes(rng, HIDDEN)):
        yield "hidden", (Call("self_attention_head", _head_inputs(rng, t, *_square_last(rng, i, t))),)
    yield "large", (Call("self_attention_head", _head_inputs(rng, 7, 3, 4, 2, spread=40.0)),)
    # Input row 1 stretched until its own score is 2000 after scaling; the other rows stay small.
    x, w_q, w_k, w_v = _head_inputs(rng, 6, 3, 4, 2)
    form = x[1] @ w_q @ w_k.T @ x[1]
    w_k = w_k if form > 0 else -w_k
    x[1] *= np.sqrt(2000.0 * np.sqrt(4) / abs(form))
    yield "far", (Call("self_attention_head", (x, w_q, w_k, w_v)),)


def _cases_batch(rng, ex):
    # The example's second sequence is fixed, as the chapter's first is: the example is the same in
    # every run, so what each misconception model gives on it is worked out once (atlas.py). The
    # draw is still made, so that a seed's hidden cases stay the same from one version to the next
    # (a run resumed after an upgrade grades on the cases it began with).
    rng.normal(size=ex["X"].shape)
    second = np.random.default_rng(15).normal(size=ex["X"].shape)  # any fixed draw; 15 for the chapter
    yield "example", (Call("self_attention_head", (np.stack([ex["X"], second]), ex["W_Q"], ex["W_K"], ex["W_V"])),)
    for t in _sizes(rng, HIDDEN):
        batch = int(rng.integers(2, 5))
        yield "hidden", (Call("self_attention_head", _head_inputs(rng, t, *_widths(rng), batch=batch)),)
    # A batch of one example is still a batch: [1, T, d_in] in, [1, T, d_v] and [1, T, T] out (drawn
    # last, so that the cases before it stay what they were).
    yield "hidden", (Call("self_attention_head", _head_inputs(rng, int(rng.integers(2, 9)), *_widths(rng), batch=1)),)


def _cases_ex1(rng, ex):
    yield "example", (Call("zero_query_mixture", (ex["K"], ex["V"])),)
    for t in _sizes(rng, HIDDEN):
        _, d_k, d_v = _widths(rng)
        yield "hidden", (Call("zero_query_mixture", (rng.normal(size=(t, d_k)), rng.normal(size=(t, d_v)))),)


def _cases_ex2(rng, ex):
    yield "example", (Call("is_attention_weights", (ex["A"],)),)
    counter = np.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    yield "property", (Call("column_normalized_counterexample", ()),)
    column_stochastic = _weights(rng, 4).T.copy()  # every column sums to one, rows do not
    negative = _weights(rng, 4)
    negative[1, :2] += np.array([0.5, -0.5]) + np.array([0.0, -negative[1, 1]])
    negative[1] /= negative[1].sum()
    near = _weights(rng, 5)
    near[2] *= 1.0 + 1e-6
    within = _weights(rng, 5)
    within[3] *= 1.0 + 1e-12
    # The tolerance's edges: a row sum 5e-10 over one (valid) and 5e-9 over (not), a valid weight
    # of exactly 0, and a first row that sums to one above a later one that sums to a half.
    inside, outside = _weights(rng, 4), _weights(rng, 4)
    inside[1] += 5e-10 / 4
    outside[2] += 5e-9 / 4
    zero = _weights(rng, 4)
    zero[2] = [0.0, 0.25, 0.75, 0.0]
    later = _weights(rng, 4)
    later[3] *= 0.5
    # A NaN entry (neither non-negative nor summing to anything), an entry of -1e-12 in a row that
    # still sums to one (negative all the same), and one row 1.5e-9 over one: outside 1e-9, although
    # the mean row sum (and the total against T) is within it, and within a tolerance of 2e-9.
    nan = _weights(rng, 4)
    nan[1, 2] = np.nan
    tiny = _weights(rng, 4)
    tiny[2, 0], tiny[2, 1] = -1e-12, tiny[2, 1] + tiny[2, 0] + 1e-12
    spread = _weights(rng, 4)
    spread[1] += 1.5e-9 / 4
    # Valid weights of another size whose every row sums to exactly one in floating point: a test
    # of the example's shape fails it where a test of exact equality passes it, so the two are told apart.
    # (Every entry positive: a test of strictly positive entries passes it too.)
    exact = np.array([[0.5, 0.25, 0.125, 0.125], [0.25, 0.25, 0.25, 0.25], [0.625, 0.125, 0.125, 0.125],
                      [0.375, 0.125, 0.25, 0.25]])
    for matrix in (counter, column_stochastic, _weights(rng, 4, 6), negative, near, within,
                   _weights(rng, 3)[None], _weights(rng, 1)[0], inside, outside, zero, later, nan, tiny, spread,
                   # a batch whose rows and columns all sum to one: not 2-D, whatever axis is summed
                   np.full((2, 3, 3), 1.0 / 3.0), exact,
                   # a clearly negative entry where every entry is at most 1 and every row sums to
                   # one: only a test of the signs rejects it, whatever else is tested
                   np.array([[0.25, 0.25, 0.25, 0.25], [0.625, 0.5, -0.125, 0.0], [0.5, 0.5, 0.0, 0.0],
                             [0.125, 0.125, 0.25, 0.5]]),
                   # one row wrong, every other right: the first (summing to 1.5), a middle one summing
                   # to a half (below one, which a test without the absolute value lets through), and
                   # the last (negative, summing to one): a loop over the rows that skips the first or
                   # the last, or a test phrased one-sidedly, is caught on its own
                   np.array([[0.75, 0.5, 0.25, 0.0], [0.25, 0.25, 0.25, 0.25], [0.5, 0.25, 0.125, 0.125],
                             [0.125, 0.375, 0.25, 0.25]]),
                   np.array([[0.5, 0.25, 0.25, 0.0, 0.0], [0.125, 0.125, 0.125, 0.125, 0.0],
                             [0.2, 0.2, 0.2, 0.2, 0.2], [0.0, 0.0, 0.5, 0.5, 0.0], [0.25, 0.25, 0.25, 0.125, 0.125]]),
                   np.array([[0.25, 0.25, 0.25, 0.25], [0.5, 0.5, 0.0, 0.0], [0.125, 0.375, 0.25, 0.25],
                             [0.5, 0.75, -0.25, 0.0]]),
                   # valid weights of two positions, and an invalid stack of two: a test of the
                   # length (`len(a) == 2`, the rows counted) where the axes are meant tells them apart
                   np.array([[0.75, 0.25], [0.5, 0.5]]), np.full((2, 2, 2), 0.5),
                   # a NaN in a row whose other entries sum to one (valid only if NaN were 0), and a
                   # row 2e-7 over one (within a tolerance of 1e-6, or of a sum rounded to 6 decimals)
                   np.array([[0.5, 0.5, np.nan, 0.0], [0.25, 0.25, 0.25, 0.25], [0.5, 0.25, 0.25, 0.0],
                             [0.125, 0.125, 0.25, 0.5]]),
                   np.array([[0.25, 0.25, 0.25, 0.25], [0.5, 0.25, 0.125, 0.125 + 2e-7], [0.5, 0.5, 0.0, 0.0]]),
                   # every row summing to a half: a test of one row's sum alone (the largest, the
                   # first) rejects it, as it should, where a test without the absolute value does not
                   np.full((4, 4), 0.125)):
        yield "hidden", (Call("is_attention_weights", (matrix,)),)


def _cases_ex3(rng, ex):
    shift = np.array([2.0, -1.0])
    yield "example", (Call("shifted_output", (ex["A"], ex["V"], shift, None)),
                      Call("output_change", (ex["A"], shift, None)))
    yield "example", (Call("shifted_output", (ex["A"], ex["V"], shift, [0])),
                      Call("output_change", (ex["A"], shift, [0])))
    for t in _sizes(rng, HIDDEN):
        d_v = _widths(rng)[2]
        a, v, shift = _weights(rng, t), rng.normal(size=(t, d_v)), rng.normal(size=d_v)
        rows = None if t == 1 else sorted(int(r) for r in rng.choice(t, size=int(rng.integers(1, t)), replace=False))
        yield "hidden", (Call("shifted_output", (a, v, shift, rows)), Call("output_change", (a, shift, rows)))
    # An empty list shifts nothing: the output stays a @ v and the change is zero.
    t, d_v = 4, _widths(rng)[2]
    a, v, shift = _weights(rng, t), rng.normal(size=(t, d_v)), rng.normal(size=d_v)
    yield "hidden", (Call("shifted_output", (a, v, shift, [])), Call("output_change", (a, shift, [])))


def _cases_ex4(rng, ex):
    yield "example", (Call("head_facts", (5, 4, 3)),)
    for t in _sizes(rng, HIDDEN):
        _, d_k, d_v = _widths(rng)
        yield "hidden", (Call("head_facts", (max(t, 2), d_k + 8 if d_k == t else d_k, d_v)),)


def _cases_ex5(rng, ex):
    yield "example", (Call("value_intervention", (ex["X"], ex["W_Q"], ex["W_K"], ex["W_V"], np.zeros_like(ex["W_V"]))),)
    for t in _sizes(rng, HIDDEN):
        x, w_q, w_k, w_v = _head_inputs(rng, t, *_widths(rng))
        yield "hidden", (Call("value_intervention", (x, w_q, w_k, w_v, rng.normal(size=w_v.shape))),)


BUILDERS = {
    "qkv": _cases_qkv, "scores": _cases_scores, "scale": _cases_scale, "softmax": _cases_softmax,
    "mix": _cases_mix, "attention": _cases_attention, "head": _cases_head, "batch": _cases_batch,
    "ex1_zero_query": _cases_ex1, "ex2_row_normalization": _cases_ex2, "ex3_value_shift": _cases_ex3,
    "ex4_shapes": _cases_ex4, "ex5_intervention": _cases_ex5,
}
assert tuple(BUILDERS) == STEP_IDS


def step_rng(seed: int, number: int, key: bytes) -> np.random.Generator:
    """The generator of one step's hidden cases: keyed, so the seed alone predicts nothing."""
    digest = hmac.new(key, b"qkv-cases\0%d\0%d" % (seed, number), hashlib.sha256).digest()
    return np.random.default_rng(int.from_bytes(digest, "big"))


# An example case that is not the chapter's example alone: said so wherever it is named.
EXAMPLE_LABELS = {"batch": "the chapter's example with a second sequence stacked after it"}


def build(seed: int, key: bytes | None = None) -> dict[str, list[Case]]:
    """Every step's cases for this seed under `key` (by default this user's grading key), in step order."""
    key = local_key() if key is None else key
    ex = example_arrays()
    cases = {}
    for number, step_id in enumerate(STEP_IDS):
        rng = step_rng(seed, number, key)
        hidden = 0
        built = []
        for kind, calls in _with_example_shapes(BUILDERS[step_id](rng, ex), rng):
            if kind == "example":
                label = EXAMPLE_LABELS.get(step_id, "the chapter's example")
            elif kind == "property":
                label = "the properties of your counterexample"
            else:
                hidden += 1
                label = f"hidden case {hidden}" + {"large": " (scores in the thousands)",
                                                   "far": " (rows far below the largest score)",
                                                   "reshaped": " (the example's shapes, other numbers)"}.get(kind, "")
            built.append(Case(step_id, label, kind, calls))
        cases[step_id] = built
    return cases


def _with_example_shapes(made, rng):
    """A step's cases, and last (so that the cases before it stay what they were) the example's calls
    again with other numbers of the same shapes: a result that depends on the shapes alone (a cache
    keyed on them, an answer kept from the first call of that shape) gives the example's numbers
    there, where the example cannot show it. Not for calls without arrays (exercise 4's sizes)."""
    example = None
    for kind, calls in made:
        if kind == "example":
            example = calls
        yield kind, calls
    if example is not None and any(isinstance(arg, np.ndarray) for call in example for arg in call.args):
        yield "reshaped", tuple(Call(call.fn, tuple(_other_numbers(rng, arg, call.fn != "is_attention_weights")
                                                    for arg in call.args)) for call in example)


def _other_numbers(rng, arg, weights_for_weights: bool = True):
    """Fresh numbers in `arg`'s shape: weights for a matrix of weights (each row non-negative,
    summing to one), except for the predicate, whose answer on the example (True) they would give
    again. (The examples' weights are [T, T] matrices.)"""
    if not isinstance(arg, np.ndarray):
        return arg
    if weights_for_weights and arg.ndim == 2 and np.all(arg >= 0) and np.allclose(arg.sum(axis=-1), 1.0):
        return _weights(rng, *arg.shape)
    return rng.normal(size=arg.shape)
