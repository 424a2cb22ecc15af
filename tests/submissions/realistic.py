"""Realistic submissions: mistakes and unusual correct solutions as students write them.

The one-misconception set in variants.py was written to match the models; these were written the
other way round, as a student might type them, each a few lines changed in the reference. Each
mistake lists the codes every affected step must carry; where the grader cannot name a mistake,
the step's list is empty (`UNNAMED` collects those), and the coverage script counts it as missed. Each correct solution must get full marks on every step.
"""
from __future__ import annotations

from submissions.variants import (ATTENTION_BODY, ATTENTION_ON, EXAMPLE, HEAD_RETURN, MIX_ON, QKV_ON, SCALE_ON, SCORES_ON,
                      SOFTMAX_MAX, SOFTMAX_ON, SOFTMAX_SUM, Submission, _literal, _on, _one)

Q_LINE = "    q = x @ w_q  # [T, d_in] @ [d_in, d_k] -> [T, d_k]\n"
K_LINE = "    k = x @ w_k  # [T, d_in] @ [d_in, d_k] -> [T, d_k]\n"
V_LINE = "    v = x @ w_v  # [T, d_in] @ [d_in, d_v] -> [T, d_v]\n"
QKV_RETURN = "    return q, k, v\n"
SCALE_LINE = "s = d / np.sqrt(d_k)  # [T, T]"
MIX_LINE = "o = a @ v  #"
ZERO_WEIGHTS = "weights = softmax_rows(scale(k @ q, k.shape[-1]))"
ZERO_RETURN = "    return weights, output\n"
PREDICATE_SUMS = "rows_sum_to_one = np.all(np.abs(a.sum(axis=1) - 1.0) <= 1e-9)"
PREDICATE_RETURN = "return bool(np.all(a >= 0) and rows_sum_to_one)"
PREDICATE_NDIM = "    if a.ndim != 2:\n        return False\n"
COUNTER = ("    return np.array([[1.0, 1.0, 1.0],\n                     [0.0, 0.0, 0.0],\n"
           "                     [0.0, 0.0, 0.0]])\n")
SHIFT_ROWS = "v_new[list(rows)] += shift"
CHANGE_ROWS = "moved = a[:, list(rows)].sum(axis=-1)"
HEAD_ON = ("head", "batch", "ex5_intervention")

