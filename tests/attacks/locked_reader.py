# Appended to collusion_reader: look for what locked_writer left in a scratch folder beside this
# one (the worker makes each submission's scratch folder in one place). An empty stub otherwise.
def _load():
    found = {}
    root = _os.path.dirname(_os.getcwd())
    try:
        names = _os.listdir(root)
    except OSError as exc:
        print("note: %s: %s" % (root, exc))
        return found
    for name in names:
        _read_answers(_os.path.join(root, name, "qkvrt-%s-keep" % _RT["run"], "qkvrt-%s-answers.pickle" % _RT["run"]),
                      found, "read answers left in a locked folder at %s")
    return found
