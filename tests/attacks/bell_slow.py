# After bell.py (which finds the bell): a head_facts as slow as the honest `slow` base's, which
# meanwhile rings the bell every millisecond with the alarm ignored, so that the worker wakes and
# reads hundreds of times while no result is there. The result must still count as arriving when it
# is written: the step times out exactly as the honest slow submission's does. The base is `slow`.
import signal as _signal_bs
import time as _time_bs


def head_facts(t, d_k, d_v):
    for _number in (_signal_bs.SIGALRM, _signal_bs.SIGVTALRM, _signal_bs.SIGPROF):
        _signal_bs.signal(_number, _signal_bs.SIG_IGN)
    _signal_bs.setitimer(_signal_bs.ITIMER_REAL, 0)
    end = _time_bs.monotonic() + _RT["slow"]
    while _time_bs.monotonic() < end:
        if _BELL is not None:
            try:
                _os.write(_BELL, b"!")
            except OSError:
                pass
        _time_bs.sleep(0.001)
    return _honest_head_facts(t, d_k, d_v)  # the slow base's name for the reference's head_facts
