"""A held-out set: ordinary mistakes that no list of misconceptions was written for.

Each entry is the reference with a line or two changed the way a student might change it: an
operand swapped for another array in scope, an operation inverted, a stage skipped, doubled or
added, a predicate's condition dropped, added or loosened, a related quantity returned in place
of the asked one. None carries expected codes: the coverage script (benchmarks/diagnosis_coverage.py)
counts, step by step, how many of the steps each one fails are named by a model, and the claims
test (tests/test_feedback_claims.py) checks that whatever is said of them is true.
"""
from __future__ import annotations

from submissions.variants import Submission


def _edit(*pairs: tuple[str, str]) -> Submission:
    return Submission(tuple(pairs))


Q = "    q = x @ w_q  # [T, d_in] @ [d_in, d_k] -> [T, d_k]\n"
K = "    k = x @ w_k  # [T, d_in] @ [d_in, d_k] -> [T, d_k]\n"
V = "    v = x @ w_v  # [T, d_in] @ [d_in, d_v] -> [T, d_v]\n"
KT = "k_t = np.swapaxes(k, -1, -2)"
D = "d = q @ k_t  #"
S = "s = d / np.sqrt(d_k)  # [T, T]"
SHIFT = "shifted = s - s.max(axis=-1, keepdims=True)"
EXP = "e = np.exp(shifted)"
NORM = "a = e / e.sum(axis=-1, keepdims=True)"
MIX = "o = a @ v  #"
ATT = "    a = softmax_rows(scale(scores(q, k), d_k))  # [T, T]\n"
ATT_MIX = "    o = mix(a, v)  # [T, d_v]\n"
ATT_DK = "d_k = q.shape[-1]"
HEAD = "    q, k, v = project_qkv(x, w_q, w_k, w_v)"
ZQ = "q = np.zeros(k.shape[-1])"
ZW = "weights = softmax_rows(scale(k @ q, k.shape[-1]))"
ZO = "output = weights @ v  #"
SUMS = "rows_sum_to_one = np.all(np.abs(a.sum(axis=1) - 1.0) <= 1e-9)"
SIGNS = "return bool(np.all(a >= 0) and rows_sum_to_one)"
NDIM = "    if a.ndim != 2:\n        return False\n"
ALL_ROWS = "v_new += shift  #"
SOME_ROWS = "v_new[list(rows)] += shift"
MOVED_ALL = "moved = a.sum(axis=-1)  #"
MOVED_SOME = "moved = a[:, list(rows)].sum(axis=-1)"
OUTER = "return np.outer(moved, shift)"
DIVISOR = '"divisor": float(np.sqrt(d_k)),'
SCORE_SHAPE = '"score_shape": (t, t),'
OUTPUT_SHAPE = '"output_shape": (t, d_v),'
AFTER = "output_after, weights_after = self_attention_head(x, w_q, w_k, w_v_new)"
BEFORE = "output_before, weights_before = self_attention_head(x, w_q, w_k, w_v)"

