"""Misconceptions: what each diagnosis code means to a student, and the grammar of slips behind them.

Every mistake is a composition of at most two elementary slips. The reference computation is cut
into stages (`REFERENCE`); a slip (`SLIPS`) replaces one stage with one way of getting it wrong and
carries one code, whose words are in `CODES`. A composition's model is the reference pipeline of a
contract function (`PIPELINES`) with those stages replaced, run on the student's own inputs; when
the student's output matches it (and not the reference), the step names its codes. A composite step
also tries the earlier steps' diagnosed models, called the way the reference calls them
(`through_reference`), so one mistake in `softmax_rows` is named once, the same way, everywhere it
shows. Codes that need a probe rather than a model (faults, mutation, hard-coding, batches,
float32 arithmetic inside a computation) are decided in `judge.py` from the pattern of results.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import FunctionType
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Diagnosis:
    code: str
    what: str
    """What went wrong, in the chapter's words."""
    look: str
    """Where to look in the student's code."""
    section: str
    """The section to reread; empty for faults that any step can show (the step's own section is cited)."""


def _d(code, what, look, section=""):
    return code, Diagnosis(code, what, look, section)


CODES: dict[str, Diagnosis] = dict([
    # Faults and probes that any step can show.
    _d("not-implemented", "this function still raises NotImplementedError, or your module has no function "
       "by this name.",
       "Write the body in place of `raise NotImplementedError()`, keeping the template's name and arguments."),
    _d("wrong-shape", "the array you returned has the wrong shape.",
       "Check which axes each product keeps and which it sums over; the docstring gives every shape."),
    _d("non-finite", "your result contains NaN or infinity although every input was finite.",
       "Look for a division by zero (a total of zero, such as a sum of all-zero scores) or an exponential "
       "of a large number.", "§15.3"),
    _d("hard-coded", "you are right on the chapter's example but wrong on other inputs.",
       "Compute from the arguments you are given: no numbers copied from the example, and no sizes taken "
       "from its shapes."),
    _d("mutates-input", "your function changed an array it was given.",
       "Work on a copy (`np.array(v, dtype=float)`) or build new arrays; no `-=`, `+=` or slice assignment "
       "on an argument."),
    _d("low-precision", "your numbers have the right structure but float32-sized errors (about 1e-7).",
       "Keep every array in float64: no `astype(np.float32)`, `dtype=np.float32` or rounding.", "§15.6"),
    _d("timeout", "this step ran past its time limit (the other steps were still graded).",
       "Look for a loop that never ends, or work that grows far faster than the input."),
    _d("exit-called", "your code called exit(), sys.exit() or os._exit(), which ends the program.",
       "Remove the call; return a value instead."),
    _d("crashed", "your code raised an exception, or its process died.",
       "Run the function on the chapter's example and read the error."),
    _d("unreadable", "the file could not be read as a submission: it is not UTF-8 text, or not a valid "
       "notebook, so none of its steps could be graded.",
       "Open it in Jupyter or an editor, save it again as attention_head.ipynb or attention_head.py, and "
       "resubmit."),
    _d("memory-limit", "your code tried to use more memory than the grader allows.",
       "Look for an array far larger than the inputs, such as an accidental outer product."),
    _d("wrong-type", "your function returned something other than what the step asks for: None, a string, "
       "a subclass of ndarray, or an object the grader will not compare.",
       "Return plain numpy arrays (or lists of numbers), in a tuple or dict where the docstring says so; "
       "check that every path through the function ends in `return`."),
    # §15.1: one input, three products.
    _d("swapped-roles", "you projected with the wrong matrix: queries come from W_Q, keys from W_K and "
       "values from W_V, three separate products of the same input.",
       "Check which W each of q, k and v is multiplied by.", "§15.1"),
    # §15.2: compare every receiving row with every contributing key.
    _d("keys-not-transposed", "you compared without transposing the keys, or with queries and keys swapped: "
       "D = Q Kᵀ puts the receiving queries on the rows and the contributing keys on the columns.",
       "Use `q @ k.T` (or `np.swapaxes(k, -1, -2)`, which also works for a batch), not `q @ k` or `k @ q.T`.",
       "§15.2"),
    _d("scores-prescaled", "your `scores` already divides by √d_k; D is the plain dot products, and "
       "scaling is the next step's job.",
       "Return `q @ k.T` without the division.", "§15.2"),
    # §15.3: the divisor √d_k.
    _d("no-scaling", "you did not divide the scores by the divisor √d_k.",
       "Divide every score by `np.sqrt(d_k)`.", "§15.3"),
    _d("scaled-by-d_k", "you divided by d_k itself; the divisor is its square root, √d_k.",
       "Use `np.sqrt(d_k)` as the divisor.", "§15.3"),
    _d("scaled-by-positions", "you divided by the number of positions T (or √T); the divisor √d_k counts "
       "the query/key coordinates in each dot product.",
       "d_k is the last axis of q and k (`q.shape[-1]`), not the number of rows T.", "§15.3"),
    _d("scaled-by-d_v", "you divided by √d_v, the value width; the divisor is √d_k, the query/key width.",
       "d_k is the last axis of q and k (`q.shape[-1]`), not of v.", "§15.3"),
    _d("scaled-by-d_in", "you divided by √d_in, the input width; the divisor is √d_k, the width of the "
       "queries and keys.",
       "Read d_k from q (`q.shape[-1]`), not from x.", "§15.3"),
    _d("divisor-sqrt-positions", "you gave √T as the divisor; it is √d_k, the number of terms in each "
       "dot product.",
       "The divisor depends on d_k only, never on T.", "§15.3"),
    _d("scaled-weights", "you scaled the weights after the softmax instead of the scores before it, so the "
       "rows no longer sum to one.",
       "Divide the scores by √d_k first, then apply the softmax.", "§15.3"),
    # §15.3: normalize each receiving row over the contributing keys.
    _d("column-normalized", "you normalized the columns, over receivers; normalize each row, over the "
       "contributing keys, so every receiving position gets a unit-total mixture.",
       "The softmax runs along the last axis: `axis=-1, keepdims=True` for the maximum and the sum.", "§15.3"),
    _d("whole-matrix-normalized", "you normalized over the whole matrix at once; each receiving row needs "
       "its own total.",
       "Sum along the last axis with `keepdims=True`, not over every element.", "§15.3"),
    _d("unstable-softmax", "your softmax overflows to NaN or infinity when the scores are in the thousands.",
       "Subtract each row's maximum before `np.exp`: the weights stay the same and no exponent is above 0.",
       "§15.3"),
    _d("not-exponentiated", "you divided the scores by their row totals without exponentiating them, so "
       "negative scores give negative weights and a zero total divides by zero.",
       "Apply `np.exp` to the (shifted) scores before normalizing.", "§15.3"),
    _d("not-normalized", "you exponentiated the scores but did not divide by each row's total, so the rows "
       "do not sum to one.",
       "Divide each row of exponentials by its own sum.", "§15.3"),
    _d("column-max-subtracted", "you subtracted each column's maximum; the shift must be one number per "
       "receiving row (its own maximum), or the weights change.",
       "Use `s.max(axis=-1, keepdims=True)`.", "§15.3"),
    # §15.4: receive values, not scores.
    _d("mixed-scores", "you mixed the value rows with the scores instead of the softmax weights.",
       "Pass the normalized weights A to the mix, not D or S.", "§15.4"),
    _d("wrong-mix-order", "you multiplied in the wrong order or with transposed weights: O = A V gives each "
       "receiving row a sum over the contributing positions.",
       "Use `a @ v`: weights [T, T] on the left, values [T, d_v] on the right, no transpose.", "§15.4"),
    _d("output-divided-by-d_v", "you divided the output by the value width d_v; the only denominator is "
       "each row's softmax total, already inside the weights.",
       "Return `a @ v` as it is.", "§15.4"),
    _d("output-shape-d_k", "you gave the output the query/key width; each output row is a mixture of value "
       "rows, so its width is d_v.",
       "The output is [T, d_v].", "§15.4"),
    _d("batch-axes-mixed", "your head works on one sequence but not on a [B, T, d_in] batch; each example "
       "must be computed on its own, never mixed with the others.",
       "Let every product and reduction act on the last two axes: `np.swapaxes(k, -1, -2)` rather than "
       "`.T` (which reverses all three axes), `axis=-1` in the softmax, and no reshape that merges the "
       "batch into the positions.", "§15.4"),
    # The exercises.
    _d("zero-output", "a zero query still mixes the values: every score is 0, so the weights are equal and "
       "the output is the mean of the value rows, not zero.",
       "Compute the weights from the zero scores with the softmax, then mix the value rows.", "§15.8"),
    _d("accepts-column-stochastic", "you accepted a matrix whose columns sum to one but whose rows do not; "
       "attention weights need every receiving row to sum to one.",
       "Sum along axis 1 (each receiving row), not axis 0.", "§15.3"),
    _d("predicate-exact-equality", "you compared row sums with == 1; floating-point sums need a tolerance "
       "(1e-9 here).",
       "Use `abs(row_sum - 1) <= 1e-9`, or `np.isclose(row_sum, 1, rtol=0, atol=1e-9)`.", "§15.6"),
    _d("predicate-ignores-negatives", "you accepted a matrix with a negative entry; attention weights are "
       "never negative.",
       "Check `np.all(a >= 0)` as well as the row sums.", "§15.3"),
    # Slips found by the search over compositions (see SLIPS below).
    _d("global-max-subtracted", "you subtracted the largest score of the whole matrix, not each row's own "
       "maximum; a row far below that maximum then underflows to 0/0.",
       "Use `s.max(axis=-1, keepdims=True)`, one maximum per receiving row.", "§15.3"),
    _d("missing-keepdims", "you reduced along the last axis without `keepdims=True`, so the row maxima or "
       "totals were broadcast along the columns: each column was shifted or divided by another row's value.",
       "Keep the reduced axis: `s.max(axis=-1, keepdims=True)` and `e.sum(axis=-1, keepdims=True)`.",
       "§15.3"),
    _d("softmax-epsilon", "you added a small constant to each row's total, so the weights no longer sum to "
       "one; the maximum shift already keeps every total at 1 or more.",
       "Divide by the plain row total: no `+ 1e-6` or similar.", "§15.3"),
    _d("causal-mask", "you masked the later positions (a causal mask), which this head does not ask for: "
       "every receiving position attends to every key.",
       "Remove the mask (`np.tril`, `np.triu`, `-np.inf` entries) before the softmax.", "§15.2"),
    _d("one-hot-weights", "your weights put everything on the best key of each row (an argmax); the "
       "softmax gives every key a share in proportion to exp(score).",
       "Return the normalized exponentials themselves, not an indicator of the maximum.", "§15.3"),
    _d("elementwise-product", "you multiplied elementwise (`*`) where the step needs a matrix product "
       "(`@`), which sums over the shared axis.",
       "Use `@` (or `np.matmul`) for the product.", "§15.1"),
    _d("no-projection", "you attended over the input itself: queries, keys and values are three "
       "projections of x, by W_Q, W_K and W_V.",
       "Compute q, k and v from x with the three matrices before attending.", "§15.1"),
    _d("transposed-result", "your numbers are right but transposed: each receiving position must be a row "
       "of the result.",
       "Drop the final `.T` (or transpose); the docstring gives the shape.", "§15.4"),
    _d("swapped-outputs", "you returned the parts of the tuple in the wrong order.",
       "Return them in the docstring's order, for instance `(o, a)`: the output first, then the weights.",
       "§15.4"),
    _d("rounded-result", "you rounded the result; the grader compares to about 1e-9.",
       "Return the values unrounded: no `np.round` or `round` on the result.", "§15.6"),
    _d("integer-division", "you used floor division (`//`), which drops the fractional part: 1 // T is 0 "
       "for every T above 1.",
       "Use true division `/`.", "§15.3"),
    _d("one-based-rows", "you treated the row indices as 1-based; Python counts rows from 0, so row 0 "
       "is the first value row.",
       "Use the indices in `rows` as they are, without subtracting 1.", "§15.5"),
    _d("receivers-for-contributors", "you moved the receiving rows (rows of the output, or rows of the "
       "weights) instead of the contributing value rows: a shifted value row reaches every receiver in "
       "proportion to its weight on that row.",
       "Shift the value rows `v[rows]`, and sum each receiver's weights over the columns `a[:, rows]`.",
       "§15.5"),
    _d("counterexample-row-normalized", "your counterexample is normalized over its rows, like Table 15.1; "
       "the exercise asks for columns that sum to one and a first row that does not.",
       "Build a matrix whose columns each sum to one, for instance with one receiver taking everything.",
       "§15.8"),
    _d("score-shape-d_k", "you gave the score matrix the query/key width; it compares every receiving "
       "query with every contributing key, so it is [T, T].",
       "The score shape is (t, t).", "§15.2"),
    _d("intervention-not-applied", "your 'after' run still uses the old W_V, so nothing was changed: the "
       "comparison needs the same head run once with W_V and once with the new matrix.",
       "Pass `w_v_new` to the second run of the head.", "§15.8"),
    _d("predicate-ignores-row-sums", "you checked only that the entries are non-negative; attention "
       "weights also need every row to sum to one (within 1e-9).",
       "Add the row-sum test `np.abs(a.sum(axis=1) - 1) <= 1e-9`.", "§15.3"),
    _d("predicate-ignores-ndim", "you accepted an array that is not 2-D; attention weights are a matrix "
       "with one row per receiving position.",
       "Return False unless `a.ndim == 2`.", "§15.3"),
    _d("predicate-loose-tolerance", "you compared the row sums with `np.allclose`'s default tolerance "
       "(about 1e-5), far looser than the 1e-9 asked for.",
       "Pass the tolerance: `np.allclose(sums, 1, rtol=0, atol=1e-9)`.", "§15.6"),
    _d("full-shift-for-partial", "you added the whole shift to every output row although only some value "
       "rows moved; each receiving row moves by the shift times its weight on the moved rows.",
       "Sum each row's weights over the shifted rows only.", "§15.5"),
])


