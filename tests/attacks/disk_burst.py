# Fill the scratch folder past its quota (64 MiB) in bursts shorter than the worker's disk poll:
# every call allocates 16 MiB files (the file size limit) for at most 25 ms, with fallocate or,
# where that is refused, plain writes, then returns, so the next frame always arrives before the
# worker would look at the folder. In the
# landlock modes the folder is on the instructor's disk. Bounded at 2 GiB in all, to keep a
# shared machine usable. head_facts (exercise 4) reports the total if it passed four times the
# quota (a quota checked from outside may be overshot by what one burst writes; not by that
# much). The base is the stub.
import time as _time

_FILLED = [0, 0]  # bytes, files
_CHUNK = b"\0" * (1 << 20)


def _allocate(fd):
    try:
        _os.posix_fallocate(fd, 0, 16 << 20)
    except OSError:
        for _ in range(16):
            _os.write(fd, _CHUNK)


def _burst():
    deadline = _time.monotonic() + 0.025
    while _FILLED[0] < (2 << 30) and _time.monotonic() < deadline:
        path = "qkvrt-%s-fill-%d" % (_RT["run"], _FILLED[1])
        try:
            fd = _os.open(path, _os.O_WRONLY | _os.O_CREAT, 0o600)
            try:
                _allocate(fd)
            finally:
                _os.close(fd)
        except OSError as exc:
            print("note: allocation stopped: %s" % exc)
            return
        _FILLED[0] += 16 << 20
        _FILLED[1] += 1


def _filling(name):
    def filled(*args):
        _burst()
        if name == "head_facts" and _FILLED[0] > (256 << 20):
            raise RuntimeError("QKVRT-HOLE[disk_burst]: kept %d MiB in %d files past a 64 MiB quota"
                               % (_FILLED[0] >> 20, _FILLED[1]))
        raise NotImplementedError()
    return filled


for _name in _FUNCTIONS:
    globals()[_name] = _filling(_name)
