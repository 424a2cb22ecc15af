# At import, a forged `imported` frame and a result for every planned call, on every descriptor
# (the result pipe among them), then sleep with the alarm ignored, never reading a call: the
# worker hands over step after step into a call pipe no one drains. `_RT["frames"]` holds the
# frames, hex-encoded, built by the test from the grader's own frame format. Sleeps 90 s at most.
# The base is the stub: every forged result is None, worth nothing.
import signal as _signal
import time as _time

_signal.signal(_signal.SIGALRM, _signal.SIG_IGN)
for _frame_bytes in [bytes.fromhex(item) for item in _RT["frames"]]:
    _spray(_frame_bytes)
_time.sleep(90)
