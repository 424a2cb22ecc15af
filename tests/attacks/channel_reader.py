# The other end of channel_writer's channel, graded at the same time by another worker: for a few
# seconds during its import it looks for the writer's locks on the shared numpy file (flock, a
# POSIX record lock, an open file description's lock), for that file's pages leaving the page cache
# (mincore, cachestat, preadv2 with RWF_NOWAIT), and for signals the writer keeps queued (its own
# limit lowered to just above the count it starts from: a signal that loses its details says the
# user's count went past it), and then asks the processes around it for their scheduling state
# (which a writer sets for itself: a policy, a nice value, a set of CPUs). Whatever it sees is a hole; a probe refused prints `refused: WAY
# (why)`. The base is the stub.
import ctypes as _ctypes
import fcntl as _fcntl
import mmap as _mmap
import resource as _resource
import signal as _signal
import struct as _struct
import time as _time

_LIBC = _ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = _ctypes.c_long
_LIBC.mmap.restype = _ctypes.c_void_p
_SHARED = _os.path.join(_os.path.dirname(np.__file__), "_core", "fromnumeric.py")
_LOCK = _struct.Struct("hhxxxxqqixxxx")
_PAGE = _mmap.PAGESIZE
_REFUSED = set()


def _refused(way, exc):
    if way not in _REFUSED:
        _REFUSED.add(way)
        print("refused: %s (%s)" % (way, getattr(exc, "strerror", None) or exc))


def _locks(fd, second):
    try:
        _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
        _fcntl.flock(fd, _fcntl.LOCK_UN)
    except BlockingIOError:
        _hole("saw a classmate's flock")
    except OSError as exc:
        _refused("flock", exc)
    for way, command, target in (("fcntl F_GETLK", _fcntl.F_GETLK, fd), ("fcntl F_OFD_GETLK", 36, second)):
        try:
            found = _LOCK.unpack(_fcntl.fcntl(target, command, _LOCK.pack(_fcntl.F_WRLCK, 0, 0, 0, 0)))
        except OSError as exc:
            _refused(way, exc)
            continue
        if found[0] != _fcntl.F_UNLCK:
            _hole("%s saw a classmate's lock (pid %d)" % (way, found[4]))


def _mincore(address, size):
    pages = (size + _PAGE - 1) // _PAGE
    vector = (_ctypes.c_ubyte * pages)()
    if _LIBC.mincore(_ctypes.c_void_p(address), _ctypes.c_size_t(size), vector) != 0:
        errno = _ctypes.get_errno()
        raise OSError(errno, _os.strerror(errno))
    return sum(byte & 1 for byte in vector), pages


def _cachestat(fd, size):
    ranges = (_ctypes.c_uint64 * 2)(0, size)
    stat = (_ctypes.c_uint64 * 5)()  # cached, dirty, writeback, evicted, recently evicted
    if _LIBC.syscall(_ctypes.c_long(451), fd, _ctypes.byref(ranges), _ctypes.byref(stat), 0) != 0:
        errno = _ctypes.get_errno()
        raise OSError(errno, _os.strerror(errno))
    return stat[0], (size + _PAGE - 1) // _PAGE


def _nowait(fd, size):
    buffer = bytearray(_PAGE)
    resident = 0
    for offset in range(0, size, _PAGE):
        try:
            _os.preadv(fd, [buffer], offset, _os.RWF_NOWAIT)
            resident += 1
        except BlockingIOError:
            pass
    return resident, (size + _PAGE - 1) // _PAGE


def _page_cache(fd, address, size):
    _os.pread(fd, size, 0)  # every page in the cache, as far as this process can tell
    _time.sleep(0.02)
    for way, probe in (("mincore", lambda: _mincore(address, size)), ("cachestat", lambda: _cachestat(fd, size)),
                       ("preadv2 RWF_NOWAIT", lambda: _nowait(fd, size))):
        if way in _REFUSED:
            continue
        try:
            resident, pages = probe()
        except OSError as exc:
            _refused(way, exc)
            continue
        if resident < pages:
            _hole("%s saw a classmate evict %d of %d pages" % (way, pages - resident, pages))


def _signals_counted():
    """The user's count of queued signals has gone past where it was: signals of another process."""
    number = _signal.SIGRTMIN + 1
    _signal.pthread_sigmask(_signal.SIG_BLOCK, {number})
    soft, hard = _resource.getrlimit(_resource.RLIMIT_SIGPENDING)
    try:
        _resource.setrlimit(_resource.RLIMIT_SIGPENDING, (min(hard, 1000), hard))
    except (OSError, ValueError) as exc:
        _refused("a lower RLIMIT_SIGPENDING", exc)
        return
    if hard < 1000:
        _refused("queued signals", "a limit of %d" % hard)
        return
    _os.kill(_os.getpid(), number)
    info = _signal.sigtimedwait({number}, 0)
    if info is not None and info.si_pid == 0:
        _hole("a signal lost its details: its user holds 1000 queued signals")


_SCHEDULING = (("sched_getscheduler", lambda pid: _os.sched_getscheduler(pid)),
               ("sched_getparam", lambda pid: _os.sched_getparam(pid)),
               ("sched_getaffinity", lambda pid: _os.sched_getaffinity(pid)),
               ("getpriority", lambda pid: _os.getpriority(_os.PRIO_PROCESS, pid)),
               ("getpgid", lambda pid: _os.getpgid(pid)),
               ("getsid", lambda pid: _os.getsid(pid)))


def _scheduling(span=400):
    """Another process's scheduling state (its policy, priority, nice, CPUs, group), which a
    writer may set for itself: every process near this one's id is asked, the writer among them."""
    me = _os.getpid()
    for pid in range(max(1, me - span), me + span):
        if pid == me:
            continue
        for way, ask in _SCHEDULING:
            try:
                ask(pid)
            except ProcessLookupError:
                break  # no such process
            except OSError as exc:
                _refused(way, exc)
                continue
            _hole("%s read the scheduling state of process %d" % (way, pid))


def _read_channel(seconds=3.0):
    fd = _os.open(_SHARED, _os.O_RDONLY)
    second = _os.open(_SHARED, _os.O_RDONLY)
    size = _os.fstat(fd).st_size
    address = _LIBC.mmap(None, _ctypes.c_size_t(size), 1, 1, fd, _ctypes.c_long(0))  # PROT_READ, MAP_SHARED
    deadline = _time.monotonic() + seconds
    while _time.monotonic() < deadline and len(_HOLES) < 4:
        _locks(fd, second)
        _page_cache(fd, address, size)
        if "queued signals" not in _REFUSED and "a lower RLIMIT_SIGPENDING" not in _REFUSED:
            _signals_counted()
    _scheduling()
    _LIBC.munmap(_ctypes.c_void_p(address), _ctypes.c_size_t(size))
    _os.close(fd)
    _os.close(second)


_read_channel()
