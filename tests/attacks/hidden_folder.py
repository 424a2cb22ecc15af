# Write past the scratch folder's quota (64 MiB) inside a folder the worker cannot list: write and
# search permission only (-wx), so a quota counted by walking the tree sees none of it. 160 MiB in
# 16 MiB files (the file size limit), at import; then it tries to lock the folder (--x) so that it
# cannot be removed either. Reports a hole if all of it was written without the process being ended.
# The base is the stub.
def _fill_hidden():
    folder = "qkvrt-%s-hidden" % _RT["run"]
    chunk = b"\0" * (1 << 20)
    written = 0
    try:
        _os.mkdir(folder, 0o300)  # made so: changing a mode afterwards is refused
        for index in range(10):
            with open(_os.path.join(folder, "fill-%d" % index), "wb") as handle:
                for _ in range(16):
                    handle.write(chunk)
            written += 16 << 20
    except OSError as exc:
        print("note: hidden folder: %s" % exc)
    try:
        _os.chmod(folder, 0o100)
    except OSError as exc:
        print("note: locking the hidden folder: %s" % exc)
    if written >= 160 << 20:
        _hole("kept %d MiB in a folder hidden from the quota" % (written >> 20))


_fill_hidden()