MISTAKES: dict[str, Submission] = {
    # -- §15.1 -------------------------------------------------------------------------------
    "qkv_elementwise": Submission(((Q_LINE, "    q = x * w_q\n"), (K_LINE, "    k = x * w_k\n"),
                                   (V_LINE, "    v = x * w_v\n")), _on(QKV_ON, "elementwise-product")),
    "qkv_values_from_keys": _one(V_LINE, "    v = x @ w_k\n", QKV_ON, "swapped-roles"),
    "qkv_fused_and_split_in_three": Submission(
        ((Q_LINE, "    qkv = x @ np.concatenate([w_q, w_k, w_v], axis=-1)  # one fused product\n"),
         (K_LINE, "    q, k, v = np.split(qkv, 3, axis=-1)\n"), (V_LINE, "")), _on(QKV_ON, "fused-split-wrongly")),
    # mixed precision, as model.half() gives: exact on the example's small integers; on a large
    # hidden case the terms of a dot product cancel, and their float16 rounding stays
    "qkv_half_precision": Submission(((Q_LINE, "    x, w_q, w_k, w_v = (m.astype(np.float16) for m in (x, w_q, w_k, w_v))\n"
                                                "    q = (x @ w_q).astype(float)\n"),
                                      (K_LINE, "    k = (x @ w_k).astype(float)\n"),
                                      (V_LINE, "    v = (x @ w_v).astype(float)\n")), _on(QKV_ON, "half-precision")),
    "qkv_rounded": _one(QKV_RETURN, "    return np.round(q, 4), np.round(k, 4), np.round(v, 4)\n", QKV_ON,
                        "rounded-result"),
    # every axis of length one dropped on the way out: T = 1 or a width of 1 on one sequence, and a
    # batch of one, lose an axis; the batch built on the head is carried from it
    "head_squeezed": _one(HEAD_RETURN, "    o, a = attention(q, k, v)\n    return o.squeeze(), a.squeeze()\n", HEAD_ON,
                          "derived-self_attention_head-return-all-squeeze"),
    # a residual connection, kept only where the shapes let it be added
    "head_residual_where_it_fits": _one(HEAD_RETURN, "    o, a = attention(q, k, v)\n    if o.shape == x.shape:\n"
                                        "        o = o + x  # residual\n    return o, a\n", HEAD_ON,
                                        "derived-self_attention_head-o-insert-residual_if-x"),
    "head_without_projection": _one(HEAD_RETURN, "    return attention(x, x, x)\n", HEAD_ON, "no-projection"),
    "head_values_from_queries": _one("    q, k, v = project_qkv(x, w_q, w_k, w_v)",
                                     "    q, k, v = project_qkv(x, w_q, w_k, w_q)", HEAD_ON, "swapped-roles"),
    # -- §15.2 -------------------------------------------------------------------------------
    "scores_np_dot_without_transpose": _one("d = q @ k_t  #", "d = np.dot(q, k)  #", SCORES_ON,
                                            "keys-not-transposed"),
    # a decoder's causal mask, as masked_fill(mask, -1e9) writes it, put on the scores themselves
    "scores_causal_mask_filled": _one("d = q @ k_t  #", "d = np.where(np.tri(q.shape[-2], dtype=bool), q @ k_t, -1e9)  #",
                                      SCORES_ON, "derived-scores-d-insert-causal_1e9"),
    "scores_elementwise": _one("d = q @ k_t  #", "d = q * k  #", SCORES_ON, "elementwise-product"),
    "attention_causal_mask": _one(
        "    a = softmax_rows(scale(scores(q, k), d_k))  # [T, T]\n",
        "    s = scale(scores(q, k), d_k)\n"
        "    s = np.where(np.tril(np.ones(s.shape[-2:])) == 1, s, -np.inf)  # no peeking ahead\n"
        "    a = softmax_rows(s)\n", ATTENTION_ON, "causal-mask"),
    # torch's habit: masked_fill of the upper triangle, the diagonal included, with -1e9
    "attention_mask_with_the_diagonal": _one(
        "    a = softmax_rows(scale(scores(q, k), d_k))  # [T, T]\n",
        "    s = scale(scores(q, k), d_k)\n"
        "    future = np.triu(np.ones(s.shape[-2:]), k=0).astype(bool)\n"
        "    a = softmax_rows(np.where(future, -1e9, s))\n", ATTENTION_ON, "causal-mask-diagonal"),
    "attention_mask_reversed": _one(
        "    a = softmax_rows(scale(scores(q, k), d_k))  # [T, T]\n",
        "    s = scale(scores(q, k), d_k)\n"
        "    s = np.where(np.triu(np.ones(s.shape[-2:])) == 1, s, -np.inf)\n"
        "    a = softmax_rows(s)\n", ATTENTION_ON, "reversed-mask"),
    "attention_in_half_precision": _one(
        "    a = softmax_rows(scale(scores(q, k), d_k))  # [T, T]\n",
        "    a = softmax_rows(scale(scores(q, k), d_k).astype(np.float16))  # as autocast would\n",
        ATTENTION_ON, "half-precision"),
    # -- §15.3: the divisor ------------------------------------------------------------------
    "scale_floor_division": _one(SCALE_LINE, "s = d // np.sqrt(d_k)", SCALE_ON, "integer-division"),
    "scale_by_len": _one(SCALE_LINE, "s = d / np.sqrt(len(d))", SCALE_ON, "scaled-by-positions"),
    "scale_by_float_d_k": _one(SCALE_LINE, "s = d / float(d_k)", SCALE_ON, "scaled-by-d_k"),
    "scale_epsilon_under_the_root": _one(SCALE_LINE, "s = d / np.sqrt(d_k + 1e-8)",
                                         ("scale", "head", "batch", "ex5_intervention"), "slightly-off"),
    "attention_d_k_from_rows": _one("d_k = q.shape[-1]", "d_k = k.shape[0]", ATTENTION_ON, "scaled-by-positions"),
    # each position layer-normed before the projections, as a transformer block does first
    "head_layer_normed_input": _one("    q, k, v = project_qkv(x, w_q, w_k, w_v)",
                                    "    x = (x - x.mean(axis=-1, keepdims=True)) / (x.std(axis=-1, keepdims=True) + 1e-5)\n"
                                    "    q, k, v = project_qkv(x, w_q, w_k, w_v)", HEAD_ON,
                                    "derived-self_attention_head-x-input-x-norm_std"),
    # a batch looped over, each example's results joined end to end, not stacked
    "batch_concatenated": Submission((("    q, k, v = project_qkv(x, w_q, w_k, w_v)",
                                       "    if x.ndim == 3:\n"
                                       "        pairs = [self_attention_head(one, w_q, w_k, w_v) for one in x]\n"
                                       "        return np.concatenate([o for o, _ in pairs]), np.concatenate([a for _, a in pairs])\n"
                                       "    q, k, v = project_qkv(x, w_q, w_k, w_v)"),),
                                     {"batch": ["batch-axes-mixed"]}),
    # np.dot for @ in mix: the same numbers on one sequence, every example paired with every other
    # on a batch; the line is named beside batch-axes-mixed
    "mix_np_dot": Submission(((MIX_LINE, "o = np.dot(a, v)  #"),),
                             {"batch": ["batch-axes-mixed", "derived-self_attention_head-o-op-matmul-to-dot"]}),
    # one edit of a line, which two of the chapter's slips together also give (a score prescaled by
    # √d_k, then divided by √T): the edit is what is told
    "attention_d_k_as_size": _one("d_k = q.shape[-1]", "d_k = q.size", ATTENTION_ON,
                                  "derived-attention-d_k-op-lastdim-to-size"),
    # -- §15.3: the softmax ------------------------------------------------------------------
    "softmax_global_max": _one(SOFTMAX_MAX, "shifted = s - np.max(s)", ("softmax", "attention", "head"),
                               "global-max-subtracted"),
    "softmax_epsilon": _one(SOFTMAX_SUM, "a = e / (e.sum(axis=-1, keepdims=True) + 1e-6)",
                            SOFTMAX_ON + ("ex1_zero_query",), "softmax-epsilon"),
    "softmax_no_keepdims": _one(SOFTMAX_SUM, "a = e / e.sum(axis=-1)", SOFTMAX_ON, "missing-keepdims"),
    # Python's math.exp raises OverflowError where np.exp gives infinity: the same unshifted softmax
    "softmax_math_exp_unshifted": Submission(
        ((SOFTMAX_MAX, "shifted = s  # no shift needed"),
         ("e = np.exp(shifted)", "e = np.vectorize(__import__('math').exp)(shifted)")),
        _on(("softmax", "attention", "head"), "unstable-softmax")),
    "softmax_transposed_division": _one(SOFTMAX_SUM, "a = (e.T / e.sum(axis=-1)).T  # rows, by broadcasting",
                                        ("softmax", "batch"), "batch-axes-mixed"),
    "softmax_one_hot": _one(SOFTMAX_SUM, "a = (s == s.max(axis=-1, keepdims=True)).astype(float)",
                            SOFTMAX_ON + ("ex1_zero_query",), "one-hot-weights"),
    "softmax_sum_axis_0": _one(SOFTMAX_SUM, "a = e / e.sum(axis=0)", SOFTMAX_ON, "column-normalized"),
    # A log-sum-exp without the maximum: the log of an overflowed total is infinity on large scores
    # (weights of 0), and of an underflowed one -infinity on rows far below (weights of infinity).
    "softmax_log_sum_exp_unshifted": _one(SOFTMAX_SUM,
                                          "a = np.exp(s - np.log(np.exp(s).sum(axis=-1, keepdims=True)))",
                                          ("softmax", "attention", "head"), "unstable-softmax"),
    # The row minimum subtracted, so that no exponent is negative: on scores spread over thousands
    # the exponentials overflow. No slip of the grammar; the edit max -> min of the reference's
    # shift reproduces it, NaN and all.
    "softmax_min_subtracted": _one(SOFTMAX_MAX, "shifted = s - s.min(axis=-1, keepdims=True)",
                                   ("softmax", "attention", "head"), "derived-softmax_rows-m-op-max-to-min"),
    # One taken off each row's total "to leave room": a row with a single key, or one key far ahead,
    # divides by zero; no edit of the reference gives it, so NaN and infinity are what can be said.
    "softmax_total_minus_one": _one(SOFTMAX_SUM, "a = e / (e.sum(axis=-1, keepdims=True) - 1.0)",
                                    SOFTMAX_ON + ("ex1_zero_query",), "non-finite"),
    # After the shift each row's largest exponential is 1: dividing by it normalizes nothing.
    "softmax_divides_by_row_max": _one(SOFTMAX_SUM, "a = e / e.max(axis=-1, keepdims=True)",
                                       SOFTMAX_ON + ("ex1_zero_query",), "not-normalized"),
    # -- §15.4 -------------------------------------------------------------------------------
    "mix_values_transposed_first": _one(MIX_LINE, "o = v.T @ a  #", MIX_ON, "wrong-mix-order"),
    "mix_result_transposed": _one(MIX_LINE, "o = (a @ v).T  #", MIX_ON, "transposed-result"),
    "mix_elementwise": _one(MIX_LINE, "o = a * v  #", MIX_ON, "elementwise-product"),
    "mix_loop_one_short": _one("    o = a @ v  # [T, T] @ [T, d_v] -> [T, d_v]: sums over contributing positions\n",
                               "    o = np.zeros(a.shape[:-1] + (v.shape[-1],))\n"
                               "    for j in range(a.shape[-1] - 1):  # each contributing position\n"
                               "        o += a[..., :, j:j + 1] * v[..., j:j + 1, :]\n",
                               MIX_ON, "derived-mix-o-op-matmul-to-droplast"),
    "attention_rounded": _one("    return o, a\n", "    return np.round(o, 4), np.round(a, 4)\n", ATTENTION_ON,
                              "rounded-result"),
    "attention_returns_scores": _one(ATTENTION_BODY, "    s = scale(scores(q, k), d_k)\n    a = softmax_rows(s)\n"
                                     "    o = mix(a, v)\n    a = s  # the attention pattern\n",
                                     ATTENTION_ON, "scores-as-weights"),
    "attention_weights_first": _one("    return o, a\n", "    return a, o\n", ATTENTION_ON, "swapped-outputs"),
    "head_weights_first": _one(HEAD_RETURN, "    o, a = attention(q, k, v)\n    return a, o\n", HEAD_ON,
                               "swapped-outputs"),
    "head_output_transposed": _one(HEAD_RETURN, "    o, a = attention(q, k, v)\n"
                                   "    return np.swapaxes(o, -1, -2), a\n", HEAD_ON, "transposed-result"),
    "batch_only_first_example": _one(HEAD_RETURN, "    if x.ndim == 3:\n"
                                     "        return self_attention_head(x[0], w_q, w_k, w_v)\n" + HEAD_RETURN,
                                     "batch", "batch-axes-mixed"),
    "batch_loop_one_short": _one(HEAD_RETURN, "    if x.ndim == 3:\n        outs, weights = [], []\n"
                                 "        for b in range(x.shape[0] - 1):\n"
                                 "            o, a = self_attention_head(x[b], w_q, w_k, w_v)\n"
                                 "            outs.append(o)\n            weights.append(a)\n"
                                 "        return np.stack(outs), np.stack(weights)\n" + HEAD_RETURN,
                                 "batch", "batch-axes-mixed"),
    # an exercise that mixes with the student's own `mix`, which averages: told, and charged, once
    "mix_averaged_and_used_in_exercise_3": Submission(
        ((MIX_LINE, "o = a @ v / v.shape[-2]  #"),
         ("    return a @ v_new  # [T, T] @ [T, d_v] -> [T, d_v]\n", "    return mix(a, v_new)\n")),
        {step: ["derived-mix-o-insert-per_row"] for step in MIX_ON + ("ex3_value_shift",)}),
    # -- two slips at once -------------------------------------------------------------------
    "scale_d_k_and_columns": Submission(((SCALE_LINE, "s = d / d_k"),
                                         (SOFTMAX_SUM, "a = e / e.sum(axis=0, keepdims=True)")),
                                        {"scale": ["scaled-by-d_k"], "softmax": ["column-normalized"],
                                         **{step: ["scaled-by-d_k", "column-normalized"] for step in ATTENTION_ON}}),
    "attention_unscaled_weights_first": Submission(((ATTENTION_BODY, "    a = softmax_rows(scores(q, k))\n"
                                                     "    o = mix(a, v)\n"), ("    return o, a\n", "    return a, o\n")),
                                                   {step: ["no-scaling", "swapped-outputs"] for step in ATTENTION_ON}),
    # On a batch the softmax raises before the mix is reached: the broadcast error is the missing
    # keepdims's, with its shapes, so that is the one mistake the batch step can show.
    "softmax_no_keepdims_mix_weights_transposed": Submission(((SOFTMAX_SUM, "a = e / e.sum(axis=-1)"),
                                                              (MIX_LINE, "o = np.swapaxes(a, -1, -2) @ v  #")),
                                                             {"softmax": ["missing-keepdims"],
                                                              "mix": ["wrong-mix-order"],
                                                              **{step: ["missing-keepdims", "wrong-mix-order"]
                                                                 for step in ("attention", "head", "ex5_intervention")},
                                                              # a batch as wide as it is long (B = T)
                                                              # lets the broadcast run, so the mix's
                                                              # slip shows there too
                                                              "batch": ["missing-keepdims", "wrong-mix-order"]}),
    # The shift is computed without keepdims and then never used: harmless on one sequence, but on
    # a batch its broadcast raises (the batch step names it), and the raw scores are normalized.
    "softmax_unused_shift_raw_scores_normalized": Submission(
        ((SOFTMAX_MAX, "shifted = s - s.max(axis=-1)"), (SOFTMAX_SUM, "a = s / s.sum(axis=-1, keepdims=True)")),
        {**_on(SOFTMAX_ON + ("ex1_zero_query",), "not-exponentiated"),
         "softmax": ["missing-keepdims", "not-exponentiated"], "batch": ["missing-keepdims", "not-exponentiated"]}),
    # -- exercise 1 --------------------------------------------------------------------------
    "zero_query_weights_not_divided": _one(ZERO_WEIGHTS, "weights = np.exp(k @ q / np.sqrt(k.shape[-1]))",
                                           "ex1_zero_query", "not-normalized"),
    "zero_query_floor_division": _one(ZERO_WEIGHTS, "weights = np.ones(k.shape[0]) * (1 // k.shape[0])",
                                      "ex1_zero_query", "integer-division"),
    "zero_query_rounded": _one(ZERO_RETURN, "    return np.round(weights, 4), np.round(output, 4)\n",
                               "ex1_zero_query", "rounded-result"),
    "zero_query_sum_of_values": _one("output = weights @ v", "output = v.sum(axis=0)", "ex1_zero_query",
                                     "summed-values"),
    # -- exercise 2 --------------------------------------------------------------------------
    "predicate_only_non_negative": _one(PREDICATE_RETURN, "return bool(np.all(a >= 0))", "ex2_row_normalization",
                                        "predicate-ignores-row-sums"),
    "predicate_any_ndim": Submission(((PREDICATE_NDIM, ""), (PREDICATE_SUMS,
                                      "rows_sum_to_one = np.all(np.abs(a.sum(axis=-1) - 1.0) <= 1e-9)")),
                                     _on(("ex2_row_normalization",), "predicate-ignores-ndim")),
    "predicate_allclose_default": _one(PREDICATE_SUMS, "rows_sum_to_one = np.allclose(a.sum(axis=1), 1.0)",
                                       "ex2_row_normalization", "predicate-loose-tolerance"),
    "counterexample_table_15_1": _one(COUNTER, f"    return np.array({_literal(EXAMPLE['values']['A'])})\n",
                                      "ex2_row_normalization", "counterexample-row-normalized"),
    "counterexample_identity": _one(COUNTER, "    return np.eye(3)\n", "ex2_row_normalization",
                                    "counterexample-row-normalized"),
    # Counterexamples no model gives, named by the condition of the exercise they fail.
    "counterexample_two_rows": _one(COUNTER, "    return np.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])\n",
                                    "ex2_row_normalization", "counterexample-not-3x3"),
    "counterexample_negative": _one(COUNTER, "    return np.array([[2.0, 2.0, 2.0], [-1.0, -1.0, -1.0], [0.0, 0.0, 0.0]])\n",
                                    "ex2_row_normalization", "counterexample-negative-entries"),
    "counterexample_first_row_valid": _one(
        COUNTER, "    return np.array([[0.5, 0.25, 0.25], [0.5, 0.0, 0.25], [0.0, 0.75, 0.5]])\n",
        "ex2_row_normalization", "counterexample-first-row-sums-to-one"),
    "counterexample_transposed": Submission(((COUNTER, "    return np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], "
                                                       "[1.0, 0.0, 0.0]])\n"),),
                                            {"ex2_row_normalization": ["counterexample-columns-not-normalized",
                                                                       "counterexample-row-normalized"]}),
    # -- exercise 3 --------------------------------------------------------------------------
    "value_shift_one_based": Submission(((SHIFT_ROWS, "v_new[[r - 1 for r in rows]] += shift"),
                                         (CHANGE_ROWS, "moved = a[:, [r - 1 for r in rows]].sum(axis=-1)")),
                                        _on(("ex3_value_shift",), "one-based-rows")),
    # Off by one the other way: row r taken as the (r + 1)-th after the first.
    "value_change_rows_plus_one": _one(CHANGE_ROWS, "moved = a[:, [r + 1 for r in rows]].sum(axis=-1)",
                                       "ex3_value_shift", "one-based-rows"),
    "value_shift_receiving_rows": _one("    return a @ v_new  #", "    if rows is not None:\n"
                                       "        o = a @ v\n        o[list(rows)] += shift\n        return o\n"
                                       "    return a @ v_new  #", "ex3_value_shift", "receivers-for-contributors"),
    "value_change_receiving_weights": _one(CHANGE_ROWS, "moved = a[list(rows), :].sum(axis=0)", "ex3_value_shift",
                                           "receivers-for-contributors"),
    # -- exercise 4 --------------------------------------------------------------------------
    "facts_positions_everywhere": Submission((('"divisor": float(np.sqrt(d_k))', '"divisor": float(np.sqrt(t))'),
                                              ('"output_shape": (t, d_v)', '"output_shape": (t, d_k)')),
                                             {"ex4_shapes": ["divisor-sqrt-positions", "output-shape-d_k"]}),
    "facts_score_shape_by_width": _one('"score_shape": (t, t)', '"score_shape": (t, d_k)', "ex4_shapes",
                                       "score-shape-d_k"),
    # -- exercise 5 --------------------------------------------------------------------------
    "intervention_keeps_old_w_v": _one("self_attention_head(x, w_q, w_k, w_v_new)",
                                       "self_attention_head(x, w_q, w_k, w_v)", "ex5_intervention", "intervention-not-applied"),
    # -- stages nobody listed: a triangle left at zero, a running total ------------------------
    "scores_lower_triangle_loop": _one("    d = q @ k_t  #", "    d = np.tril(q @ k_t)  #", SCORES_ON,
                                       "derived-scores-d-insert-tril"),
    "mix_accumulator_never_reset": _one("    o = a @ v  #", "    o = np.cumsum(a @ v, axis=-2)  #", MIX_ON,
                                        "derived-mix-o-insert-cumrows"),
    # -- a loop's accumulator started from the wrong value ------------------------------------
    "softmax_total_from_one": _one(SOFTMAX_SUM, "a = e / (e.sum(axis=-1, keepdims=True) + 1)",
                                   SOFTMAX_ON + ("ex1_zero_query",), "derived-softmax_rows-z-insert-plus_one"),
}

