"""One self-attention head, step by step (Chapter 15, Self-Attention and Q/K/V).

Write each function where it says `# YOUR CODE HERE`, in place of `raise NotImplementedError()`,
and answer the five questions at the end of the file in your own words. Run `pytest` in this
folder to check your functions on the chapter's worked example; see README.md.

Shapes: T positions, d_in input coordinates, d_k query/key coordinates, d_v value coordinates.
Every function leaves its arguments unchanged.
"""
import numpy as np


def project_qkv(x, w_q, w_k, w_v):
    """Project the input rows into queries, keys and values (§15.1).

    x: [T, d_in]; w_q, w_k: [d_in, d_k]; w_v: [d_in, d_v].
    Returns the tuple (q, k, v) with shapes [T, d_k], [T, d_k], [T, d_v].
    """
    # YOUR CODE HERE
    raise NotImplementedError()


def scores(q, k):
    """Compare every receiving query with every contributing key (§15.2).

    q, k: [T, d_k]. Returns d: [T, T], where d[i, j] is query i's dot product with key j.
    """
    # YOUR CODE HERE
    raise NotImplementedError()


def scale(d, d_k):
    """Divide the scores by the square root of the query/key width (§15.3).

    d: [T, T]; d_k: a positive int. Returns s = d / sqrt(d_k), same shape as d.
    """
    # YOUR CODE HERE
    raise NotImplementedError()


def softmax_rows(s):
    """Normalize each receiving row over the contributing keys (§15.3).

    s: [..., T, T]. Returns a, the softmax over the last axis: every row is non-negative and sums
    to one. Stays finite for any finite input, scores in the thousands included.
    """
    # YOUR CODE HERE
    raise NotImplementedError()


def mix(a, v):
    """Give each receiving position its weighted mixture of value rows (§15.4).

    a: [T, T] weights; v: [T, d_v] values. Returns o = a @ v: [T, d_v].
    """
    # YOUR CODE HERE
    raise NotImplementedError()


def attention(q, k, v):
    """Scaled dot-product attention, softmax over the keys (§15.4).

    q, k: [T, d_k]; v: [T, d_v]; d_k is read from q.
    Returns the tuple (o, a): o [T, d_v], a [T, T].
    """
    # YOUR CODE HERE
    raise NotImplementedError()


def self_attention_head(x, w_q, w_k, w_v):
    """One self-attention head over a sequence, or over a batch of them (§15.4, §15.6).

    x: [T, d_in], or [B, T, d_in] for a batch whose examples never mix.
    Returns the tuple (o, a): [T, d_v] and [T, T], or [B, T, d_v] and [B, T, T].
    """
    # YOUR CODE HERE
    raise NotImplementedError()


def zero_query_mixture(k, v):
    """Exercise 1: attend with a query of zeros (§15.8).

    k: [T, d_k]; v: [T, d_v]. Returns the tuple (weights, output): shapes [T] and [d_v].
    """
    # YOUR CODE HERE
    raise NotImplementedError()


def is_attention_weights(a):
    """Exercise 2: are these valid attention weights (§15.8)?

    True exactly when a is 2-D and every row is non-negative and sums to 1 (within 1e-9).
    """
    # YOUR CODE HERE
    raise NotImplementedError()


def column_normalized_counterexample():
    """Exercise 2: a [3, 3] matrix whose columns each sum to one but whose first row does not.

    Every entry is non-negative.
    """
    # YOUR CODE HERE
    raise NotImplementedError()


def shifted_output(a, v, shift, rows=None):
    """Exercise 3: the output after adding `shift` to some value rows (§15.5, §15.8).

    a: [T, T] weights; v: [T, d_v]; shift: [d_v]; rows: a list of row indices, or None for every
    row. Returns the new output [T, d_v].
    """
    # YOUR CODE HERE
    raise NotImplementedError()


def output_change(a, shift, rows=None):
    """Exercise 3: how much the output moves, from the weights alone (§15.5, §15.8).

    a: [T, T] weights; shift: [d_v]; rows: as in shifted_output. Returns the change [T, d_v]:
    each receiving row moves by shift times the total weight it puts on the shifted rows.
    """
    # YOUR CODE HERE
    raise NotImplementedError()


def head_facts(t, d_k, d_v):
    """Exercise 4: the facts of a head with T = t, query/key width d_k, value width d_v (§15.8).

    Returns a dict: divisor (float), score_shape (tuple), output_shape (tuple), softmax_axis (int).
    """
    # YOUR CODE HERE
    raise NotImplementedError()


def value_intervention(x, w_q, w_k, w_v, w_v_new):
    """Exercise 5: change only W_V and compare the head before and after (§15.5, §15.8).

    Returns a dict with weights_before, weights_after ([T, T]) and output_before, output_after
    ([T, d_v]).
    """
    # YOUR CODE HERE
    raise NotImplementedError()


# Written answers (§15.8): a few sentences each, in your own words. A person reads them.
# ANSWER_1: Why does a query of zeros not give an output of zeros?
ANSWER_1 = ""

# ANSWER_2: Why are unit column sums not enough to reproduce the head?
ANSWER_2 = ""

# ANSWER_3: Does the value-shift argument still hold when only one value row changes?
ANSWER_3 = ""

# ANSWER_4: Why is dividing by the number of positions T a different operation?
ANSWER_4 = ""

# ANSWER_5: What evidence does a large weight on 'red' miss, and what comparison would supply it?
ANSWER_5 = ""
