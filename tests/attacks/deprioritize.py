# Slow the classmates down instead of signalling anyone: give our process group nice 19 and the
# group's leader SCHED_IDLE and a single CPU. Under bubblewrap the group holds the worker (every
# later submission is forked from it and inherits all that); outside a PID namespace it is the
# grader's. On a busy machine, a classmate's honest calls would then miss their time limit.
# A group-wide renice that fails for one member (a root-owned init) still applies to the others,
# so the effect is read back from our parent, who is in the group. Only this run's own process
# group is touched, never every process of the user. The base is the stub.
def _deprioritize():
    group, parent = _os.getpgrp(), _os.getppid()
    if group == _os.getpid():
        print("note: we lead our own process group; nothing above us to reach")
        return
    before = _os.getpriority(_os.PRIO_PROCESS, parent)
    try:
        _os.setpriority(_os.PRIO_PGRP, group, 19)
    except OSError as exc:
        print("note: nice 19 for process group %d: %s" % (group, exc.strerror))
    after = _os.getpriority(_os.PRIO_PROCESS, parent)
    if after != before:
        _hole("reniced our process group %d (the parent went from nice %d to %d)" % (group, before, after))
    for what, attempt in (
            ("SCHED_IDLE", lambda: _os.sched_setscheduler(group, _os.SCHED_IDLE, _os.sched_param(0))),
            ("one CPU", lambda: _os.sched_setaffinity(group, {min(_os.sched_getaffinity(0))}))):
        try:
            attempt()
            _hole("set %s for the group's leader %d" % (what, group))
        except (OSError, AttributeError) as exc:
            print("note: %s for %d refused (%s)" % (what, group, exc))


_deprioritize()
