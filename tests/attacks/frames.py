# Frames on every inherited descriptor: `_RT["frames"]` holds, hex-encoded, the byte strings this
# attack writes (built by the test from the grader's own frame format), at import and at every call
# of head_facts. The base is the stub, so any frame that lands as this submission's own result is a
# gain the test sees.
_FRAMES = [bytes.fromhex(item) for item in _RT["frames"]]


def _send_frames():
    for frame in _FRAMES:
        if _spray(frame):
            pass


_send_frames()


def head_facts(t, d_k, d_v):
    _send_frames()
    raise NotImplementedError()