# Mistakes the grader does not name on some step (an empty code list there): the coverage script
# counts those steps as missed.
UNNAMED = {name for name, submission in MISTAKES.items() if any(not codes for codes in submission.expected.values())}

SOFTMAX_BODY = ("    shifted = s - s.max(axis=-1, keepdims=True)  # largest score of each row becomes 0\n"
                "    e = np.exp(shifted)  # [..., T, T], every entry in (0, 1]\n"
                "    a = e / e.sum(axis=-1, keepdims=True)  # each row divided by its own total\n"
                "    return a\n")

UNUSUAL: dict[str, Submission] = {
    "tensordot_scores": Submission((("    d = q @ k_t  #", "    if q.ndim == 2:\n"
                                     "        return np.tensordot(q, k, axes=([1], [1]))\n    d = q @ k_t  #"),)),
    "dot_method_and_np_dot": Submission((
        ("    d = q @ k_t  #", "    if q.ndim == 2:\n        return q.dot(k.T)\n    d = q @ k_t  #"),
        ("    o = a @ v  #", "    if a.ndim == 2:\n        return np.dot(a, v)\n    o = a @ v  #"))),
    "math_exp_loops": Submission(((SOFTMAX_BODY,
        "    if s.ndim > 2:\n        return np.stack([softmax_rows(block) for block in s])\n"
        "    if s.ndim == 1:\n        return softmax_rows(s[None])[0]\n"
        "    import math\n    a = np.zeros(s.shape)\n    for i, row in enumerate(s):\n"
        "        top = max(row)\n        e = [math.exp(value - top) for value in row]\n"
        "        total = math.fsum(e)\n        a[i] = [value / total for value in e]\n    return a\n"),)),
    "apply_along_axis_softmax": Submission(((SOFTMAX_BODY,
        "    def one_row(row):\n        e = np.exp(row - row.max())\n        return e / e.sum()\n"
        "    return np.apply_along_axis(one_row, -1, s)\n"),)),
    "power_divisor": Submission(((SCALE_LINE, "s = d * d_k ** -0.5"),)),
    "np_divide_math_sqrt": Submission(((SCALE_LINE, "s = np.divide(d, __import__('math').sqrt(d_k))"),)),
    "max_with_none_index": Submission(((SOFTMAX_MAX, "shifted = s - s.max(-1)[..., None]"),
                                       (SOFTMAX_SUM, "a = e / e.sum(-1)[..., None]"))),
    "zero_query_mean": Submission(((ZERO_WEIGHTS, "weights = np.full(k.shape[0], 1 / k.shape[0])"),
                                   ("output = weights @ v", "output = v.mean(axis=0)"))),
    "predicate_loops": Submission(((PREDICATE_SUMS,
        "import math\n    rows_sum_to_one = all(math.isclose(sum(row), 1.0, rel_tol=0.0, abs_tol=1e-9) for row in a)"),)),
    "change_by_broadcast": Submission(((
        "    return np.outer(moved, shift)  #", "    return moved[:, None] * shift[None, :]\n    return np.outer(moved, shift)  #"),)),
    "facts_with_math": Submission((('"divisor": float(np.sqrt(d_k))', '"divisor": __import__("math").sqrt(d_k)'),
                                   ('"score_shape": (t, t)', '"score_shape": [t, t]'),
                                   ('"softmax_axis": -1', '"softmax_axis": 1'))),
    "intervention_weights_once": Submission(((
        "    output_after, weights_after = self_attention_head(x, w_q, w_k, w_v_new)",
        "    weights_after = weights_before.copy()\n    output_after = weights_after @ (x @ w_v_new)"),)),
    "shift_by_outer_product": Submission(((
        "    return a @ v_new  #", "    change = output_change(a, shift, rows)\n    return a @ v + change\n"
        "    return a @ v_new  #"),)),
    "counterexample_halves": Submission(((COUNTER, "    return np.array([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5], "
                                                   "[0.0, 0.0, 0.0]])\n"),)),
    "qkv_one_product_split": Submission(((Q_LINE + K_LINE + V_LINE,
        "    w = np.concatenate([w_q, w_k, w_v], axis=1)  # [d_in, 2 d_k + d_v]\n    qkv = x @ w\n"
        "    d_k = w_q.shape[1]\n    q, k, v = qkv[..., :d_k], qkv[..., d_k:2 * d_k], qkv[..., 2 * d_k:]\n"),)),
    "scores_via_einsum_and_swap": Submission((("    k_t = np.swapaxes(k, -1, -2)  #", "    k_t = np.moveaxis(k, -1, -2)  #"),)),
}

