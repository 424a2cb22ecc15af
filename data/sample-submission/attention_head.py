"""One self-attention head, step by step (Chapter 15, Self-Attention and Q/K/V).

This is the reference solution and the single source of what students receive: `qkv-release`
turns every region between `### BEGIN SOLUTION` and `### END SOLUTION` into a stub.

Shapes: T positions, d_in input coordinates, d_k query/key coordinates, d_v value coordinates.
Every function leaves its arguments unchanged.
"""
import numpy as np


def project_qkv(x, w_q, w_k, w_v):
    """Project the input rows into queries, keys and values (§15.1).

    x: [T, d_in]; w_q, w_k: [d_in, d_k]; w_v: [d_in, d_v].
    Returns the tuple (q, k, v) with shapes [T, d_k], [T, d_k], [T, d_v].
    """
    q = x @ w_q  # [T, d_in] @ [d_in, d_k] -> [T, d_k]
    k = x @ w_k  # [T, d_in] @ [d_in, d_k] -> [T, d_k]
    v = x @ w_v  # [T, d_in] @ [d_in, d_v] -> [T, d_v]
    return q, k, v


def scores(q, k):
    """Compare every receiving query with every contributing key (§15.2).

    q, k: [T, d_k]. Returns d: [T, T], where d[i, j] is query i's dot product with key j.
    """
    k_t = np.swapaxes(k, -1, -2)  # [..., T, d_k] -> [..., d_k, T]; also right for a batch
    d = q @ k_t  # [..., T, d_k] @ [..., d_k, T] -> [..., T, T]
    return d


def scale(d, d_k):
    """Divide the scores by the square root of the query/key width (§15.3).

    d: [T, T]; d_k: a positive int. Returns s = d / sqrt(d_k), same shape as d.
    """
    s = d / np.sqrt(d_k)  # [T, T]
    return s


def softmax_rows(s):
    """Normalize each receiving row over the contributing keys (§15.3).

    s: [..., T, T]. Returns a, the softmax over the last axis: every row is non-negative and sums
    to one. Stays finite for any finite input, scores in the thousands included.
    """
    shifted = s - s.max(axis=-2, keepdims=True)  # largest score of each row becomes 0
    e = np.exp(shifted)  # [..., T, T], every entry in (0, 1]
    a = e / e.sum(axis=-2, keepdims=True)  # each row divided by its own total
    return a


def mix(a, v):
    """Give each receiving position its weighted mixture of value rows (§15.4).

    a: [T, T] weights; v: [T, d_v] values. Returns o = a @ v: [T, d_v].
    """
    o = a @ v  # [T, T] @ [T, d_v] -> [T, d_v]: sums over contributing positions
    return o


def attention(q, k, v):
    """Scaled dot-product attention, softmax over the keys (§15.4).

    q, k: [T, d_k]; v: [T, d_v]; d_k is read from q.
    Returns the tuple (o, a): o [T, d_v], a [T, T].
    """
    d_k = q.shape[-1]
    a = softmax_rows(scale(scores(q, k), d_k))  # [T, T]
    o = mix(a, v)  # [T, d_v]
    return o, a


def self_attention_head(x, w_q, w_k, w_v):
    """One self-attention head over a sequence, or over a batch of them (§15.4, §15.6).

    x: [T, d_in], or [B, T, d_in] for a batch whose examples never mix.
    Returns the tuple (o, a): [T, d_v] and [T, T], or [B, T, d_v] and [B, T, T].
    """
    q, k, v = project_qkv(x, w_q, w_k, w_v)  # [..., T, d_k], [..., T, d_k], [..., T, d_v]
    return attention(q, k, v)


def zero_query_mixture(k, v):
    """Exercise 1: attend with a query of zeros (§15.8).

    k: [T, d_k]; v: [T, d_v]. Returns the tuple (weights, output): shapes [T] and [d_v].
    """
    q = np.zeros(k.shape[-1])  # [d_k]
    weights = softmax_rows(scale(k @ q, k.shape[-1]))  # [T]: every score is 0
    output = weights @ v  # [T] @ [T, d_v] -> [d_v]
    return weights, output


def is_attention_weights(a):
    """Exercise 2: are these valid attention weights (§15.8)?

    True exactly when a is 2-D and every row is non-negative and sums to 1 (within 1e-9).
    """
    a = np.asarray(a, dtype=float)
    if a.ndim != 2:
        return False
    rows_sum_to_one = np.all(np.abs(a.sum(axis=1) - 1.0) <= 1e-9)
    return bool(np.all(a >= 0) and rows_sum_to_one)


