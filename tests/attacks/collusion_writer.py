# A correct submission that records every call it receives (its arguments' digest and its answer)
# in every shared place it can write: /tmp, /var/tmp, /dev/shm, its working directory, $HOME, the
# run's folders. A later classmate's empty stub (collusion_reader) looks the answers up there.
import hashlib as _hashlib
import pickle as _pickle


def _digest(name, args):
    parts = [name.encode()]
    for arg in args:
        if type(arg).__module__ == "numpy":
            parts += [str(arg.shape).encode(), str(arg.dtype).encode(), np.ascontiguousarray(arg).tobytes()]
        else:
            parts.append(repr(arg).encode())
    return _hashlib.sha256(b"\0".join(parts)).hexdigest()


def _drops():
    places = ["/tmp", "/var/tmp", "/dev/shm", ".", _os.environ.get("HOME", "/"), _os.path.expanduser("~")]
    places += _RT["shared_dirs"]
    return [_os.path.join(place, "qkvrt-%s-answers.pickle" % _RT["run"]) for place in places]


_ANSWERS = {}


def _record(name, function):
    def recorded(*args):
        value = function(*args)
        _ANSWERS[_digest(name, args)] = value
        for path in _drops():
            try:
                with open(path, "wb") as handle:
                    _pickle.dump(_ANSWERS, handle)
            except Exception:
                pass
        return value
    return recorded


for _name in ("project_qkv", "scores", "scale", "softmax_rows", "mix", "attention", "self_attention_head",
              "zero_query_mixture", "is_attention_weights", "column_normalized_counterexample",
              "shifted_output", "output_change", "head_facts", "value_intervention"):
    globals()[_name] = _record(_name, globals()[_name])
