"""Eli's submission: divides the scores by d_k itself rather than by its square root (scaled-by-d_k)."""
import numpy as np


def _swap_last_two(m):
    """np.transpose with explicit axes: leading (batch) axes stay, the last two trade places."""
    order = list(range(m.ndim))
    order[-2], order[-1] = order[-1], order[-2]
    return np.transpose(m, axes=order)


def project_qkv(x, w_q, w_k, w_v):
    products = [np.matmul(x, w) for w in (w_q, w_k, w_v)]
    return products[0], products[1], products[2]


def scores(q, k):
    return np.matmul(q, _swap_last_two(k))


def scale(d, d_k):
    # keep the scores from growing with the key width: divide by the width
    return np.divide(d, d_k)


def softmax_rows(s):
    peak = np.amax(s, axis=-1, keepdims=True)
    powers = np.exp(np.subtract(s, peak))
    return np.divide(powers, np.sum(powers, axis=-1, keepdims=True))


def mix(a, v):
    return np.matmul(a, v)


def attention(q, k, v):
    width = q.shape[-1]
    weights = softmax_rows(scale(scores(q, k), width))
    return mix(weights, v), weights


def self_attention_head(x, w_q, w_k, w_v):
    q, k, v = project_qkv(x, w_q, w_k, w_v)
    o, a = attention(q, k, v)
    return o, a


def zero_query_mixture(k, v):
    zero_q = np.zeros((1, k.shape[-1]))  # one query, as a [1, d_k] row
    o, a = attention(zero_q, k, v)
    return a[0], o[0]


def is_attention_weights(a):
    a = np.asarray(a, dtype=float)
    if np.ndim(a) != 2:
        return False
    if np.amin(a) < 0:
        return False
    return bool(np.allclose(np.sum(a, axis=1), 1.0, rtol=0.0, atol=1e-9))


def column_normalized_counterexample():
    wide = np.array([[1.0, 1.0, 0.0],
                     [0.0, 0.0, 0.5],
                     [0.0, 0.0, 0.5]])
    return wide  # columns: 1, 1, 1; first row: 2


def shifted_output(a, v, shift, rows=None):
    which = np.arange(np.shape(v)[0]) if rows is None else np.asarray(rows, dtype=int)
    bump = np.zeros_like(v)
    bump[which] = shift
    return np.matmul(a, np.add(v, bump))


def output_change(a, shift, rows=None):
    cols = slice(None) if rows is None else np.asarray(rows, dtype=int)
    on_moved = np.sum(a[:, cols], axis=1, keepdims=True)  # [T, 1]
    return np.matmul(on_moved, np.reshape(shift, (1, -1)))  # [T, 1] @ [1, d_v]


def head_facts(t, d_k, d_v):
    out = {"score_shape": (t, t), "output_shape": (t, d_v)}
    out["divisor"] = float(d_k)
    out["softmax_axis"] = -1
    return out


def value_intervention(x, w_q, w_k, w_v, w_v_new):
    o_old, a_old = self_attention_head(x, w_q, w_k, w_v)
    o_new, a_new = self_attention_head(x, w_q, w_k, w_v_new)
    return {"weights_before": a_old, "output_before": o_old, "weights_after": a_new, "output_after": o_new}


ANSWER_1 = ("When the query is all zeros, all three scores are 0. The softmax of equal numbers gives "
            "equal weights of 1/3, so the output is the average of the values, [4/3, 4/3]. "
            "The output would only be zero if the values themselves averaged to zero.")
ANSWER_2 = ("It is not enough. What matters is that each row (one receiving position) sums to one. "
            "[[1,1,1],[0,0,0],[0,0,0]] has column sums of one but the first row sums to 3, so "
            "position 1 gets V1+V2+V3 instead of a weighted average.")
ANSWER_3 = ("Every output row gets the full [2,-1] because its weights add to 1, so O1 becomes "
            "[3.401112, 0.197776]. If only V row 1 changes, O1 gets [2,-1] scaled by its weight "
            "on row 1, 0.401112, so the argument no longer gives the whole vector.")
ANSWER_4 = ("Divide by d_k = 4. Scores are [5,5], the output is [5,3], and the softmax is over the "
            "keys in each row. 5 is the sequence length, which is not what makes the dot products "
            "large; the key width is.")
ANSWER_5 = ("A large weight on red does not show that anything useful is passed on: in Example 15.2 "
            "the weights stay the same with W_V = 0 and the output is zero. A fairer test changes "
            "one thing at a time, e.g. the same instruction with red swapped for blue, and checks "
            "how often the model really gets it right.")
