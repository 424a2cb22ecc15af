# Close every descriptor (the result pipe among them) at head_facts's first call, ignore the
# alarm, and sleep: the worker sees the pipe closed and asks how the process ended, which it has
# not. Sleeps 90 s at most. The base is the stub.
import signal as _signal
import time as _time


def head_facts(t, d_k, d_v):
    _signal.signal(_signal.SIGALRM, _signal.SIG_IGN)
    _os.closerange(3, 1 << 16)
    _time.sleep(90)
    raise NotImplementedError()