# ------------------------------------------------------------ the grammar of slips --------------
#
# The reference computation is cut into stages ("knobs"): project, compare, divisor, mask, shift,
# normalize, weights, mix and result for the head; a few more for the exercises. A slip replaces
# one stage by a way a student gets it wrong, and has one code. A misconception is a composition
# of at most two slips on different stages; its model is the reference pipeline with those
# stages replaced, run on the student's own inputs.


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


def _t(a):
    return np.swapaxes(a, -1, -2)


def _need(sizes: dict, name: str) -> int:
    if name not in sizes:
        raise Inapplicable(name)
    return sizes[name]


def _transpose_first(value):
    if isinstance(value, tuple):
        return (_transpose_first(value[0]),) + value[1:]
    if not isinstance(value, np.ndarray) or value.ndim < 2:
        raise Inapplicable("transpose")
    return _t(value)


def _dot_t_first(value):
    """`.T` on the first array: on a batch it reverses every axis, not only the last two."""
    if isinstance(value, tuple):
        return (_dot_t_first(value[0]),) + value[1:]
    if not isinstance(value, np.ndarray) or value.ndim < 3:
        raise Inapplicable("same as the swap of the last two axes")
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


def _example_weights():
    from .cases import example_arrays

    return example_arrays()["A"]


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
    # head_facts: each stage gives only the facts it gets wrong, so the reference gives none.
    "divisor_fact": lambda t, d_k, d_v: {},
    "score_fact": lambda t, d_k, d_v: {},
    "output_fact": lambda t, d_k, d_v: {},
    "axis_fact": lambda t, d_k, d_v: {},
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


