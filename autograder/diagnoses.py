"""Misconceptions: what each diagnosis code means to a student, and the models that recognise them.

A model is a small function that computes what a submission with one particular misunderstanding
would return, from the same inputs the student got. When the student's output matches a model
(and not the reference), the step's feedback names that misunderstanding. A composite step also
tries the earlier steps' diagnosed models, called the way the reference calls them
(`through_reference`), so one mistake in `softmax_rows` is named once, the same way, everywhere
it shows. Codes that need a probe rather than a model (faults, mutation, large scores,
hard-coding, batches, precision) are decided in `judge.py` from the pattern of results.
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
    _d("full-shift-for-partial", "you added the whole shift to every output row although only some value "
       "rows moved; each receiving row moves by the shift times its weight on the moved rows.",
       "Sum each row's weights over the shifted rows only.", "§15.5"),
])


# --------------------------------------------------------------------- models --------------------

Model = Callable[..., object]


def _softmax(s, axis=-1):
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _t(a):
    return np.swapaxes(a, -1, -2)


def _attention_with(weights: Callable = _softmax, scores: Callable = lambda q, k: q @ _t(k),
                    divisor: Callable = lambda q, k, v: np.sqrt(q.shape[-1]),
                    mix: Callable = lambda a, v: a @ v, mixed_scores: bool = False):
    def model(q, k, v):
        d = scores(q, k)
        s = d / divisor(q, k, v)
        a = weights(s)
        o = mix(s if mixed_scores else a, v)
        return o, a
    return model


def _whole(s):
    e = np.exp(s - s.max())
    return e / e.sum()


def _column_sums(s, axis):
    """Each row shifted by its own maximum, as it should be, but divided by column totals."""
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _column_max(s):
    e = np.exp(s - s.max(axis=0, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# Softmax misconceptions, each as a model of softmax_rows(s). Axis 0 and axis -2 are the same
# mistake on one matrix; on a batch, axis 0 also runs across the examples, as the student's would.
SOFTMAX_MODELS: tuple[tuple[str, Model], ...] = (
    ("column-normalized", lambda s: _softmax(s, axis=-2)),
    ("column-normalized", lambda s: _softmax(s, axis=0)),
    ("column-normalized", lambda s: _column_sums(s, axis=-2)),
    ("column-normalized", lambda s: _column_sums(s, axis=0)),
    ("whole-matrix-normalized", _whole),
    ("not-exponentiated", lambda s: s / s.sum(axis=-1, keepdims=True)),
    ("not-normalized", np.exp),
    ("not-normalized", lambda s: np.exp(s - s.max(axis=-1, keepdims=True))),
    ("column-max-subtracted", _column_max),
)

# Each attention-shaped misconception, as (code, model of attention(q, k, v)).
ATTENTION_MODELS: tuple[tuple[str, Model], ...] = (
    ("keys-not-transposed", _attention_with(scores=lambda q, k: k @ _t(q))),
    ("keys-not-transposed", _attention_with(scores=lambda q, k: q @ k)),
    ("no-scaling", _attention_with(divisor=lambda q, k, v: 1.0)),
    ("scaled-by-d_k", _attention_with(divisor=lambda q, k, v: q.shape[-1])),
    ("scaled-by-positions", _attention_with(divisor=lambda q, k, v: q.shape[-2])),
    ("scaled-by-positions", _attention_with(divisor=lambda q, k, v: np.sqrt(q.shape[-2]))),
    ("scaled-by-d_v", _attention_with(divisor=lambda q, k, v: np.sqrt(v.shape[-1]))),
    *((code, _attention_with(weights)) for code, weights in SOFTMAX_MODELS),
    ("mixed-scores", _attention_with(mixed_scores=True)),
    ("wrong-mix-order", _attention_with(mix=lambda a, v: _t(a) @ v)),
    ("wrong-mix-order", _attention_with(mix=lambda a, v: v @ a)),
    ("scaled-weights", lambda q, k, v: (lambda a: (a @ v, a))(_softmax(q @ _t(k)) / np.sqrt(q.shape[-1]))),
    ("output-divided-by-d_v", lambda q, k, v: (lambda a: (a @ v / v.shape[-1], a))(
        _softmax(q @ _t(k) / np.sqrt(q.shape[-1])))),
)


def _role_swaps():
    return [(a, b, c) for a in range(3) for b in range(3) for c in range(3) if (a, b, c) != (0, 1, 2)]


def _head_models():
    """The attention models behind a correct projection, plus the projection's own mistakes."""
    models = [(code, (lambda model: lambda x, w_q, w_k, w_v: model(x @ w_q, x @ w_k, x @ w_v))(model))
              for code, model in ATTENTION_MODELS]
    models.append(("scaled-by-d_in", lambda x, w_q, w_k, w_v: _attention_with(
        divisor=lambda q, k, v: np.sqrt(x.shape[-1]))(x @ w_q, x @ w_k, x @ w_v)))
    for roles in _role_swaps():
        models.append(("swapped-roles", (lambda roles: lambda x, *w: _attention_with()(
            *(x @ w[i] for i in roles)))(roles)))
    return tuple(models)


