# Fill every place outside the scratch folder that a submission might share with the classmate
# graded after it (the worker's /tmp, /var/tmp, /dev/shm, HOME, the folder above its own), so
# that a correct classmate who opens a temporary file finds no room. Bounded at 384 MiB in all (a
# bubblewrap worker's /tmp holds 256 MiB), to keep a shared machine usable. The base is the
# reference: the attack gains nothing, it may only cost a classmate.
_CHUNK = b"\0" * (1 << 20)


def _fill():
    written = 0
    places = ["/tmp", "/var/tmp", "/dev/shm", _os.environ.get("HOME", "/"), _os.path.dirname(_os.getcwd())]
    for place in dict.fromkeys(places):
        for number in range(64):  # files of 15 MiB: each within the limit on one file's size (16 MiB)
            path = _os.path.join(place, "qkvrt-%s-fill-%d" % (_RT["run"], number))
            try:
                with open(path, "wb") as handle:
                    for _ in range(15):
                        handle.write(_CHUNK)
                        written += len(_CHUNK)
            except Exception:
                break
            if written >= (384 << 20):
                break
        if _os.path.exists(_os.path.join(place, "qkvrt-%s-fill-0" % _RT["run"])):
            print("note: " + "filled %s" % place)
        if written >= (384 << 20):
            return


_fill()
