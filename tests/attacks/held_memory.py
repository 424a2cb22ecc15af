# Hold memory that neither the address-space limit nor the worker's listing of the scratch folder
# counts: anonymous files (memfd_create, memfd_secret), unnamed files (O_TMPFILE through open and
# openat2), files unlinked or renamed over while still open, and pipes grown past their default
# size. Each way tries to hold more than the scratch folder's quota (64 MiB), 16 MiB a file (the
# file size limit), and reports a hole for what it held; a way refused prints `refused: WAY (why)`,
# as does an unlink answered but not done, which leaves the file in the listing.
# Everything is let go before the import ends. The base is the reference.
import ctypes as _ctypes

_LIBC = _ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = _ctypes.c_long
_MIB = b"\1" * (1 << 20)
_HELD = []


def _refused(way, exc):
    print("refused: %s (%s)" % (way, getattr(exc, "strerror", None) or exc))


def _fill(fd, mib=16):
    for _ in range(mib):
        _os.write(fd, _MIB)
    return mib


def _hold(way, opener, files=5):
    """Open `files` descriptors with `opener` (which returns one), 16 MiB each; a hole if they hold
    more than the quota."""
    held = 0
    for index in range(files):
        try:
            fd = opener(index)
            _HELD.append(fd)
            held += _fill(fd)
        except OSError as exc:
            _refused(way, exc)
            break
    if held > 64:
        _hole("held %d MiB outside the scratch folder's listing through %s" % (held, way))
    _let_go()


def _let_go():
    for fd in _HELD:
        _os.close(fd)
    del _HELD[:]


def _syscall_fd(number, *args):
    fd = _LIBC.syscall(_ctypes.c_long(number), *args)
    if fd < 0:
        errno = _ctypes.get_errno()
        raise OSError(errno, _os.strerror(errno))
    return fd


def _unlinked(index):
    name = "qkvrt-%s-unlinked-%d" % (_RT["run"], index)
    fd = _os.open(name, _os.O_RDWR | _os.O_CREAT, 0o600)
    try:
        _os.unlink(name)
    except OSError:
        _os.close(fd)
        raise
    if _os.path.exists(name):  # removal answered, and not done: still counted
        _os.close(fd)
        raise OSError(0, "the name stayed")
    return fd


def _renamed_over(index):
    name, other = "qkvrt-%s-renamed-%d" % (_RT["run"], index), "qkvrt-%s-other-%d" % (_RT["run"], index)
    fd = _os.open(name, _os.O_RDWR | _os.O_CREAT, 0o600)
    _os.close(_os.open(other, _os.O_WRONLY | _os.O_CREAT, 0o600))
    try:
        _os.rename(other, name)  # the open file loses its last name
    except OSError:
        _os.close(fd)
        raise
    return fd


def _openat2_tmpfile(index):
    how = (_ctypes.c_uint64 * 3)(_os.O_TMPFILE | _os.O_RDWR, 0o600, 0)
    return _syscall_fd(437, -100, b".", _ctypes.byref(how), _ctypes.c_size_t(24))  # AT_FDCWD


def _held_memory():
    machine = _os.uname().machine
    _hold("memfd_create", lambda index: _os.memfd_create("qkvrt"))
    _hold("open with O_TMPFILE", lambda index: _os.open(".", _os.O_TMPFILE | _os.O_RDWR, 0o600))
    if machine == "x86_64":
        _hold("openat2 with O_TMPFILE", _openat2_tmpfile)
    _hold("unlink while open", _unlinked)
    _hold("rename over an open file", _renamed_over)
    if machine in ("x86_64", "aarch64"):
        try:  # memfd_secret: memory no other process, nor the kernel's accounting of files, sees
            fd = _syscall_fd(447, 0)
            _os.close(fd)
            _hole("memfd_secret gave a descriptor")
        except OSError as exc:
            _refused("memfd_secret", exc)
    import fcntl

    held = 0
    for _ in range(24):  # pipes grown to 1 MiB each: kernel memory outside both counts
        read_end, write_end = _os.pipe()
        _HELD.extend((read_end, write_end))
        try:
            size = fcntl.fcntl(write_end, 1031, 1 << 20)  # F_SETPIPE_SZ
        except OSError as exc:
            _refused("F_SETPIPE_SZ", exc)
            break
        _os.set_blocking(write_end, False)
        try:
            while True:
                held += _os.write(write_end, _MIB[: size])
        except BlockingIOError:
            pass
    if held > 16 << 20:
        _hole("held %d MiB in pipes grown with F_SETPIPE_SZ" % (held >> 20))
    _let_go()


_held_memory()
