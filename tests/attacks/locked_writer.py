# Appended to collusion_writer: keep the answers in the submission's own scratch folder, in a
# folder whose write permission it takes away (r-x), so that removing the scratch folder, which
# must unlink the file inside, fails. The base is the reference.
def _drops():
    folder = "qkvrt-%s-keep" % _RT["run"]
    path = _os.path.join(folder, "qkvrt-%s-answers.pickle" % _RT["run"])
    try:
        if not _os.path.exists(path):
            _os.makedirs(folder, exist_ok=True)
            open(path, "wb").close()
            _os.chmod(folder, 0o500)
    except OSError as exc:
        print("note: locked folder: %s" % exc)
    return [path]