def column_normalized_counterexample():
    """Exercise 2: a [3, 3] matrix whose columns each sum to one but whose first row does not.

    Every entry is non-negative.
    """
    # Receiver 1 takes everything from every contributor: column sums 1, first-row sum 3.
    return np.array([[1.0, 1.0, 1.0],
                     [0.0, 0.0, 0.0],
                     [0.0, 0.0, 0.0]])


def shifted_output(a, v, shift, rows=None):
    """Exercise 3: the output after adding `shift` to some value rows (§15.5, §15.8).

    a: [T, T] weights; v: [T, d_v]; shift: [d_v]; rows: a list of row indices, or None for every
    row. Returns the new output [T, d_v].
    """
    v_new = np.array(v, dtype=float)  # a copy: the caller's v stays as it was
    if rows is None:
        v_new += shift  # [T, d_v] + [d_v]: every value row moves
    else:
        v_new[list(rows)] += shift  # only the listed value rows move
    return a @ v_new  # [T, T] @ [T, d_v] -> [T, d_v]


def output_change(a, shift, rows=None):
    """Exercise 3: how much the output moves, from the weights alone (§15.5, §15.8).

    a: [T, T] weights; shift: [d_v]; rows: as in shifted_output. Returns the change [T, d_v]:
    each receiving row moves by shift times the total weight it puts on the shifted rows.
    """
    if rows is None:
        moved = a.sum(axis=-1)  # [T]: every row's weights sum to one
    else:
        moved = a[:, list(rows)].sum(axis=-1)  # [T]: weight on the shifted rows only
    return np.outer(moved, shift)  # [T] x [d_v] -> [T, d_v]


def head_facts(t, d_k, d_v):
    """Exercise 4: the facts of a head with T = t, query/key width d_k, value width d_v (§15.8).

    Returns a dict: divisor (float), score_shape (tuple), output_shape (tuple), softmax_axis (int).
    """
    return {
        "divisor": float(np.sqrt(d_k)),  # the width of each dot product, not the position count
        "score_shape": (t, t),  # receiving queries x contributing keys
        "output_shape": (t, d_v),  # one mixture of value rows per position
        "softmax_axis": -1,  # across the keys of each row
    }


def value_intervention(x, w_q, w_k, w_v, w_v_new):
    """Exercise 5: change only W_V and compare the head before and after (§15.5, §15.8).

    Returns a dict with weights_before, weights_after ([T, T]) and output_before, output_after
    ([T, d_v]).
    """
    output_before, weights_before = self_attention_head(x, w_q, w_k, w_v)
    output_after, weights_after = self_attention_head(x, w_q, w_k, w_v_new)
    return {
        "weights_before": weights_before,
        "weights_after": weights_after,  # identical: W_V plays no part in the weights
        "output_before": output_before,
        "output_after": output_after,
    }


# Written answers (§15.8): a few sentences each, in your own words. A person reads them.
ANSWER_1 = """A zero query makes every score zero, so the softmax has nothing to prefer: each key \
gets weight 1/3. Equal weights still deliver the values, namely their average [4/3, 4/3]. A \
query only decides how the value rows are weighted; it cannot remove them."""

ANSWER_2 = """No. Column sums of one say how each contributor is shared out among receivers, but \
the head needs each receiving row to be a mixture of the values that sums to one. Rows \
[1,1,1], [0,0,0], [0,0,0] have every column summing to one, yet receiver 1 would get the plain \
sum of all three value rows (weight total 3) and the other receivers would get nothing."""

ANSWER_3 = """Shifting every value row by [2,-1] moves each output row by exactly [2,-1], because \
each row's weights add to one: O_1 becomes [3.401112..., 0.197776...]. If only value row 1 moves, \
output row i moves by [2,-1] times A[i,1] alone, so receiver 1 gains [2,-1] x 0.401112..., not \
the whole vector."""

ANSWER_4 = """The divisor is sqrt(d_k) = sqrt(4) = 2, the scores are [5,5], the output is [5,3], \
and the softmax runs along each query's row of five keys (the last axis). Dividing by 5 would \
use the number of positions, which has nothing to do with how many terms each dot product adds \
up; the scaling argument is about the d_k = 4 terms of the dot product."""

ANSWER_5 = """A large weight only says how one query mixed the values, not what those values carry \
or what later layers do with them: with W_V set to zero the weights are unchanged and nothing is \
delivered. Better evidence comes from a controlled comparison, for example prompts paired to \
differ only in red versus blue with the task and wording fixed, while recording how often the \
model actually succeeds or fails. Even that only speaks for the conditions tested."""