def _eps(epsilon):
    return lambda s, shifted: np.exp(shifted) / (np.exp(shifted).sum(axis=-1, keepdims=True) + epsilon)


SLIPS: tuple[Slip, ...] = (
    # §15.1
    Slip("swapped-roles", "project", _roles()),
    Slip("no-projection", "project", (lambda x, w: (x, x, x),)),
    Slip("elementwise-product", "project", (lambda x, w: (x * w[0], x * w[1], x * w[2]),)),
    # §15.2. Each `.T` mistake twice: on a batch `.T` reverses all three axes.
    Slip("keys-not-transposed", "compare", (lambda q, k: k @ _t(q), lambda q, k: k @ q.T, lambda q, k: q @ k,
                                            lambda q, k: np.dot(q, k))),
    Slip("scores-prescaled", "compare", (lambda q, k: q @ _t(k) / np.sqrt(q.shape[-1]),)),
    Slip("elementwise-product", "compare", (lambda q, k: q * k,)),
    Slip("causal-mask", "mask", (_causal,)),
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
    Slip("softmax-epsilon", "normalize", tuple(_eps(10.0 ** -p) for p in range(4, 9))),
    Slip("one-hot-weights", "weights", (_one_hot,)),
    # §15.4
    Slip("wrong-mix-order", "mix", (lambda a, v, s: _t(a) @ v, lambda a, v, s: a.T @ v, lambda a, v, s: v @ a,
                                    lambda a, v, s: _t(v) @ a, lambda a, v, s: v.T @ a)),
    Slip("mixed-scores", "mix", (lambda a, v, s: s @ v,)),
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
    Slip("not-normalized", "uniform", (lambda k, v, softmax: (np.full(k.shape[0], 1.0 / k.shape[0]), v.sum(axis=0)),)),
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
    Slip("one-based-rows", "rows", (lambda rows: None if rows is None else [r - 1 for r in rows],)),
    Slip("full-shift-for-partial", "moved", (_full_shift,)),
    Slip("receivers-for-contributors", "moved", (_receivers, _receivers_weights)),
    # Exercise 5
    Slip("intervention-not-applied", "after", (lambda w_v, w_v_new: w_v,)),
    # Exercise 4: only the facts a slip gets wrong
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
    return r["mix"](a, v, s), a


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
    o1, a1 = _head(r, x, w_q, w_k, w_v)
    o2, a2 = _head(r, x, w_q, w_k, r["after"](w_v, w_v_new))
    return {"weights_before": a1, "weights_after": a2, "output_before": o1, "output_after": o2}


HEAD_KNOBS = ("compare", "divisor", "mask", "shift", "normalize", "weights", "mix")

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
    "value_intervention": (_intervention, ("project",) + HEAD_KNOBS + ("after",)),
}

