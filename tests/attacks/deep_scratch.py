# Nest 995 folders in the scratch folder, within its quota of 1000 entries (one-letter names keep
# the path short enough for the quota's walk to count them): as deep as Python's recursion limit, so
# that removing the scratch folder with a recursive walk raises (in the worker, or in the grader
# itself where it removes the worker's folders) or leaves the tree behind. The base is the stub.
def _nest():
    top = _os.getcwd()
    print("note: scratch at %s" % top)  # so the test looks for this folder, not for any on the machine
    try:
        for _ in range(995):
            _os.mkdir("a")
            _os.chdir("a")
    except OSError as exc:
        print("note: nesting stopped: %s" % exc)
    _os.chdir(top)


_nest()
