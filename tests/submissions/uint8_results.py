# Every function returns arrays of 8 MiB (uint8, or bool): small on the wire, eight times that as float64.
import numpy as np
ANSWER_1 = ANSWER_2 = ANSWER_3 = ANSWER_4 = ANSWER_5 = "x"
def _big(parts=1):
    return np.ones(((8 << 20) - 65536) // parts, dtype=np.uint8)
def project_qkv(x, w_q, w_k, w_v): return (_big(3), _big(3), _big(3))
def scores(q, k): return _big()
def scale(d, d_k): return _big()
def softmax_rows(s): return _big()
def mix(a, v): return _big()
def attention(q, k, v): return (_big(2), _big(2))
def self_attention_head(x, w_q, w_k, w_v): return (_big(2), _big(2))
def zero_query_mixture(k, v): return (_big(2), _big(2))
def is_attention_weights(a): return True
def column_normalized_counterexample(): return np.ones((8 << 20) - 65536, dtype=bool)
def shifted_output(a, v, shift, rows=None): return _big()
def output_change(a, shift, rows=None): return _big()
def head_facts(t, d_k, d_v): return {"divisor": 1.0, "score_shape": (1,), "output_shape": (1,), "softmax_axis": 1}
def value_intervention(x, w_q, w_k, w_v, w_v_new): return {k: _big(4) for k in ("weights_before", "weights_after", "output_before", "output_after")}
