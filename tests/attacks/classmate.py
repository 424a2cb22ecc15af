# Read a classmate's submission, the instructor's 0600 secret and the grading key: by absolute path, through `../`
# from the working directory, and by a bounded walk of likely places. Anything found is printed.
# The base is the stub.
import re as _re
import time as _time

_PATTERN = _re.compile(r"(classmate|instructor) secret: ([0-9a-f]{32})")


def _read(path, found):
    try:
        if _os.path.getsize(path) > 256 * 1024:
            return
        with open(path, errors="replace") as handle:
            text = handle.read()
    except Exception:
        return
    for kind, token in _PATTERN.findall(text):
        found.add((kind, token, path))
    if _os.path.basename(path) == "case-key":  # the grading key: with it, every hidden case is known
        found.add(("grading key", text.strip(), path))


def _hunt():
    found = set()
    for path in _RT["secret_paths"]:
        _read(path, found)
        _read(_os.path.expanduser("~/" + _os.path.basename(path)), found)
    here = _os.getcwd()
    for depth in range(1, 8):
        up = _os.path.join(*([".."] * depth))
        for name in _RT["relative_names"]:
            _read(_os.path.join(up, name), found)
    deadline, visited = _time.monotonic() + 3.0, 0
    roots = [".", "..", "../..", "/tmp", "/home", "/root", "/work", "/srv", _os.environ.get("HOME", "/")]
    roots += _RT["secret_dirs"]
    skipped = (".git", ".venv", "site-packages", "node_modules", "proc")
    for root in roots:  # depth first, listing each folder lazily: a folder of a million names
        stack = [(root, 0)]  # on the machine costs no more than the deadline allows
        while stack and _time.monotonic() < deadline and visited <= 4000:
            folder, depth = stack.pop()
            try:
                listing = _os.scandir(folder)
            except OSError:
                continue
            with listing:
                for count, entry in enumerate(listing):
                    if count > 2000 or _time.monotonic() > deadline or visited > 4000:
                        break
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            if depth < 4 and entry.name not in skipped:
                                stack.append((entry.path, depth + 1))
                        elif entry.is_file():  # never a FIFO, whose opening would wait
                            visited += 1
                            _read(entry.path, found)
                    except OSError:
                        continue
    print("note: looked at %d files" % visited)
    for kind, token, path in sorted(found, key=lambda item: (item[0] == "classmate", item)):  # the rarest first:
        # printed output is cut short, and a classmate's file is found under many names
        _hole("read the %s secret at %s" % (kind, path))
        print("%s secret %s" % (kind, token))
    _os.chdir(here)


_hunt()
