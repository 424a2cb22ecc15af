"""Misconceptions: what each diagnosis code means to a student, and the models that recognise them.

A model is a small function that computes what a submission with one particular misunderstanding
would return, from the same inputs the student got. When the student's output matches a model
(and not the reference), the step's feedback names that misunderstanding. Codes that need a probe
rather than a model (mutation, large scores, hard-coding, batches, precision) are decided in
`judge.py` from the pattern of results across cases.
"""
from __future__ import annotations

from dataclasses import dataclass
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
    """The section to reread."""


def _d(code, what, look, section):
    return code, Diagnosis(code, what, look, section)


CODES: dict[str, Diagnosis] = dict([
    _d("not-implemented", "this function still raises NotImplementedError, or is missing.",
       "Replace `raise NotImplementedError()` with your code, keeping the function's name and arguments.",
       "§15.4"),
    _d("wrong-shape", "the array you returned has the wrong shape.",
       "Check which axes each product keeps and which it sums over; the docstring gives every shape.",
       "§15.4"),
    _d("non-finite", "your result contains NaN or infinity although every input was finite.",
       "Look for a division by zero or an exponential of a large number.", "§15.3"),
    _d("hard-coded", "you are right on the chapter's example but wrong on other inputs.",
       "Compute from the arguments you are given; do not return the example's numbers or assume its shapes.",
       "§15.4"),
    _d("mutates-input", "your function changed an array it was given.",
       "Work on a copy (`np.array(v, dtype=float)`) or build new arrays instead of writing into the arguments.",
       "§15.6"),
    _d("low-precision", "your numbers have the right structure but float32-sized errors (about 1e-7).",
       "Keep everything in float64: avoid `astype(np.float32)` and rounding.", "§15.6"),
    _d("swapped-roles", "you projected with the wrong matrix: queries come from W_Q, keys from W_K, "
       "values from W_V, each its own product.",
       "Check which W each of q, k and v is multiplied by.", "§15.1"),
    _d("keys-not-transposed", "you compared without transposing the keys, or with the roles swapped: "
       "D = Q Kᵀ puts receiving queries on the rows and contributing keys on the columns.",
       "Use `q @ k.T` (or `np.swapaxes(k, -1, -2)` for a batch), not `q @ k` or `k @ q.T`.", "§15.2"),
    _d("no-scaling", "you did not divide the scores by √d_k.",
       "Divide every score by `np.sqrt(d_k)`.", "§15.3"),
    _d("scaled-by-d_k", "you divided by d_k itself; the divisor is its square root, √d_k.",
       "Use `np.sqrt(d_k)` as the divisor.", "§15.3"),
    _d("scaled-by-positions", "you divided by the number of positions T (or √T); the divisor counts the "
       "query/key coordinates, √d_k.",
       "Read d_k from the last axis of q (`q.shape[-1]`), not from the number of rows.", "§15.3"),
    _d("scaled-by-d_v", "you divided by √d_v, the value width; the divisor is √d_k, the query/key width.",
       "Read d_k from q or k (`q.shape[-1]`), not from v.", "§15.3"),
    _d("column-normalized", "you normalized the columns, over receivers; normalize each row, over the "
       "contributing keys, so every receiving position gets a unit-total mixture.",
       "Take the maximum and the sum along the last axis: `axis=-1, keepdims=True`.", "§15.3"),
    _d("whole-matrix-normalized", "you normalized over the whole matrix at once; each receiving row needs "
       "its own total.",
       "Sum along the last axis with `keepdims=True`, not over every element.", "§15.3"),
    _d("unstable-softmax", "your softmax overflows (NaN or infinity) when scores are in the thousands.",
       "Subtract each row's maximum before exponentiating; the weights do not change.", "§15.3"),
    _d("not-exponentiated", "you divided the scores by their row totals without exponentiating them.",
       "Apply `np.exp` to the (shifted) scores before normalizing.", "§15.3"),
    _d("mixed-scores", "you mixed the values with the scores instead of the softmax weights.",
       "Multiply the value rows by the normalized weights A, not by D or S.", "§15.4"),
    _d("wrong-mix-order", "you multiplied in the wrong order or with transposed weights: O = A V sums "
       "over contributing positions for each receiving row.",
       "Use `a @ v`: weights [T, T] on the left, values [T, d_v] on the right.", "§15.4"),
    _d("batch-axes-mixed", "your head mixes the examples of a batch, or breaks on a [B, T, d_in] input "
       "while working on one sequence; each example must be computed on its own.",
       "`.T` reverses every axis of a 3-D array: use `np.swapaxes(k, -1, -2)`, and `axis=-1` in the softmax.",
       "§15.4"),
    _d("zero-output", "a zero query still mixes the values: equal weights give their average, not zero.",
       "Compute the weights from the zero scores with the softmax, then mix the value rows.", "§15.8"),
    _d("accepts-column-stochastic", "you accepted a matrix whose columns sum to one but whose rows do not; "
       "attention weights need every row to sum to one.",
       "Sum along axis 1 (each receiving row), not axis 0.", "§15.3"),
    _d("full-shift-for-partial", "you added the whole shift to every output row although only some value "
       "rows moved; each receiving row moves by the shift times its weight on the moved rows.",
       "Sum each row's weights over the shifted rows only.", "§15.5"),
    _d("divisor-sqrt-positions", "you gave √T as the divisor; it is √d_k, the width of each dot product.",
       "The divisor depends on d_k only.", "§15.3"),
    _d("timeout", "this step ran past its time limit (the other steps were still graded).",
       "Look for a loop that never ends, or work that grows far faster than the input.", "§15.4"),
    _d("exit-called", "your code called exit(), sys.exit() or os._exit(), which ends the program.",
       "Remove the call; return a value instead.", "§15.4"),
    _d("crashed", "your code raised an exception, or its process died.",
       "Run the function on the chapter's example and read the error.", "§15.4"),
    _d("memory-limit", "your code tried to use more memory than the 2 GiB limit.",
       "Look for an array far larger than the inputs, such as an accidental outer product.", "§15.4"),
    _d("scaled-weights", "you scaled the weights after the softmax instead of the scores before it, so the "
       "rows no longer sum to one.",
       "Divide the scores by √d_k first, then apply the softmax.", "§15.3"),
    _d("output-divided-by-d_v", "you divided the output by the value width; the only denominator is each "
       "row's softmax total.",
       "Return `a @ v` as it is.", "§15.4"),
    _d("scores-prescaled", "your `scores` already divides by √d_k; D is the plain dot products, and "
       "scaling is the next step's job.",
       "Return `q @ k.T` without the division.", "§15.2"),
    _d("not-normalized", "you exponentiated the scores but did not divide by each row's total.",
       "Divide each row of exponentials by its own sum.", "§15.3"),
    _d("column-max-subtracted", "you subtracted each column's maximum; the shift must be one number per "
       "receiving row (its own maximum), or the weights change.",
       "Use `s.max(axis=-1, keepdims=True)`.", "§15.3"),
    _d("predicate-exact-equality", "you compared row sums with == 1; floating-point sums need a tolerance "
       "(1e-9 here).",
       "Use `abs(row_sum - 1) <= 1e-9` or `np.isclose(..., atol=1e-9, rtol=0)`.", "§15.3"),
    _d("predicate-ignores-negatives", "you accepted a matrix with a negative entry; weights are non-negative.",
       "Check `np.all(a >= 0)` as well as the row sums.", "§15.3"),
    _d("scaled-by-d_in", "you divided by √d_in, the input width; the divisor is √d_k, the width of the "
       "queries and keys.",
       "Read d_k from q (`q.shape[-1]`), not from x.", "§15.3"),
    _d("output-shape-d_k", "you gave the output the query/key width; each output row is a mixture of value "
       "rows, so its width is d_v.",
       "The output is [T, d_v].", "§15.4"),
])


