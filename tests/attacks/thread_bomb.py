# Threads are allowed, processes are not; but every thread is a task with a pid of its own, and
# pids are shared by the whole machine. Start up to 2000 small-stacked threads that sleep; no
# sandbox that counts tasks should let a submission hold more than a few hundred. Bounded so that
# a shared machine keeps its pids. The base is the stub.
import threading as _threading
import time as _time


def _bomb():
    _threading.stack_size(64 * 1024)
    started = 0
    for _ in range(2000):
        try:
            _threading.Thread(target=_time.sleep, args=(5,), daemon=True).start()
        except (RuntimeError, MemoryError) as exc:
            print("note: thread %d refused (%s)" % (started + 1, exc))
            break
        started += 1
    if started > 512:
        _hole("started %d threads, each a task of its own" % started)


_bomb()
