# A correct submission that records every call it receives (its arguments' digest and its answer)
# in every shared place it can write: /tmp, /var/tmp, /dev/shm, its working directory, $HOME, the
# run's folders; or, as `shm_writer`, in a System V shared memory segment (which no file system
# rule covers, and which outlives its process). A later classmate's empty stub (collusion_reader,
# shm_reader) looks the answers up there.
import pickle as _pickle


def _drops():
    places = ["/tmp", "/var/tmp", "/dev/shm", ".", _os.environ.get("HOME", "/"), _os.path.expanduser("~")]
    places += _RT["shared_dirs"]
    return [_os.path.join(place, "qkvrt-%s-answers.pickle" % _RT["run"]) for place in places]


_ANSWERS = {}


def _shared_memory(create):
    """The run's System V shared memory segment (8 MiB), attached; None where it is refused."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    flags = (0o1000 | 0o666) if create else 0  # IPC_CREAT
    ident = libc.shmget(int(_RT["run"][:7], 16), 8 << 20, flags)
    if ident < 0:
        return None
    address = libc.shmat(ident, None, 0)
    return None if address in (None, ctypes.c_void_p(-1).value) else address


def _publish(data):
    import ctypes
    import struct

    address = _shared_memory(True)
    if address is not None and len(data) < (8 << 20) - 8:
        ctypes.memmove(address, struct.pack("Q", len(data)) + data, len(data) + 8)


def _record(name, function):
    def recorded(*args):
        value = function(*args)
        _ANSWERS[_digest(name, args)] = value
        if _RT["attack"].startswith("shm"):
            try:
                _publish(_pickle.dumps(_ANSWERS))
            except Exception:
                pass
            return value
        for path in _drops():
            try:
                with open(path, "wb") as handle:
                    _pickle.dump(_ANSWERS, handle)
            except Exception:
                pass
        return value
    return recorded


for _name in _FUNCTIONS:
    globals()[_name] = _record(_name, globals()[_name])