def _weights_check(a, axis=1, exact=False, negatives=False) -> bool:
    """is_attention_weights as a student might write it: over `axis`, with == 1, or without the sign test."""
    a = np.asarray(a, dtype=float)
    if a.ndim != 2:
        return False
    totals = a.sum(axis=axis)
    sums_ok = np.all(totals == 1.0) if exact else np.all(np.abs(totals - 1.0) <= 1e-9)
    return bool(sums_ok and (negatives or np.all(a >= 0)))


MODELS: dict[str, tuple[tuple[str, Model], ...]] = {
    "project_qkv": tuple(("swapped-roles", (lambda roles: lambda x, *w: tuple(x @ w[i] for i in roles))(roles))
                         for roles in _role_swaps()),
    # Each `.T` mistake twice: on one matrix `.T` is the swap of the last two axes, but on a batch
    # it reverses all three, and a composite step given a batch shows which one was written.
    "scores": (
        ("keys-not-transposed", lambda q, k: k @ _t(q)),
        ("keys-not-transposed", lambda q, k: k @ q.T),
        ("keys-not-transposed", lambda q, k: q @ k),
        ("scores-prescaled", lambda q, k: q @ _t(k) / np.sqrt(q.shape[-1])),
    ),
    "scale": (
        ("no-scaling", lambda d, d_k: d),
        ("scaled-by-d_k", lambda d, d_k: d / d_k),
        ("scaled-by-positions", lambda d, d_k: d / d.shape[-1]),
        ("scaled-by-positions", lambda d, d_k: d / np.sqrt(d.shape[-1])),
    ),
    "softmax_rows": SOFTMAX_MODELS,
    "mix": (
        ("wrong-mix-order", lambda a, v: _t(a) @ v),
        ("wrong-mix-order", lambda a, v: a.T @ v),
        ("wrong-mix-order", lambda a, v: v @ a),
        ("output-divided-by-d_v", lambda a, v: a @ v / v.shape[-1]),
    ),
    "attention": ATTENTION_MODELS,
    "self_attention_head": _head_models(),
    "zero_query_mixture": (
        ("zero-output", lambda k, v: (np.full(k.shape[0], 1.0 / k.shape[0]), np.zeros(v.shape[-1]))),
        ("zero-output", lambda k, v: (np.zeros(k.shape[0]), np.zeros(v.shape[-1]))),
    ),
    "is_attention_weights": (
        ("accepts-column-stochastic", lambda a: _weights_check(a, axis=0)),
        ("predicate-exact-equality", lambda a: _weights_check(a, exact=True)),
        ("predicate-ignores-negatives", lambda a: _weights_check(a, negatives=True)),
    ),
    "shifted_output": (
        ("full-shift-for-partial", lambda a, v, shift, rows: a @ v + shift),
    ),
    "output_change": (
        ("full-shift-for-partial", lambda a, shift, rows: np.outer(np.ones(a.shape[0]), shift)),
    ),
    # head_facts models give only the part they get wrong; the other parts are not compared.
    "head_facts": (
        ("divisor-sqrt-positions", lambda t, d_k, d_v: {"divisor": float(np.sqrt(t))}),
        ("scaled-by-positions", lambda t, d_k, d_v: {"divisor": float(t)}),
        ("scaled-by-d_k", lambda t, d_k, d_v: {"divisor": float(d_k)}),
        ("scaled-by-d_v", lambda t, d_k, d_v: {"divisor": float(np.sqrt(d_v))}),
        ("output-shape-d_k", lambda t, d_k, d_v: {"output_shape": (t, d_k)}),
        ("column-normalized", lambda t, d_k, d_v: {"softmax_axis": 0}),
        ("column-normalized", lambda t, d_k, d_v: {"softmax_axis": -2}),
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
