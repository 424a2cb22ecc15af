"""Gus's submission: an accidental infinite loop in mix, so every step that mixes values times out (timeout); his softmax loops over one matrix only, so a batch of them raises (batch-axes-mixed)."""
import math

import numpy as np


def project_qkv(x, w_q, w_k, w_v):
    n_pos, n_in = x.shape
    results = []
    for w in (w_q, w_k, w_v):
        proj = np.zeros((n_pos, w.shape[1]))
        for p in range(n_pos):
            for c in range(w.shape[1]):
                total = 0.0
                for i in range(n_in):
                    total += x[p, i] * w[i, c]
                proj[p, c] = total
        results.append(proj)
    return results[0], results[1], results[2]


def scores(q, k):
    n = len(q)
    d = np.zeros((n, len(k)))
    for i in range(n):
        for j in range(len(k)):
            d[i, j] = np.dot(q[i], k[j])  # query i against key j
    return d


def scale(d, d_k):
    return d / math.sqrt(d_k)


def softmax_rows(s):
    a = np.zeros(s.shape)
    for i in range(s.shape[0]):
        biggest = max(s[i])
        row_total = 0.0
        for j in range(s.shape[1]):
            a[i, j] = math.exp(s[i, j] - biggest)
            row_total += a[i, j]
        for j in range(s.shape[1]):
            a[i, j] = a[i, j] / row_total
    return a


def mix(a, v):
    n = a.shape[0]
    out = np.zeros((n, v.shape[1]))
    i = 0
    while i < n:
        for j in range(a.shape[1]):
            out[i] += a[i, j] * v[j]
    i += 1
    return out


def attention(q, k, v):
    a = softmax_rows(scale(scores(q, k), q.shape[1]))
    return mix(a, v), a


def self_attention_head(x, w_q, w_k, w_v):
    if x.ndim == 3:
        # a batch: do each example on its own and stack them back up
        outputs = []
        weights = []
        for example in x:
            o, a = self_attention_head(example, w_q, w_k, w_v)
            outputs.append(o)
            weights.append(a)
        return np.array(outputs), np.array(weights)
    q, k, v = project_qkv(x, w_q, w_k, w_v)
    return attention(q, k, v)


def zero_query_mixture(k, v):
    n = k.shape[0]
    zero_scores = np.zeros((1, n))  # q = 0 gives 0 against every key
    weights = softmax_rows(zero_scores)[0]
    output = np.zeros(v.shape[1])
    for j in range(n):
        output = output + weights[j] * v[j]
    return weights, output


def is_attention_weights(a):
    if np.ndim(a) != 2:
        return False
    for row in a:
        for value in row:
            if not value >= 0:  # NaN is not a weight either
                return False
        if abs(sum(row) - 1.0) > 1e-9:
            return False
    return True


def column_normalized_counterexample():
    m = np.zeros((3, 3))
    m[0, 0] = 1.0
    m[0, 1] = 1.0
    m[1, 2] = 1.0
    return m


def shifted_output(a, v, shift, rows=None):
    if rows is None:
        rows = range(v.shape[0])
    new_v = v.copy()
    for r in rows:
        new_v[r] = new_v[r] + shift
    return np.dot(a, new_v)


def output_change(a, shift, rows=None):
    if rows is None:
        rows = range(a.shape[1])
    change = np.zeros((a.shape[0], len(shift)))
    for i in range(a.shape[0]):
        weight = 0.0
        for r in rows:
            weight += a[i, r]
        change[i] = weight * shift
    return change


def head_facts(t, d_k, d_v):
    return {"divisor": math.sqrt(d_k), "score_shape": (t, t), "output_shape": (t, d_v), "softmax_axis": 1}


def value_intervention(x, w_q, w_k, w_v, w_v_new):
    result = {}
    for label, w in (("before", w_v), ("after", w_v_new)):
        o, a = self_attention_head(x, w_q, w_k, w)
        result["output_" + label] = o
        result["weights_" + label] = a
    return result


ANSWER_1 = "Because the scores are all 0, and exp(0) = 1 for every key, so each key gets 1/3 and you get the average of the values [4/3, 4/3]."
ANSWER_2 = "No, the rows have to sum to one, not the columns. Example: [[1,1,0],[0,0,1],[0,0,0]], the first row sums to 2."
ANSWER_3 = "O1 goes to [3.401112, 0.197776]. If only row 1 of V moves then no, it only moves by 0.401112*[2,-1]."
ANSWER_4 = ""
ANSWER_5 = ""
