# A correct submission whose head_facts sleeps past the call limit after ignoring, blocking and
# disarming every timer signal it knows. It must not score more than the same function without
# the tricks (the `slow` baseline). `_RT["slow"]` is the sleep in seconds.
import signal as _signal_module
import time as _time


def _deafen():
    for _name in ("SIGALRM", "SIGVTALRM", "SIGPROF", "SIGXCPU", "SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1"):
        _number = getattr(_signal_module, _name, None)
        if _number is None:
            continue
        try:
            _signal_module.signal(_number, _signal_module.SIG_IGN)
        except (OSError, ValueError, RuntimeError):
            pass
        try:
            _signal_module.pthread_sigmask(_signal_module.SIG_BLOCK, {_number})
        except (OSError, ValueError):
            pass
    for _timer in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF"):
        try:
            _signal_module.setitimer(getattr(_signal_module, _timer), 0)
        except (OSError, AttributeError):
            pass


_deafen()
_honest_head_facts = head_facts


def head_facts(t, d_k, d_v):
    _deafen()
    _time.sleep(_RT["slow"])
    return _honest_head_facts(t, d_k, d_v)
