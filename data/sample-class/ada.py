"""Ada's submission: everything correct, the head and all five exercises (scores 100 out of 100)."""
import numpy as np


def project_qkv(x, w_q, w_k, w_v):
    # Every row of x (one position) is multiplied by each of the three learned matrices.
    # Positions stay separate here; only the input coordinates get summed over.
    queries = x @ w_q
    keys = x @ w_k
    values = x @ w_v
    return queries, keys, values


def scores(q, k):
    # I want query i dotted with key j at position [i, j], so the keys must become columns.
    # swapaxes on the last two axes (not .T) so that a leading batch axis is left where it is.
    keys_as_columns = np.swapaxes(k, -1, -2)
    raw_scores = q @ keys_as_columns
    return raw_scores


def scale(d, d_k):
    # A dot product of d_k terms spreads out like sqrt(d_k), so that is what we divide by.
    divisor = np.sqrt(d_k)
    scaled_scores = d / divisor
    return scaled_scores


def softmax_rows(s):
    # Softmax along the keys (the last axis): one distribution per receiving row.
    # Taking off the row maximum first keeps np.exp from overflowing and leaves the weights as they are.
    row_max = np.max(s, axis=-1, keepdims=True)
    exponentials = np.exp(s - row_max)
    row_totals = np.sum(exponentials, axis=-1, keepdims=True)
    weights = exponentials / row_totals
    return weights


def mix(a, v):
    # Output row i is a weighted sum of all the value rows, using row i of a as the weights.
    output = a @ v
    return output


def attention(q, k, v):
    d_k = q.shape[-1]  # how many coordinates each query and key has
    raw_scores = scores(q, k)
    scaled_scores = scale(raw_scores, d_k)
    weights = softmax_rows(scaled_scores)
    output = mix(weights, v)
    return output, weights


def self_attention_head(x, w_q, w_k, w_v):
    # This works for one sequence [T, d_in] and for a batch [B, T, d_in], because every
    # function above only ever touches the last two axes.
    queries, keys, values = project_qkv(x, w_q, w_k, w_v)
    output, weights = attention(queries, keys, values)
    return output, weights


def zero_query_mixture(k, v):
    d_k = k.shape[1]
    zero_query = np.zeros(d_k)
    # A zero vector dotted with anything is 0, so every score (scaled or not) is 0.
    query_scores = scale(k @ zero_query, d_k)
    weights = softmax_rows(query_scores)  # all equal, 1/T each
    output = weights @ v  # so this is just the average of the value rows
    return weights, output


def is_attention_weights(a):
    a = np.asarray(a, dtype=float)
    if a.ndim != 2:
        return False  # the weights of one head always form a [T, T] matrix
    no_negatives = bool(np.all(a >= 0))
    row_totals = a.sum(axis=1)
    rows_are_mixtures = bool(np.all(np.abs(row_totals - 1.0) <= 1e-9))
    return no_negatives and rows_are_mixtures


def column_normalized_counterexample():
    # Each contributor (column) gives all of its weight to receiver 1, so every column sums
    # to 1, but row 1 sums to 3 and receivers 2 and 3 get nothing at all.
    counterexample = np.zeros((3, 3))
    counterexample[0, :] = 1.0
    return counterexample


def shifted_output(a, v, shift, rows=None):
    new_values = v.copy()  # a copy, so the v I was given does not change
    if rows is None:
        new_values = new_values + shift
    else:
        for row in rows:
            new_values[row] = new_values[row] + shift
    return a @ new_values


def output_change(a, shift, rows=None):
    # Output row i moves by shift times the total weight that row i puts on the moved rows.
    if rows is None:
        rows = range(a.shape[1])
    weight_on_moved_rows = a[:, list(rows)].sum(axis=1)
    change = weight_on_moved_rows[:, None] * shift[None, :]
    return change


def head_facts(t, d_k, d_v):
    facts = {}
    facts["divisor"] = float(np.sqrt(d_k))  # square root of the query/key width, not of t
    facts["score_shape"] = (t, t)  # queries down the side, keys across the top
    facts["output_shape"] = (t, d_v)  # one mixture of values for each position
    facts["softmax_axis"] = -1  # normalize across the keys in each row
    return facts


def value_intervention(x, w_q, w_k, w_v, w_v_new):
    output_before, weights_before = self_attention_head(x, w_q, w_k, w_v)
    # Only W_V changes, so Q and K, and therefore the weights, should come out identical.
    output_after, weights_after = self_attention_head(x, w_q, w_k, w_v_new)
    comparison = {"weights_before": weights_before, "weights_after": weights_after}
    comparison["output_before"] = output_before
    comparison["output_after"] = output_after
    return comparison


ANSWER_1 = (
    "With q = [0, 0] every dot product with a key is 0, so after the softmax each of the three "
    "keys gets exp(0)/3 = 1/3. The output is then the average of the value rows, "
    "([1,0] + [1,2] + [2,2]) / 3 = [4/3, 4/3]. The query only decides how the values are "
    "weighted; equal scores mean equal weights, not zero weights, so the values still come through."
)

ANSWER_2 = (
    "No. Column sums say how each contributor is split among the receivers, but every receiver "
    "needs its own row of weights that adds up to 1. For example [[1,1,1],[0,0,0],[0,0,0]] has "
    "every column summing to 1, yet receiver 1 would get the sum of all three value rows (row "
    "total 3) and receivers 2 and 3 would get nothing."
)

ANSWER_3 = (
    "Each output row is a weighted average whose weights add to 1, so adding [2,-1] to every "
    "value row adds exactly [2,-1] to every output row: the first output goes from "
    "[1.401112, 1.197776] to [3.401112, 0.197776]. If only the first value row changes, the "
    "argument breaks: output row 1 only moves by 0.401112 * [2,-1], its weight on that row."
)

ANSWER_4 = (
    "Divisor sqrt(4) = 2, scores [5,5], output [5,3], and the softmax runs across the five keys "
    "of each row (the last axis). Dividing by 5 would divide by the number of positions, but the "
    "scaling is meant to undo the growth in spread that comes from adding d_k = 4 products."
)

ANSWER_5 = (
    "Example 15.2 shows the weights can look exactly the same while nothing is delivered (W_V = 0), "
    "so a big weight on red is not evidence of what the model does with it. A better test would "
    "compare actual outputs on matched prompts that differ only in red vs blue, with the task and "
    "the rest of the wording fixed, and count successes and failures. Even then it only tells us "
    "about those prompts."
)
