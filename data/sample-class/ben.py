"""Ben's submission: normalizes the softmax over columns instead of rows (column-normalized)."""
import numpy as np

# Each key is a column of the score matrix, and I read the chapter as "each key hands out a
# total weight of one", so my softmax works down the columns: axis 0.
KEY_AXIS = 0


# ---- little helpers -------------------------------------------------------------------------

def _apply(m, w):
    """Multiply the rows of m by the matrix w."""
    return m @ w


def _as_columns(k):
    """Turn the rows of k into columns (only the last two axes)."""
    return np.swapaxes(k, -1, -2)


def _stable_exp(s, axis):
    """exp of s after taking off the maximum along axis, so nothing overflows."""
    return np.exp(s - s.max(axis=axis, keepdims=True))


def _to_unit_total(e, axis):
    """Divide e by its totals along axis."""
    return e / e.sum(axis=axis, keepdims=True)


def _sums_to_one(totals):
    return bool(np.all(np.abs(totals - 1) <= 1e-9))


def _with_shift(m, shift, rows):
    """A copy of m with shift added to the given rows (all of them when rows is None)."""
    out = np.array(m, dtype=float)
    picked = slice(None) if rows is None else list(rows)
    out[picked] = out[picked] + shift
    return out


# ---- the head -------------------------------------------------------------------------------

def project_qkv(x, w_q, w_k, w_v):
    return tuple(_apply(x, w) for w in (w_q, w_k, w_v))


def scores(q, k):
    return _apply(q, _as_columns(k))


def scale(d, d_k):
    return d / np.sqrt(d_k)


def softmax_rows(s):
    return _to_unit_total(_stable_exp(s, KEY_AXIS), KEY_AXIS)


def mix(a, v):
    return _apply(a, v)


def attention(q, k, v):
    a = softmax_rows(scale(scores(q, k), q.shape[-1]))
    return mix(a, v), a


def self_attention_head(x, w_q, w_k, w_v):
    return attention(*project_qkv(x, w_q, w_k, w_v))


# ---- exercises ------------------------------------------------------------------------------

def zero_query_mixture(k, v):
    zero = np.zeros(k.shape[-1])
    w = softmax_rows(scale(_apply(k, zero), k.shape[-1]))
    return w, _apply(w, v)


def is_attention_weights(a):
    a = np.asarray(a, dtype=float)
    # the exercise asks about rows, so here I check the rows
    return a.ndim == 2 and bool(np.all(a >= 0)) and _sums_to_one(a.sum(axis=1))


def column_normalized_counterexample():
    # any non-negative matrix divided by its column totals; its first row ends up at 1.5
    counts = np.array([[4.0, 1.0, 1.0],
                       [0.0, 1.0, 2.0],
                       [0.0, 2.0, 1.0]])
    return _to_unit_total(counts, 0)


def shifted_output(a, v, shift, rows=None):
    return mix(a, _with_shift(v, shift, rows))


def output_change(a, shift, rows=None):
    # mixing only the shift (zero everywhere else) gives exactly how far each output row moves
    moved = _with_shift(np.zeros((a.shape[-1], len(shift))), shift, rows)
    return mix(a, moved)


def head_facts(t, d_k, d_v):
    return dict(divisor=float(np.sqrt(d_k)), score_shape=(t, t), output_shape=(t, d_v),
                softmax_axis=KEY_AXIS)


def value_intervention(x, w_q, w_k, w_v, w_v_new):
    before = self_attention_head(x, w_q, w_k, w_v)
    after = self_attention_head(x, w_q, w_k, w_v_new)
    names = ("output_before", "weights_before", "output_after", "weights_after")
    return dict(zip(names, before + after))


ANSWER_1 = "All the scores are zero so the softmax gives 1/3 to each key, and the output is the " \
           "mean of the values, [4/3, 4/3]. Zero query = no preference, it does not mean no output."

ANSWER_2 = "Not by itself. The matrix [[1,1,1],[0,0,0],[0,0,0]] has every column summing to 1 but " \
           "its first row sums to 3, so the first position would get the sum of the values instead " \
           "of a mixture."

ANSWER_3 = "Since the weights in a row add up to one, the whole shift goes through: the first output " \
           "becomes about [3.4011, 0.1978]. With only the first value row shifted it is not the same, " \
           "the first output only moves by 0.4011 times [2,-1]."

ANSWER_4 = "divisor 2 (sqrt of 4), scores are 5x5, output 5x3, softmax over the keys. 5 is the number " \
           "of positions and has nothing to do with how long the dot products are."

ANSWER_5 = "The weight does not show what the value carries; with W_V = 0 the same weights deliver " \
           "nothing. I would test prompts that only differ in red/blue and check if the model " \
           "actually follows them."
