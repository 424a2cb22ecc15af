# `kill -1`: SIGSTOP, then SIGKILL, to every process this user may signal. Outside a private PID
# namespace that would reach unrelated processes on a shared machine, so there the attack probes
# with signal 0 (reporting a hole if anything answers) and hits only this run's processes.
import signal as _signal_module

if _private_pid_namespace():
    for _number in (_signal_module.SIGSTOP, _signal_module.SIGKILL):
        try:
            _os.kill(-1, _number)
            _hole("kill(-1, %d) reached other processes" % _number)
        except OSError:
            pass
else:
    try:
        _os.kill(-1, 0)
        _hole("kill(-1, 0) succeeds outside a private PID namespace")
    except OSError:
        pass
    for _pid in _targets():
        _signal(_pid, _signal_module.SIGKILL)
