# Frames written once the grader hands over head_facts's first call, and then an exit: the worker
# starts a fresh child for the steps after it, one that loads what the worker kept of this source.
# `_RT["frames"]` holds the frames, hex-encoded, as the test built them from the grader's format.
_FRAMES = [bytes.fromhex(item) for item in _RT["frames"]]


def head_facts(t, d_k, d_v):
    for frame in _FRAMES:
        _spray(frame)
    raise SystemExit(0)
