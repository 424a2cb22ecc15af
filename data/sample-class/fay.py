"""Fay's submission: transposes the keys with .T, which scrambles the axes of a batch (batch-axes-mixed)."""
import numpy as np


def logsumexp(s, axis=-1):
    """log(sum(exp(s))) along axis, computed from the largest entry so that exp cannot overflow."""
    m = np.max(s, axis=axis, keepdims=True)
    return m + np.log(np.sum(np.exp(s - m), axis=axis, keepdims=True))


def project_qkv(x, w_q, w_k, w_v):
    """Three separate projections of the same input."""
    return (x @ w_q, x @ w_k, x @ w_v)


def scores(q, k):
    """d[i, j] = q_i . k_j, the chapter's Q K^T."""
    return q @ k.T


def scale(d, d_k):
    return d / float(np.sqrt(d_k))


def softmax_rows(s):
    """exp(s - logsumexp(s)) in each row: same as exp(s) / sum(exp(s)) but never overflows."""
    log_weights = s - logsumexp(s, axis=-1)
    return np.exp(log_weights)


def mix(a, v):
    return a @ v


def attention(q, k, v):
    s = scale(scores(q, k), q.shape[-1])
    a = softmax_rows(s)
    o = mix(a, v)
    return o, a


def self_attention_head(x, w_q, w_k, w_v):
    return attention(*project_qkv(x, w_q, w_k, w_v))


def zero_query_mixture(k, v):
    """Exercise 1. k @ 0 is a vector of zeros, so log-weights are all -log(T)."""
    s = k @ np.zeros(k.shape[1])
    weights = np.exp(s - logsumexp(s))
    return weights, v.T @ weights


def is_attention_weights(a):
    a = np.asarray(a, dtype=float)
    if a.ndim != 2:
        return False
    ok_rows = np.isclose(a.sum(axis=-1), 1.0, rtol=0.0, atol=1e-9)
    return bool(ok_rows.all()) and not bool((a < 0).any())


def column_normalized_counterexample():
    """Exercise 2: the transpose of a row-stochastic matrix whose first column is heavy."""
    row_stochastic = np.array([[0.6, 0.2, 0.2],
                               [0.9, 0.1, 0.0],
                               [0.7, 0.0, 0.3]])
    return row_stochastic.T  # first row = 0.6 + 0.9 + 0.7 = 2.2


def shifted_output(a, v, shift, rows=None):
    """Exercise 3: mix again with the shifted values (the original v is left alone)."""
    idx = list(range(v.shape[0])) if rows is None else list(rows)
    v_shifted = v.astype(float, copy=True)
    v_shifted[idx, :] += shift
    return a @ v_shifted


def output_change(a, shift, rows=None):
    """Exercise 3: row i moves by (sum of its weights on the shifted rows) * shift."""
    idx = list(range(a.shape[1])) if rows is None else list(rows)
    share = a[:, idx].sum(axis=1)
    return share[:, np.newaxis] * shift


def head_facts(t, d_k, d_v):
    return {"softmax_axis": -1,
            "score_shape": (t, t),
            "divisor": float(np.sqrt(d_k)),
            "output_shape": (t, d_v)}


def value_intervention(x, w_q, w_k, w_v, w_v_new):
    """Exercise 5: same x, W_Q, W_K; only W_V is replaced."""
    result = {}
    result["output_before"], result["weights_before"] = self_attention_head(x, w_q, w_k, w_v)
    result["output_after"], result["weights_after"] = self_attention_head(x, w_q, w_k, w_v_new)
    return result


ANSWER_1 = "A zero query scores 0 against every key, so the softmax spreads its weight evenly " \
    "(1/3 each) and the output is the mean value row, [4/3, 4/3]. Softmax never gives all-zero " \
    "weights, so the only way to get a zero output is for the values to average to zero."
ANSWER_2 = "No: columns summing to one is the wrong constraint. The head needs each query's row " \
    "to be a distribution over keys. The matrix with first row [1,1,1] and the other rows zero has " \
    "column sums 1, 1, 1, but its first row adds to 3, which is not a mixture."
ANSWER_3 = "With every V row shifted, O1 = [1.401112 + 2, 1.197776 - 1] = [3.401112, 0.197776] because " \
    "the row's weights total 1. With only V1 shifted, only the weight on V1 (0.401112) carries the " \
    "shift, so O1 moves by [0.802224, -0.401112] and the argument does not carry over."
ANSWER_4 = "sqrt(d_k) = 2, scores [5, 5], output [5, 3], softmax along each row (over the keys). " \
    "Dividing by 5 would tie the scale to the sequence length, but the variance argument is about " \
    "the 4 products summed in each dot product."
ANSWER_5 = "The report confuses a weight with an effect. Example 15.2 gives the same weights with " \
    "W_V = 0 and yet nothing arrives. Better: paired prompts differing only in red/blue with the " \
    "task fixed, recording success and failure rates, and only claiming what was tested."