# --------------------------------------------------------------------- models --------------------

Model = Callable[[tuple], object]


def _softmax(s, axis=-1):
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _t(a):
    return np.swapaxes(a, -1, -2)


def _attention_with(weights: Callable, scores: Callable = lambda q, k: q @ _t(k),
                    divisor: Callable = lambda q, k, v: np.sqrt(q.shape[-1]),
                    mix: Callable = lambda a, v: a @ v, mixed_scores: bool = False):
    def model(q, k, v):
        d = scores(q, k)
        s = d / divisor(q, k, v)
        a = weights(s)
        o = mix(s if mixed_scores else a, v)
        return o, a
    return model


def _exp_only(s):
    return np.exp(s)


def _plain_ratio(s):
    return s / s.sum(axis=-1, keepdims=True)


def _whole(s):
    e = np.exp(s - s.max())
    return e / e.sum()


def _column_max(s):
    e = np.exp(s - s.max(axis=0, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# Each attention-shaped misconception, as (code, model of attention(q, k, v)).
ATTENTION_MODELS: tuple[tuple[str, Callable], ...] = (
    ("keys-not-transposed", _attention_with(_softmax, scores=lambda q, k: k @ _t(q))),
    ("keys-not-transposed", _attention_with(_softmax, scores=lambda q, k: q @ k)),
    ("no-scaling", _attention_with(_softmax, divisor=lambda q, k, v: 1.0)),
    ("scaled-by-d_k", _attention_with(_softmax, divisor=lambda q, k, v: q.shape[-1])),
    ("scaled-by-positions", _attention_with(_softmax, divisor=lambda q, k, v: q.shape[-2])),
    ("scaled-by-positions", _attention_with(_softmax, divisor=lambda q, k, v: np.sqrt(q.shape[-2]))),
    ("scaled-by-d_v", _attention_with(_softmax, divisor=lambda q, k, v: np.sqrt(v.shape[-1]))),
    ("column-normalized", _attention_with(lambda s: _softmax(s, axis=-2))),
    ("whole-matrix-normalized", _attention_with(_whole)),
    ("not-exponentiated", _attention_with(_plain_ratio)),
    ("not-normalized", _attention_with(_exp_only)),
    ("column-max-subtracted", _attention_with(_column_max)),
    ("mixed-scores", _attention_with(_softmax, mixed_scores=True)),
    ("wrong-mix-order", _attention_with(_softmax, mix=lambda a, v: _t(a) @ v)),
    ("wrong-mix-order", _attention_with(_softmax, mix=lambda a, v: v @ a)),
    ("scaled-weights", lambda q, k, v: (lambda a: (a @ v, a))(_softmax(q @ _t(k)) / np.sqrt(q.shape[-1]))),
    ("output-divided-by-d_v", lambda q, k, v: (lambda a: (a @ v / v.shape[-1], a))(
        _softmax(q @ _t(k) / np.sqrt(q.shape[-1])))),
)


def _head_models():
    """The attention models behind a correct projection, plus the projection's own mistakes."""
    models = [(code, (lambda model: lambda x, w_q, w_k, w_v: model(x @ w_q, x @ w_k, x @ w_v))(model))
              for code, model in ATTENTION_MODELS]
    models.append(("scaled-by-d_in", lambda x, w_q, w_k, w_v: _attention_with(
        _softmax, divisor=lambda q, k, v: np.sqrt(x.shape[-1]))(x @ w_q, x @ w_k, x @ w_v)))
    for roles in _role_swaps():
        models.append(("swapped-roles", (lambda roles: lambda x, *w: _attention_with(_softmax)(
            *(x @ w[i] for i in roles)))(roles)))
    return tuple(models)


def _role_swaps():
    return [(a, b, c) for a in range(3) for b in range(3) for c in range(3) if (a, b, c) != (0, 1, 2)]


def _batch_models():
    """Batched heads that treat the batch axis as if it were a position or coordinate axis."""
    def flat(x, w_q, w_k, w_v):
        b, t, _ = x.shape
        o, a = _attention_with(_softmax)(*(x.reshape(b * t, -1) @ w for w in (w_q, w_k, w_v)))
        return o.reshape(b, t, -1), a
    return (
        ("batch-axes-mixed", flat),
        ("batch-axes-mixed", lambda x, w_q, w_k, w_v: _attention_with(lambda s: _softmax(s, axis=1))(
            x @ w_q, x @ w_k, x @ w_v)),
    )


MODELS: dict[str, tuple[tuple[str, Callable], ...]] = {
    "project_qkv": tuple(("swapped-roles", (lambda roles: lambda x, *w: tuple(x @ w[i] for i in roles))(roles))
                         for roles in _role_swaps()),
    "scores": (
        ("keys-not-transposed", lambda q, k: k @ _t(q)),
        ("keys-not-transposed", lambda q, k: q @ k),
        ("scores-prescaled", lambda q, k: q @ _t(k) / np.sqrt(q.shape[-1])),
    ),
    "scale": (
        ("no-scaling", lambda d, d_k: d),
        ("scaled-by-d_k", lambda d, d_k: d / d_k),
        ("scaled-by-positions", lambda d, d_k: d / d.shape[-1]),
        ("scaled-by-positions", lambda d, d_k: d / np.sqrt(d.shape[-1])),
    ),
    "softmax_rows": (
        ("column-normalized", lambda s: _softmax(s, axis=-2)),
        ("whole-matrix-normalized", _whole),
        ("not-exponentiated", _plain_ratio),
        ("not-normalized", _exp_only),
        ("column-max-subtracted", _column_max),
    ),
    "mix": (
        ("wrong-mix-order", lambda a, v: _t(a) @ v),
        ("wrong-mix-order", lambda a, v: v @ a),
        ("output-divided-by-d_v", lambda a, v: a @ v / v.shape[-1]),
    ),
    "attention": ATTENTION_MODELS,
    "self_attention_head": _head_models() + _batch_models(),
    "zero_query_mixture": (
        ("zero-output", lambda k, v: (np.full(k.shape[0], 1.0 / k.shape[0]), np.zeros(v.shape[-1]))),
        ("zero-output", lambda k, v: (np.zeros(k.shape[0]), np.zeros(v.shape[-1]))),
    ),
    "shifted_output": (
        ("full-shift-for-partial", lambda a, v, shift, rows: a @ v + shift),
    ),
    "output_change": (
        ("full-shift-for-partial", lambda a, shift, rows: np.outer(np.ones(a.shape[0]), shift)),
    ),
    "head_facts": (
        ("divisor-sqrt-positions", lambda t, d_k, d_v: {"divisor": float(np.sqrt(t))}),
        ("scaled-by-positions", lambda t, d_k, d_v: {"divisor": float(t)}),
        ("scaled-by-d_k", lambda t, d_k, d_v: {"divisor": float(d_k)}),
        ("scaled-by-d_v", lambda t, d_k, d_v: {"divisor": float(np.sqrt(d_v))}),
        ("output-shape-d_k", lambda t, d_k, d_v: {"output_shape": (t, d_k)}),
        ("column-normalized", lambda t, d_k, d_v: {"softmax_axis": 0}),
    ),
}


def _value_intervention_models():
    models = []
    for code, head in _head_models():
        def model(x, w_q, w_k, w_v, w_v_new, head=head):
            o1, a1 = head(x, w_q, w_k, w_v)
            o2, a2 = head(x, w_q, w_k, w_v_new)
            return {"weights_before": a1, "weights_after": a2, "output_before": o1, "output_after": o2}
        models.append((code, model))
    return tuple(models)


MODELS["value_intervention"] = _value_intervention_models()
