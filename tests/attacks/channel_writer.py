# One end of a channel between two classmates graded at once, by different workers: for a few
# seconds during its import, this one signals through state the kernel shares between them. It
# takes advisory locks (flock, a POSIX record lock, an open file description's lock) on a numpy
# file both can read, evicts that file's pages from the page cache (posix_fadvise, madvise), loads
# another's (readahead), and queues real-time signals to itself, which count against every process
# of its user. channel_reader, graded beside it, looks for each. Every call that succeeds is a
# hole here; a refused one prints `refused: WAY (why)`. The base is the reference.
import ctypes as _ctypes
import fcntl as _fcntl
import mmap as _mmap
import signal as _signal
import struct as _struct
import time as _time

_LIBC = _ctypes.CDLL(None, use_errno=True)
_SHARED = _os.path.join(_os.path.dirname(np.__file__), "_core", "fromnumeric.py")
"""A file every classmate's sandbox can read, and no grading step does: numpy loaded its bytecode."""
_LOCK = _struct.Struct("hhxxxxqqixxxx")  # struct flock: type, whence, start, length, pid
_SIGNALS = 2000


def _try(way, call):
    try:
        call()
    except (OSError, ValueError) as exc:
        print("refused: %s (%s)" % (way, getattr(exc, "strerror", None) or exc))
        return False
    _hole("%s on a file classmates read succeeded" % way)
    return True


def _readahead(fd):
    if _LIBC.readahead(fd, _ctypes.c_int64(0), _ctypes.c_size_t(1 << 20)) != 0:
        errno = _ctypes.get_errno()
        raise OSError(errno, _os.strerror(errno))


def _queue_signals():
    """Real-time signals to itself, blocked: each one queued counts against its user's limit."""
    _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGRTMIN})
    for _ in range(_SIGNALS):
        _os.kill(_os.getpid(), _signal.SIGRTMIN)


def _signals_kept():
    """How many of them were queued with their details (each one counted), taking them back."""
    kept = 0
    while True:
        info = _signal.sigtimedwait({_signal.SIGRTMIN}, 0)
        if info is None:
            return kept
        kept += info.si_pid == _os.getpid()


def _write_channel(seconds=3.5):
    fd = _os.open(_SHARED, _os.O_RDONLY)
    second = _os.open(_SHARED, _os.O_RDONLY)
    _try("flock", lambda: _fcntl.flock(fd, _fcntl.LOCK_SH | _fcntl.LOCK_NB))
    _try("fcntl F_SETLK read lock", lambda: _fcntl.fcntl(fd, _fcntl.F_SETLK, _LOCK.pack(_fcntl.F_RDLCK, 0, 0, 0, 0)))
    _try("fcntl F_OFD_SETLK read lock", lambda: _fcntl.fcntl(second, 37, _LOCK.pack(_fcntl.F_RDLCK, 0, 0, 0, 0)))
    mapping = _mmap.mmap(fd, 0, prot=_mmap.PROT_READ)
    evicted = [_try("posix_fadvise DONTNEED", lambda: _os.posix_fadvise(fd, 0, 0, _os.POSIX_FADV_DONTNEED)),
               _try("madvise PAGEOUT", lambda: mapping.madvise(21)),  # MADV_PAGEOUT
               _try("madvise COLD", lambda: mapping.madvise(20))]  # MADV_COLD
    _try("readahead", lambda: _readahead(fd))
    _try("madvise WILLNEED", lambda: mapping.madvise(_mmap.MADV_WILLNEED))
    try:
        _queue_signals()
    except (OSError, ValueError) as exc:
        print("refused: queued signals (%s)" % exc)
    deadline = _time.monotonic() + seconds
    while _time.monotonic() < deadline:  # keep the pages out while the reader looks
        if evicted[0]:
            try:
                _os.posix_fadvise(fd, 0, 0, _os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
        elif evicted[1]:
            try:
                mapping.madvise(21)
            except OSError:
                pass
        _time.sleep(0.002)
    kept = _signals_kept()
    if kept > 100:
        _hole("kept %d signals queued, counted against every classmate of its user" % kept)
    else:
        print("refused: queued signals (%d of %d kept)" % (kept, _SIGNALS))
    mapping.close()
    _os.close(fd)
    _os.close(second)


_write_channel()