UNLISTED: dict[str, Submission] = {
    # -- projections -------------------------------------------------------------------------
    "qkv_keys_are_the_input": _edit((K, "    k = x\n")),
    "qkv_values_absolute": _edit((V, "    v = np.abs(x @ w_v)\n")),
    "qkv_returns_keys_twice": _edit(("    return q, k, v\n", "    return q, k, k\n")),
    "qkv_queries_from_values_matrix": _edit((Q, "    q = x @ w_v\n")),
    "qkv_values_clipped": _edit((V, "    v = np.clip(x @ w_v, 0, 1)\n")),
    # -- scores ------------------------------------------------------------------------------
    "scores_keys_with_keys": _edit((D, "d = k @ k_t  #")),
    "scores_squared": _edit((D, "d = (q @ k_t) ** 2  #")),
    "scores_absolute": _edit((D, "d = np.abs(q @ k_t)  #")),
    "scores_over_positions": _edit((D, "d = q @ k_t / q.shape[-2]  #")),
    "scores_plus_queries_self": _edit((D, "d = q @ k_t + q @ np.swapaxes(q, -1, -2)  #")),
    "scores_rounded": _edit((D, "d = np.round(q @ k_t)  #")),
    # -- the divisor -------------------------------------------------------------------------
    "scale_multiplies": _edit((S, "s = d * np.sqrt(d_k)  # [T, T]")),
    "scale_by_d_k_squared": _edit((S, "s = d / d_k ** 2  # [T, T]")),
    "scale_by_log_d_k": _edit((S, "s = d / np.log(d_k)  # [T, T]")),
    "scale_upside_down": _edit((S, "s = np.sqrt(d_k) / d  # [T, T]")),
    "scale_subtracts": _edit((S, "s = d - np.sqrt(d_k)  # [T, T]")),
    "scale_fourth_root": _edit((S, "s = d / np.sqrt(np.sqrt(d_k))  # [T, T]")),
    # -- the softmax -------------------------------------------------------------------------
    "softmax_mean_shift": _edit((SHIFT, "shifted = s - s.mean(axis=-1, keepdims=True)")),
    "softmax_normalized_by_mean": _edit((NORM, "a = e / e.mean(axis=-1, keepdims=True)")),
    "softmax_squared_weights": _edit((NORM, "a = (e / e.sum(axis=-1, keepdims=True)) ** 2")),
    "softmax_log_weights": _edit((NORM, "a = np.log(e / e.sum(axis=-1, keepdims=True))")),
    "softmax_subtracts_total": _edit((NORM, "a = e - e.sum(axis=-1, keepdims=True)")),
    "softmax_twice_exponentiated": _edit((EXP, "e = np.exp(np.exp(shifted))")),
    "softmax_base_two": _edit((EXP, "e = 2.0 ** shifted")),
    "softmax_shift_added": _edit((SHIFT, "shifted = s + s.max(axis=-1, keepdims=True)")),
    "softmax_transposed_weights": _edit((NORM, "a = np.swapaxes(e / e.sum(axis=-1, keepdims=True), -1, -2)")),
    "softmax_max_over_all_axes_sum": _edit((NORM, "a = e / e.max()")),
    # -- the mix -----------------------------------------------------------------------------
    "mix_values_squared": _edit((MIX, "o = a @ v ** 2  #")),
    "mix_values_added_back": _edit((MIX, "o = a @ v + v  #")),
    "mix_divided_by_positions": _edit((MIX, "o = a @ v / a.shape[-1]  #")),
    "mix_weights_squared": _edit((MIX, "o = (a * a) @ v  #")),
    "mix_absolute": _edit((MIX, "o = np.abs(a @ v)  #")),
    "mix_weights_twice": _edit((MIX, "o = a @ (a @ v)  #")),
    # -- attention ---------------------------------------------------------------------------
    "attention_values_from_keys": _edit((ATT_MIX, "    o = mix(a, k)  # [T, d_v]\n")),
    "attention_softmax_twice": _edit((ATT, "    a = softmax_rows(softmax_rows(scale(scores(q, k), d_k)))  # [T, T]\n")),
    "attention_d_k_is_two": _edit((ATT_DK, "d_k = 2")),
    "attention_unscaled_mixed_scaled_reported": _edit(
        (ATT, "    a = softmax_rows(scores(q, k))  # [T, T]\n"),
        (ATT_MIX, "    o = mix(a, v)  # [T, d_v]\n    a = softmax_rows(scale(scores(q, k), d_k))\n")),
    "attention_values_added_back": _edit((ATT_MIX, "    o = mix(a, v) + v  # [T, d_v]\n")),
    "attention_scaled_twice": _edit((ATT, "    a = softmax_rows(scale(scale(scores(q, k), d_k), d_k))  # [T, T]\n")),
    "attention_queries_for_keys": _edit((ATT, "    a = softmax_rows(scale(scores(q, q), d_k))  # [T, T]\n")),
    # -- the head ----------------------------------------------------------------------------
    "head_keys_from_w_q": _edit((HEAD, "    q, k, v = project_qkv(x, w_q, w_q, w_v)")),
    "head_input_scaled": _edit((HEAD, "    q, k, v = project_qkv(x / np.sqrt(x.shape[-1]), w_q, w_k, w_v)")),
    "head_values_absolute": _edit((HEAD, "    q, k, v = project_qkv(x, w_q, w_k, np.abs(w_v))")),
    "head_returns_weights_first": _edit(("    return attention(q, k, v)\n",
                                         "    o, a = attention(q, k, v)\n    return o, np.round(a, 3)\n")),
    "head_attends_with_keys_as_queries": _edit(("    return attention(q, k, v)\n", "    return attention(k, k, v)\n")),
    # -- a batch -----------------------------------------------------------------------------
    "batch_einsum_two_d": _edit((KT, "k_t = np.einsum('td->dt', k)")),
    "batch_np_dot_mix": _edit((MIX, "o = np.dot(a, v)  #")),
    "batch_transpose_reversed": _edit((KT, "k_t = np.transpose(k)")),
    # -- exercise 1 --------------------------------------------------------------------------
    "zero_query_of_ones": _edit((ZQ, "q = np.ones(k.shape[-1])")),
    "zero_query_output_first_row": _edit((ZO, "output = v[0]  #")),
    "zero_query_output_summed": _edit((ZO, "output = v.sum(axis=0)  #")),
    "zero_query_weights_by_width": _edit((ZW, "weights = np.full(k.shape[0], 1.0 / k.shape[-1])")),
    "zero_query_weights_unscaled_exp": _edit((ZW, "weights = np.exp(k @ q)")),
    "zero_query_median": _edit((ZO, "output = np.median(v, axis=0)  #")),
    # -- exercise 2 --------------------------------------------------------------------------
    "predicate_first_row_only": _edit((SUMS, "rows_sum_to_one = abs(a[0].sum() - 1.0) <= 1e-9")),
    "predicate_any_row": _edit((SUMS, "rows_sum_to_one = np.any(np.abs(a.sum(axis=1) - 1.0) <= 1e-9)")),
    "predicate_strictly_positive": _edit((SIGNS, "return bool(np.all(a > 0) and rows_sum_to_one)")),
    "predicate_one_sided": _edit((SUMS, "rows_sum_to_one = np.all(a.sum(axis=1) - 1.0 <= 1e-9)")),
    "predicate_tolerance_micro": _edit((SUMS, "rows_sum_to_one = np.all(np.abs(a.sum(axis=1) - 1.0) <= 1e-6)")),
    "predicate_square_required": _edit((NDIM, "    if a.ndim != 2 or a.shape[0] != a.shape[1]:\n        return False\n")),
    "predicate_total_instead_of_rows": _edit((SUMS, "rows_sum_to_one = abs(a.sum() - a.shape[0]) <= 1e-9")),
    "predicate_batch_accepted": _edit((NDIM, "    if a.ndim < 2:\n        return False\n"),
                                      (SUMS, "rows_sum_to_one = np.all(np.abs(a.sum(axis=-1) - 1.0) <= 1e-9)")),
    "counterexample_permutation": _edit((
        "    return np.array([[1.0, 1.0, 1.0],\n                     [0.0, 0.0, 0.0],\n                     [0.0, 0.0, 0.0]])",
        "    return np.array([[0.0, 1.0, 0.0],\n                     [1.0, 0.0, 0.0],\n                     [0.0, 0.0, 1.0]])")),
    # -- exercise 3 --------------------------------------------------------------------------
    "shift_subtracted": _edit((SOME_ROWS, "v_new[list(rows)] -= shift"), (ALL_ROWS, "v_new -= shift  #")),
    "shift_change_mean_weight": _edit((MOVED_SOME, "moved = a[:, list(rows)].mean(axis=-1)")),
    "shift_change_max_weight": _edit((MOVED_SOME, "moved = a[:, list(rows)].max(axis=-1)")),
    "shift_change_times_positions": _edit((OUTER, "return np.outer(moved, shift) * a.shape[0]")),
    "shift_change_is_new_output": _edit((OUTER, "return np.outer(moved, shift) + a.sum(axis=-1, keepdims=True)")),
    "shift_doubled": _edit((SOME_ROWS, "v_new[list(rows)] += 2 * shift")),
    "shift_rows_sliced_short": _edit((SOME_ROWS, "v_new[min(rows):max(rows)] += shift")),
    "shift_first_listed_row_only": _edit((SOME_ROWS, "v_new[rows[0]] += shift")),
    "shift_change_rows_as_a_range": _edit((MOVED_SOME, "moved = a[:, min(rows):max(rows) + 1].sum(axis=-1)")),
    # -- exercise 4 --------------------------------------------------------------------------
    "facts_divisor_sqrt_t_d_k": _edit((DIVISOR, '"divisor": float(np.sqrt(t * d_k)),')),
    "facts_divisor_floored": _edit((DIVISOR, '"divisor": float(int(np.sqrt(d_k))),')),
    "facts_score_shape_t_d_v": _edit((SCORE_SHAPE, '"score_shape": (t, d_v),')),
    "facts_output_shape_transposed": _edit((OUTPUT_SHAPE, '"output_shape": (d_v, t),')),
    "facts_output_shape_square": _edit((OUTPUT_SHAPE, '"output_shape": (t, t),')),
    "facts_divisor_d_k_squared": _edit((DIVISOR, '"divisor": float(d_k ** 2),')),
    # -- exercise 5 --------------------------------------------------------------------------
    "intervention_new_keys_too": _edit((AFTER, "output_after, weights_after = self_attention_head(x, w_q, w_v_new, w_v_new)")),
    "intervention_after_is_difference": _edit(
        (AFTER, AFTER + "\n    output_after = output_after - self_attention_head(x, w_q, w_k, w_v)[0]")),
    "intervention_sum_of_matrices": _edit((AFTER, "output_after, weights_after = self_attention_head(x, w_q, w_k, w_v + w_v_new)")),
    "intervention_before_uses_new": _edit((BEFORE, "output_before, weights_before = self_attention_head(x, w_q, w_k, w_v_new)")),
}
