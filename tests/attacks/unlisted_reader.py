# Appended to collusion_reader: look for the answers where unlisted_writer keeps them. An empty
# stub otherwise.
def _load():
    found = {}
    for place in ("/tmp", _os.path.dirname(_os.getcwd())):
        _read_answers(_os.path.join(place, "qkvrt-%s-unlisted" % _RT["run"], "qkvrt-%s-answers.pickle" % _RT["run"]),
                      found, "read answers left in a folder that cannot be listed, at %s")
    return found
