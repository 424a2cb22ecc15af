"""Misconceptions: what each diagnosis code means to a student, and the models the judge tries.

Every mistake is a composition of at most two elementary slips from the grammar in `slips.py`;
each slip's code is explained here, once, in the chapter's words (`CODES`), and a composition's
message is built from its slips' explanations. `MODELS` are the single slips of each contract
function. A composite step also tries the earlier steps' diagnosed models, called the way the
reference calls them (`through_reference`), so one mistake in `softmax_rows` is named once, the
same way, everywhere it shows. Codes that need a probe rather than a model (faults, mutation,
hard-coding, batches, float32 arithmetic inside a computation) are decided in `judge.py` from the
pattern of results.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import FunctionType

from . import slips
from .cases import example_arrays
from .slips import (DROPPED_BY, PIPELINES, SLIPS, Inapplicable, Model, codes_of,  # noqa: F401 (the judge's API)
                    models)


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
       "Look for a division by zero (a total of zero, such as a sum of all-zero scores), an exponential "
       "of a large number, or a log or square root of a negative number.", "§15.3"),
    _d("hard-coded", "you are right on the chapter's example but wrong on other inputs.",
       "Look for what holds only for the example in your code (a number or a size taken from it, an array "
       "built in the shape of another whose width equals it only there, or a case written for its shapes), "
       "and for anything kept from one call to the next (a global, a cache, a default argument that is a "
       "list or an array): the example is called first; the call shown above gives the shapes it failed on."),
    _d("mutates-input", "your function changed an array it was given.",
       "Work on a copy of the argument (`np.array(arg, dtype=float)`) or build new arrays; no `-=`, `+=` or "
       "slice assignment on an argument."),
    _d("low-precision", "your numbers have the right structure but float32-sized errors (about 1e-7).",
       "Keep every array in float64: no `astype(np.float32)` or `dtype=np.float32` anywhere on the way.", "§15.6"),
    _d("half-precision", "your numbers have the right structure but float16-sized errors (about 1e-3): "
       "somewhere on the way an array was held in half precision, whose numbers carry about three digits.",
       "Keep every array in float64: no `astype(np.float16)`, `dtype=np.float16` or `np.half` anywhere on the way.",
       "§15.6"),
    _d("slightly-off", "your numbers are near the expected ones (within about one part in 10 000) but not "
       "equal to them: something on the way moves them a little, such as a small constant (an epsilon) added "
       "to a divisor, a total or every term (each exponential, say), a constant typed in rounded (1.414 for √2), a value rounded part-way, or an "
       "approximation.",
       "Compute each quantity as the chapter writes it, with no epsilon, rounded constant, rounding or "
       "approximation on the way; the differences shown above say how far off the numbers are."),
    _d("timeout", "this step ran past its time limit (the other steps were still graded).",
       "Look for a loop that never ends, or work that grows far faster than the input."),
    _d("time-budget", "your calls, one after another, took so long that the submission's time budget ran out "
       "(the import's limit and twenty calls' limits in all), and this step's calls were not run.",
       "Look for what makes every call slow (a sleep, a loop that waits, work that grows with the input): "
       "each call of the chapter's computation takes well under a millisecond."),
    _d("exit-called", "your code called exit(), sys.exit() or os._exit(), which ends the program.",
       "Remove the call; return a value instead."),
    _d("crashed", "your code raised an exception, or its process died.",
       "Call the function with arguments like those shown above (the same shapes and sizes) and read the error."),
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
    _d("swapped-roles", "a role got the wrong projection (a W swapped for another, or the three results "
       "taken in another order): queries come from W_Q, keys from W_K and values from W_V, three separate "
       "products of the same input.",
       "Check which W each of q, k and v is multiplied by, that each is an array of its own (products "
       "written into one buffer with `out=`, or one list filled again, all hold the last one written), and "
       "the order in which they are returned and unpacked (q, k, v).", "§15.1"),
    # §15.2: compare every receiving row with every contributing key.
    _d("keys-not-transposed", "you compared without transposing the keys, or with queries and keys swapped: "
       "D = Q Kᵀ puts the receiving queries on the rows and the contributing keys on the columns.",
       "Use `q @ k.T` (or `np.swapaxes(k, -1, -2)`, which also works for a batch), not `q @ k` or `k @ q.T`.",
       "§15.2"),
    _d("scores-prescaled", "your scores came out already divided by √d_k, before the scaling step; D is the "
       "plain dot products, and the division by √d_k belongs to the scaling step alone.",
       "Divide by √d_k once: `scores` returns `q @ k.T` itself, and `scale` divides it.", "§15.2"),
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
    _d("unstable-softmax", "your softmax breaks down when the scores are in the thousands: unless what is "
       "subtracted before `np.exp` is each row's own maximum (nothing, or another shift, such as the row's "
       "mean or sum), some exponents are far above or below 0, and `np.exp` gives infinity or 0 there, which "
       "leaves NaN, infinity or zero weights (and Python's `math.exp` raises OverflowError).",
       "Subtract each row's maximum before `np.exp` (in a log-sum-exp too): the weights stay the same and no "
       "exponent is above 0.",
       "§15.3"),
    _d("not-exponentiated", "you divided the scores by their row totals without exponentiating them, so "
       "negative scores give negative weights and a zero total divides by zero.",
       "Apply `np.exp` to the (shifted) scores before normalizing.", "§15.3"),
    _d("not-normalized", "you exponentiated the scores but did not divide by each row's total, so the rows "
       "do not sum to one (a total taken over an axis of length one, as along the wrong axis of a "
       "[1, T] row, is each exponential itself, and dividing by it makes every weight 1; dividing by the "
       "row's largest exponential, which is 1 after the shift, changes nothing).",
       "Divide each row of exponentials by its own sum, taken along the row's own axis (`axis=-1`).", "§15.3"),
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
    _d("batch-axes-mixed", "your code runs on one sequence but goes wrong on a batch, whose leading axis B "
       "comes before the sequence's own axes: something in it does not carry the batch axis through. It may "
       "be an axis found by counting from the front (`.T`, `shape[1]`, `axis=1`, an axis put back with "
       "`[:, None]`, a stack or reshape along one), which a leading batch axis moves; `np.dot`, `np.inner` or "
       "`np.tensordot`, which on a batch pair every example with every other; or the examples treated as one, or "
       "one example's result kept for the whole batch (each example must be computed, and returned, on its own, "
       "as if it were alone).",
       "Count axes from the end, so the batch axis never moves them: `np.swapaxes(k, -1, -2)` rather than "
       "`.T` (which reverses all three axes), `shape[-1]`, `axis=-1` in the softmax (with `keepdims=True`, or "
       "`[..., None]` to put the axis back), `@` rather than `np.dot`, `np.inner` or `np.tensordot`, and no "
       "reshape or stack that merges the batch into the positions. If you loop over the examples, keep every "
       "example's output and weights.", "§15.4"),
    # The exercises.
    _d("zero-output", "a zero query still mixes the values: every score is 0, so the weights are equal and "
       "the output is the mean of the value rows, not zero.",
       "Compute the weights from the zero scores with the softmax, then mix the value rows, into an array of "
       "floats: one made with `dtype=int` cuts each share of the mixture to a whole number, 0 here.", "§15.8"),
    _d("summed-values", "your output is the sum of the value rows, not their mean: a zero query gives every "
       "position the same score, so each of the T weights is 1/T and the output averages the value rows (as "
       "if the values were mixed with weights of 1, exp(0), never divided by their total).",
       "Mix the value rows with the weights you return, `weights @ v`.", "§15.8"),
    _d("accepts-column-stochastic", "you accepted a matrix whose columns sum to one but whose rows do not; "
       "attention weights need every receiving row to sum to one.",
       "Sum along axis 1 (each receiving row), not axis 0.", "§15.3"),
    _d("predicate-exact-equality", "you compared row sums with == 1, or within a tolerance as tight as "
       "rounding error; floating-point sums need a tolerance (1e-9 here).",
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
    _d("causal-mask-diagonal", "you masked each position's own key as well as the later ones (the diagonal "
       "too): a causal mask, which this head does not ask for, and one that leaves the first position no key "
       "to attend to.",
       "Remove the mask (`np.tril`, `np.triu`, `-np.inf` or `-1e9` entries) before the softmax: every receiving "
       "position attends to every key, its own included.", "§15.2"),
    _d("reversed-mask", "you masked the earlier positions (the lower triangle kept out), a mask this head does "
       "not ask for: every receiving position attends to every key.",
       "Remove the mask (`np.tril`, `np.triu`, `-np.inf` or `-1e9` entries) before the softmax.", "§15.2"),
    _d("scores-as-weights", "you returned the scores as the weights; the weights are the softmax of the "
       "scaled scores, the same matrix your output is mixed with.",
       "Return `a = softmax_rows(s)` beside the output, not `s` or `d`.", "§15.4"),
    _d("one-hot-weights", "your weights put everything on the best key of each row (an argmax); the "
       "softmax gives every key a share in proportion to exp(score).",
       "Return the normalized exponentials themselves, not an indicator of the maximum.", "§15.3"),
    _d("elementwise-product", "you multiplied elementwise (`*`) where the step needs a matrix product "
       "(`@`), which sums over the shared axis.",
       "Use `@` (or `np.matmul`) for the product.", "§15.1"),
    _d("fused-split-wrongly", "you projected with the three matrices joined side by side and split the result "
       "in the wrong places (in three equal parts, or at d_v where d_k belongs): that gives q, k and v only where "
       "d_k = d_v, as in the chapter's example; elsewhere the parts have the wrong widths, or the split raises.",
       "Split at the widths themselves (`np.split(qkv, [d_k, 2 * d_k], axis=-1)`), or compute `x @ w_q`, "
       "`x @ w_k` and `x @ w_v` one by one.", "§15.1"),
    _d("no-projection", "you attended over the input itself: queries, keys and values are three "
       "projections of x, by W_Q, W_K and W_V.",
       "Compute q, k and v from x with the three matrices before attending.", "§15.1"),
    _d("transposed-result", "your result comes out transposed at the end: each receiving position must be a "
       "row of it.",
       "Drop the final `.T` (or transpose); the docstring gives the shape.", "§15.4"),
    _d("swapped-outputs", "the output and the weights changed places: a pair was returned, or unpacked, in "
       "the wrong order.",
       "Keep the docstring's order, the output first and then the weights (`o, a`), where you return the pair "
       "and where you unpack one.", "§15.4"),
    _d("rounded-result", "you rounded the result; the grader compares to about 1e-9.",
       "Return the values unrounded: no `np.round` or `round` on the result.", "§15.6"),
    _d("integer-division", "your numbers are a division's with the fractional part dropped (1 // T is 0 "
       "for every T above 1, and 2.7 // 1.4 is 1.0): floor division `//`, or a quotient that is not negative "
       "kept in an array of integers (`dtype=int`, or `np.zeros_like` of an array of integers).",
       "Use true division `/`, and keep its result in an array of floats.", "§15.3"),
    _d("one-based-rows", "you shifted the row indices by one, as if they counted from 1; Python counts "
       "rows from 0, so row 0 is the first value row.",
       "Use the indices in `rows` as they are, without adding or subtracting 1.", "§15.5"),
    _d("receivers-for-contributors", "you moved the receiving rows (rows of the output, or rows of the "
       "weights) instead of the contributing value rows: a shifted value row reaches every receiver in "
       "proportion to its weight on that row.",
       "Shift the value rows `v[rows]`, and sum each receiver's weights over the columns `a[:, rows]`.",
       "§15.5"),
    _d("counterexample-row-normalized", "your counterexample is normalized over its rows, like Table 15.1; "
       "the exercise asks for columns that sum to one and a first row that does not.",
       "Make every column sum to one and the first row sum to something else: for instance, let one receiver "
       "take everything (a first row of ones).",
       "§15.8"),
    _d("counterexample-not-3x3", "your counterexample is not a [3, 3] matrix; the exercise asks for three "
       "receivers and three contributors.",
       "Return a 3 × 3 array: three rows of three numbers.", "§15.8"),
    _d("counterexample-negative-entries", "your counterexample has a negative (or non-finite) entry; the "
       "exercise asks for non-negative entries, as attention weights have.",
       "Reach column sums of one with non-negative entries only, for instance a first row of ones.", "§15.8"),
    _d("counterexample-columns-not-normalized", "the columns of your counterexample do not all sum to one, the "
       "condition the exercise asks it to meet.",
       "Sum each column (`m.sum(axis=0)`): every one must be 1.", "§15.8"),
    _d("counterexample-first-row-sums-to-one", "the first row of your counterexample sums to one, so receiver 1 "
       "still gets a valid mixture; the exercise asks for a first row that does not.",
       "Move weight into or out of the first row while every column keeps a sum of one.", "§15.8"),
    _d("score-shape-d_k", "you gave the score matrix the query/key width; it compares every receiving "
       "query with every contributing key, so it is [T, T].",
       "The score shape is (t, t).", "§15.2"),
    _d("intervention-not-applied", "your 'after' output is the 'before' one: either the second run still "
       "used the old W_V, or its output is not what you returned as output_after. The comparison needs the "
       "same head run once with W_V and once with the new matrix.",
       "Pass `w_v_new` to the second run of the head, and return that run's output as output_after.", "§15.8"),
    _d("predicate-ignores-row-sums", "you checked only that the entries are non-negative; attention "
       "weights also need every row to sum to one (within 1e-9).",
       "Add the row-sum test `np.abs(a.sum(axis=1) - 1) <= 1e-9`.", "§15.3"),
    _d("predicate-ignores-ndim", "you accepted an array that is not 2-D; attention weights are a matrix "
       "with one row per receiving position.",
       "Return False unless `a.ndim == 2`.", "§15.3"),
    _d("predicate-loose-tolerance", "your check lets through row sums further from one than the 1e-9 asked "
       "for: its tolerance is looser (`np.allclose`'s default, about 1e-5, is one such).",
       "Pass the tolerance: `np.allclose(sums, 1, rtol=0, atol=1e-9)`.", "§15.6"),
    _d("full-shift-for-partial", "you added the whole shift to every output row although only some value "
       "rows moved; each receiving row moves by the shift times its weight on the moved rows.",
       "Sum each row's weights over the shifted rows only.", "§15.5"),
])


# Where a step shows a code in its own way, what is said there instead: exercise 4 states the
# softmax's axis rather than normalizing anything.
BY_STEP: dict[tuple[str, str], Diagnosis] = {
    ("column-normalized", "ex4_shapes"): Diagnosis(
        "column-normalized", "you gave the softmax's axis as the columns' (axis 0, over receivers); each "
        "receiving row is normalized over the contributing keys, along the last axis.",
        "The softmax of a [T, T] score matrix runs along axis -1 (1 names the same axis).", "§15.3"),
    # Exercise 1 returns its pair the other way round from the head's: the weights first.
    ("swapped-outputs", "ex1_zero_query"): Diagnosis(
        "swapped-outputs", "the weights and the output changed places: a pair was returned, or unpacked, in "
        "the wrong order.",
        "Keep the docstring's order, the weights first and then the output (`weights, output`), where you "
        "return the pair and where you unpack one.", "§15.8"),
}


def describe(code: str, step_id: str | None = None) -> Diagnosis:
    """A code's explanation: a named misconception's (as the step `step_id` shows it, where it
    shows it in its own way), or one written from a derived edit."""
    if (code, step_id) in BY_STEP:
        return BY_STEP[(code, step_id)]
    if code in CODES:
        return CODES[code]
    from . import derived

    return derived.describe(code)


# The grammar itself lives in slips.py; its chapter data is loaded here, where the data is.
slips.EXAMPLE_WEIGHTS[:] = example_arrays()["A"].tolist()

MODELS: dict[str, tuple[tuple[tuple[str, ...], Model], ...]] = {
    fn: tuple((codes, model) for codes, _, model in models(fn, 1)) for fn in PIPELINES}
"""The single slips of each function, as (codes, model): what a composite step carries forward."""


@lru_cache(maxsize=1024)  # one per earlier mistake met and function it reaches: bounded, as their number is not
def through_reference(fn: str, replaced: str, model: Model) -> Model:
    """The reference's `fn` with its calls of `replaced` (direct or nested) going to `model`.

    This is what a composite step returns when it calls an earlier step's function, as the
    reference does, and that function holds a misconception: the earlier diagnosis carried forward.
    """
    return through_references(fn, ((replaced, model),))


def through_references(fn: str, replacements: tuple[tuple[str, Model], ...]) -> Model:
    """The reference's `fn` with each (name, model) in `replacements` standing in for that function.

    The reference pipeline with only the earlier steps' mistakes: what a later step whose own work
    is right returns on top of them (the judge carries credit forward only where it does).
    """
    by_name = dict(replacements)
    return by_name[fn] if fn in by_name else _pipeline(replacements)[fn]


@lru_cache(maxsize=512)  # one per combination of earlier mistakes met: bounded, as their number is not
def _pipeline(replacements: tuple[tuple[str, Model], ...]) -> dict:
    """The reference module's names, its functions calling each other and the `replacements`: one
    such pipeline serves every later function built on the same mistakes."""
    from solutions import attention_head as reference

    by_name = dict(replacements)
    namespace = dict(vars(reference))
    namespace.update(by_name)
    for name, value in vars(reference).items():
        if isinstance(value, FunctionType) and name not in by_name:
            namespace[name] = FunctionType(value.__code__, namespace, name, value.__defaults__, value.__closure__)
    return namespace
