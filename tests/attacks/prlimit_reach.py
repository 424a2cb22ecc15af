# How far does prlimit64 reach beyond this run? Reading another process's limits needs the very
# permission that changing them does, so reading those of init (pid 1) proves the reach without
# changing anything. Outside a PID namespace, a submission that may do this may also cut the open
# files, memory or CPU of every process of its user: as root's uid (even without capabilities),
# every root process on the machine. The base is the stub.
import resource as _resource


def _probe_the_machine():
    if _os.getpgrp() == 1:
        print("note: inside a PID namespace, pid 1 is the sandbox's own")
        return
    try:
        _resource.prlimit(1, _resource.RLIMIT_NOFILE)
        _hole("could change the limits of pid 1, outside this run (read them)")
    except OSError as exc:
        print("note: pid 1 out of reach (%s)" % exc.strerror)


_probe_the_machine()
