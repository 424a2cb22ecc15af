# Change another process's resource limits (prlimit64 needs no signal, no ptrace and no /proc):
# lower the open-file limit of our parent, of the worker and of the grader, so the worker cannot
# make the pipe for a classmate's run and the grader cannot write results. Targets: our parent;
# inside a private PID namespace (our process group is 1 there) the few low pids; outside one, our
# process group's leader, which is this run's grader. Never anything else. The base is the stub.
import resource as _resource


def _lower_limits():
    group, parent = _os.getpgrp(), _os.getppid()
    targets = [parent]
    if group == 1:
        targets += [pid for pid in range(2, 32) if pid not in (parent, _os.getpid())]
    elif group != _os.getpid():
        targets.append(group)
    for pid in targets:
        try:
            _resource.prlimit(pid, _resource.RLIMIT_NOFILE, (3, 3))
            _hole("lowered the open-file limit of pid %d" % pid)
        except (OSError, ValueError) as exc:
            if not isinstance(exc, ProcessLookupError):
                print("note: prlimit for %d refused (%s)" % (pid, exc))


_lower_limits()
