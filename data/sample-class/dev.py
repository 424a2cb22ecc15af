"""Dev's submission: exponentiates the raw scores without subtracting the row maximum (unstable-softmax)."""
import numpy as np

T_ = lambda m: np.swapaxes(m, -2, -1)  # noqa: E731  (transpose of the last two axes)


def project_qkv(x, w_q, w_k, w_v): return x @ w_q, x @ w_k, x @ w_v
def scores(q, k): return q @ T_(k)
def scale(d, d_k): return d / d_k ** 0.5
def softmax_rows(s): return np.exp(s) / np.exp(s).sum(-1, keepdims=True)
def mix(a, v): return a @ v


def attention(q, k, v):
    a = softmax_rows(scale(scores(q, k), q.shape[-1]))
    return mix(a, v), a


def self_attention_head(x, w_q, w_k, w_v): return attention(*project_qkv(x, w_q, w_k, w_v))


def zero_query_mixture(k, v):
    w = softmax_rows(k @ np.zeros(k.shape[1]))
    return w, w @ v


def is_attention_weights(a):
    return a.ndim == 2 and bool((a >= 0).all() and np.allclose(a.sum(1), 1, rtol=0, atol=1e-9))


def column_normalized_counterexample(): return np.eye(3)[[0, 0, 1]].T  # rows [1,1,0] [0,0,1] [0,0,0]


def output_change(a, shift, rows=None):
    return np.outer(a.sum(1) if rows is None else a[:, rows].sum(1), shift)


def shifted_output(a, v, shift, rows=None): return a @ v + output_change(a, shift, rows)  # linear in v


def head_facts(t, d_k, d_v): return dict(divisor=d_k ** 0.5, score_shape=(t, t), output_shape=(t, d_v), softmax_axis=1)


def value_intervention(x, w_q, w_k, w_v, w_v_new):
    (ob, wb), (oa, wa) = (self_attention_head(x, w_q, w_k, w) for w in (w_v, w_v_new))
    return dict(weights_before=wb, weights_after=wa, output_before=ob, output_after=oa)


ANSWER_1 = "scores all 0 -> weights 1/3 each -> output = mean of V = [4/3, 4/3]. zero query != zero output."
ANSWER_2 = "no. [[1,1,1],[0,0,0],[0,0,0]]: columns sum to 1, row 1 sums to 3 so it's not a mixture."
ANSWER_3 = "new O1 = [3.401112, 0.197776] (rows sum to 1). only V1 shifted: O1 moves by 0.401112*[2,-1]."
ANSWER_4 = "divisor 2, scores [5,5], output [5,3], softmax over keys. 5 = positions, 4 = terms per dot product."
ANSWER_5 = "weights don't show what gets delivered (W_V=0 -> same weights, zero output). compare paired red/blue prompts."