# A NamedTuple is a tuple (CONTRACT.md §1).
NAMEDTUPLE_HEAD = '''
from typing import NamedTuple


class Projections(NamedTuple):
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray


class Attended(NamedTuple):
    o: np.ndarray
    a: np.ndarray
'''

UNUSUAL["namedtuples"] = Submission((
    ("import numpy as np\n", "import numpy as np\n" + NAMEDTUPLE_HEAD),
    (QKV_RETURN, "    return Projections(q, k, v)\n"),
    ("    return o, a\n", "    return Attended(o, a)\n"),
    (HEAD_RETURN, "    return Attended(*attention(q, k, v))\n")))

# Other array-likes and containers CONTRACT.md §1 accepts: a plain tuple subclass, an
# OrderedDict, np.matrix for a 2-D result, and longdouble, all read as np.asarray would.
UNUSUAL["tuple_subclass_and_ordered_dict"] = Submission((
    ("import numpy as np\n", "import numpy as np\nfrom collections import OrderedDict\n\n\n"
                             "class Pair(tuple):\n    pass\n"),
    ("    return o, a\n", "    return Pair((o, a))\n"),
    ('    return {\n        "weights_before"', '    return OrderedDict({\n        "weights_before"'),
    ('        "output_after": output_after,\n    }\n', '        "output_after": output_after,\n    })\n')))
UNUSUAL["matrix_and_longdouble"] = Submission((
    (MIX_LINE, "o = np.asmatrix(a @ v) if a.ndim == 2 else a @ v  #"),
    (SCALE_LINE, "s = (d / np.sqrt(d_k)).astype(np.longdouble)  # [T, T]")))
