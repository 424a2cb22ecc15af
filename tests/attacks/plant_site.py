# Plant a .pth file, sitecustomize.py and usercustomize.py wherever Python looks for them: the
# grader's site-packages, the instructor's user site, every sys.path entry. What they run is
# harmless (it creates a marker folder in /tmp), but any of them would run in every later grading.
import site as _site

_CODE = "import os; os.makedirs('/tmp/qkvrt-%s-site-ran', exist_ok=True)\n" % _RT["run"]


def _plant():
    places = list(_RT["site_dirs"])
    try:
        places += _site.getsitepackages() + [_site.getusersitepackages()]
    except Exception:
        pass
    places += [p for p in _sys.path if p]
    home = _RT["home"]
    places += [_os.path.join(home, ".local", "lib", "python%d.%d" % _sys.version_info[:2], "site-packages")]
    for place in places:
        try:
            _os.makedirs(place, exist_ok=True)
        except Exception:
            pass
        for name, text in (("qkvrt-%s-plant.pth" % _RT["run"], _CODE),
                           ("sitecustomize.py", _CODE), ("usercustomize.py", _CODE)):
            path = _os.path.join(place, name)
            if _os.path.exists(path):
                continue  # never change a file that was already there
            try:
                with open(path, "x") as handle:
                    handle.write(text)
                print("note: " + "planted %s" % path)
            except Exception:
                pass


_plant()