Choice = tuple  # ((slip, variant index), ...): at most one per stage


def _model(fn: str, choice: Choice) -> Model:
    pipeline, knobs = PIPELINES[fn]
    recipe = dict(REFERENCE)
    for slip, index in choice:
        recipe[slip.knob] = slip.variants[index]
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
    return tuple((codes_of(choice), choice, _model(fn, choice)) for choice in choices)


MODELS: dict[str, tuple[tuple[tuple[str, ...], Model], ...]] = {
    fn: tuple((codes, model) for codes, _, model in models(fn, 1)) for fn in PIPELINES}
"""The single slips of each function, as (codes, model): what a composite step carries forward."""


@lru_cache(maxsize=None)
def through_reference(fn: str, replaced: str, model: Model) -> Model:
    """The reference's `fn` with its calls of `replaced` (direct or nested) going to `model`.

    This is what a composite step returns when it calls an earlier step's function, as the
    reference does, and that function holds a misconception: the earlier diagnosis carried forward.
    """
    if fn == replaced:
        return model
    from solutions import attention_head as reference

    namespace = dict(vars(reference))
    namespace[replaced] = model
    for name, value in vars(reference).items():
        if isinstance(value, FunctionType) and name != replaced:
            namespace[name] = FunctionType(value.__code__, namespace, name, value.__defaults__, value.__closure__)
    return namespace[fn]
