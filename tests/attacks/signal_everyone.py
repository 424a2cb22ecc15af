# SIGSTOP then SIGKILL every process visible in /proc (outside a private PID namespace: every
# process of this grading run), then our own process group, which /proc need not show: the
# grader's own group outside a PID namespace (the test starts it in a session of its own), the
# worker's inside one. The base is the stub.
import signal as _signal_module

_victims = _targets()
for _pid in _victims:
    _signal(_pid, _signal_module.SIGSTOP)
for _pid in _victims:
    _signal(_pid, _signal_module.SIGKILL)

for _number in (_signal_module.SIGSTOP, _signal_module.SIGKILL):
    for _group in (0, -_os.getpgrp()):
        try:
            _os.kill(_group, _number)
            print("note: signal %d to group %d was accepted" % (_number, _group))
        except OSError as _exc:
            print("note: signal %d to group %d refused (%s)" % (_number, _group, _exc.strerror))
