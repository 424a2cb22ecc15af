# Frames written only once the grader hands over head_facts's first call, so that a worker which
# passes the expected call's result on by its first bytes sees exactly those bytes first.
# `_RT["frames"]` holds them, hex-encoded, as the test built them from the grader's frame format.
_FRAMES = [bytes.fromhex(item) for item in _RT["frames"]]
_SENT = []


def head_facts(t, d_k, d_v):
    if not _SENT:
        _SENT.append(True)
        for frame in _FRAMES:
            _spray(frame)
    raise NotImplementedError()
