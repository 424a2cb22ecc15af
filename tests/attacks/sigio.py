# Signals by proxy: no kill() at all, but a pipe of our own whose readiness the kernel reports with
# SIGKILL (fcntl F_SETOWN, F_SETSIG, O_ASYNC). `sigio_parent` aims at our parent (the worker);
# `sigio_group` at our whole process group, which outside a PID namespace holds the grader (and
# us: this one ends itself either way). The base is the stub.
import fcntl as _fcntl
import signal as _signal_module
import time as _time

_F_SETOWN, _F_SETSIG = 8, 10


def _by_proxy(owner):
    try:
        read_end, write_end = _os.pipe()
        _fcntl.fcntl(read_end, _F_SETOWN, owner)
        _fcntl.fcntl(read_end, _F_SETSIG, int(_signal_module.SIGKILL))
        _fcntl.fcntl(read_end, _fcntl.F_SETFL, _os.O_ASYNC | _os.O_NONBLOCK)
        _os.write(write_end, b"x")
        _time.sleep(0.2)
        print("note: asked for SIGKILL to %d on a pipe's readiness" % owner)
    except OSError as exc:
        print("note: fcntl refused for %d: %s" % (owner, exc))


_by_proxy(_os.getppid() if _RT["attack"] == "sigio_parent" else -_os.getpgrp())
