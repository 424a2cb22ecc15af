# An empty stub that answers every call from what collusion_writer (or, as `shm_reader`,
# shm_writer) left behind, if it can find it.
import pickle as _pickle


def _load():
    places = ["/tmp", "/var/tmp", "/dev/shm", ".", _os.environ.get("HOME", "/"), _os.path.expanduser("~")]
    places += _RT["shared_dirs"]
    found = {}
    if _RT["attack"].startswith("shm"):
        return _load_shared_memory(found)
    for place in places:
        _read_answers(_os.path.join(place, "qkvrt-%s-answers.pickle" % _RT["run"]), found,
                      "read a classmate's answers from %s")
    return found


def _read_answers(path, found, hole):
    """Add the answers pickled at `path` to `found`, and name the hole (`hole % path`) if any."""
    try:
        with open(path, "rb") as handle:
            found.update(_pickle.load(handle))
        _hole(hole % path)
    except Exception:
        pass


def _load_shared_memory(found):
    try:
        import ctypes
        import struct

        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        ident = libc.shmget(int(_RT["run"][:7], 16), 0, 0)
        address = libc.shmat(ident, None, 0) if ident >= 0 else None
        if address not in (None, ctypes.c_void_p(-1).value):
            size = struct.unpack("Q", ctypes.string_at(address, 8))[0]
            if 0 < size < 8 << 20:
                found.update(_pickle.loads(ctypes.string_at(address + 8, size)))
                _hole("read a classmate's answers from System V shared memory")
    except Exception as exc:
        print("note: shared memory: %s" % exc)
    return found


def _answer(name):
    def answered(*args):
        found = _load()
        key = _digest(name, args)
        if key in found:
            return found[key]
        raise NotImplementedError()
    return answered


for _name in _FUNCTIONS:
    globals()[_name] = _answer(_name)
_load()
