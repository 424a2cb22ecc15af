"""Cleo's submission: puts keys on the rows and queries on the columns, k @ q.T (keys-not-transposed)."""
import numpy as np

# I like einsum because the letters say which axes are kept and which are summed:
#   t, i, j = positions    c = query/key coordinate    e = value coordinate    n = input coordinate
# The "..." lets a batch axis ride along in front.


def project_qkv(x, w_q, w_k, w_v):
    q = np.einsum("...tn,nc->...tc", x, w_q)
    k = np.einsum("...tn,nc->...tc", x, w_k)
    v = np.einsum("...tn,ne->...te", x, w_v)
    return q, k, v


def scores(q, k):
    # sum over the coordinate c of each key with each query
    return np.einsum("...ic,...jc->...ij", k, q)


def scale(d, d_k):
    return d * (1.0 / np.sqrt(d_k))


def softmax_rows(s):
    z = np.exp(s - s.max(axis=-1, keepdims=True))
    totals = np.einsum("...ij->...i", z)
    return z / totals[..., None]


def mix(a, v):
    return np.einsum("...ij,...je->...ie", a, v)


def attention(q, k, v):
    weights = softmax_rows(scale(scores(q, k), q.shape[-1]))
    return mix(weights, v), weights


def self_attention_head(x, w_q, w_k, w_v):
    q, k, v = project_qkv(x, w_q, w_k, w_v)
    return attention(q, k, v)


def zero_query_mixture(k, v):
    q0 = np.zeros(k.shape[-1])
    s = np.einsum("tc,c->t", k, q0) / np.sqrt(k.shape[-1])
    w = np.exp(s - s.max())
    w = w / w.sum()
    return w, np.einsum("t,te->e", w, v)


def is_attention_weights(a):
    a = np.asarray(a, dtype=float)
    if a.ndim != 2 or np.any(a < 0):
        return False
    row_sums = np.einsum("ij->i", a)
    return bool(np.max(np.abs(row_sums - 1.0)) <= 1e-9)


def column_normalized_counterexample():
    # Receiver 1 takes half of contributors 1 and 2 and all of contributor 3: row total 2.
    return np.array([[0.5, 0.5, 1.0],
                     [0.5, 0.0, 0.0],
                     [0.0, 0.5, 0.0]])


def _moved_rows(t, rows):
    """1.0 for each value row that gets the shift, 0.0 for the others."""
    mask = np.zeros(t)
    mask[slice(None) if rows is None else list(rows)] = 1.0
    return mask


def shifted_output(a, v, shift, rows=None):
    v2 = v + np.einsum("j,e->je", _moved_rows(len(v), rows), shift)
    return np.einsum("ij,je->ie", a, v2)


def output_change(a, shift, rows=None):
    return np.einsum("ij,j,e->ie", a, _moved_rows(a.shape[1], rows), shift)


def head_facts(t, d_k, d_v):
    facts = dict(score_shape=(t, t), output_shape=(t, d_v), softmax_axis=-1)
    facts.update(divisor=np.sqrt(float(d_k)).item())
    return facts


def value_intervention(x, w_q, w_k, w_v, w_v_new):
    runs = {"before": self_attention_head(x, w_q, w_k, w_v),
            "after": self_attention_head(x, w_q, w_k, w_v_new)}
    out = {f"output_{when}": o for when, (o, _) in runs.items()}
    out.update({f"weights_{when}": a for when, (_, a) in runs.items()})
    return out


ANSWER_1 = """Q = 0 makes every score 0, and softmax of equal scores is uniform: [1/3, 1/3, 1/3].
Uniform weights still average the value rows, so the output is [4/3, 4/3], not zero. The query
picks the weights; the values are what gets delivered."""

ANSWER_2 = """No, the columns are the wrong direction. Each receiver (row) needs weights adding to 1.
Counterexample: rows [1,1,1], [0,0,0], [0,0,0]. Columns all sum to 1, but row 1 sums to 3, so
position 1 would receive V1 + V2 + V3, a sum rather than an average."""

ANSWER_3 = """O1 + [2,-1] = [3.401112, 0.197776], because the three weights in row 1 sum to 1. For a
shift of only V row 1 the extra amount is weighted by A[1,1] = 0.401112, so O1 only moves by
0.401112 * [2,-1] = [0.802224, -0.401112]."""

ANSWER_4 = """sqrt(d_k) = sqrt(4) = 2. D and A are [5,5], O is [5,3], softmax over the last axis (keys).
The 4 counts the terms in each dot product; 5 counts positions, which is unrelated to the
spread of a dot product."""

ANSWER_5 = """Example 15.2 keeps the weights and zeroes W_V, and the output is gone, so a weight alone
cannot show reliability. I would run paired prompts (red vs. blue, same task and same wording
otherwise) and measure how often the model succeeds, and only claim it for those conditions."""
