"""One grading key for the whole suite: every process the tests start (qkv-grade, nbgrader's kernel,
a run as another user) draws the same hidden cases from a seed as the tests' own `Grader`, and the
same from one run of the suite to the next, as a fixed seed did before keys. The tests of the key
itself (test_keys.py) set their own."""
import os

os.environ.setdefault("QKV_CASE_KEY", "5eed" * 16)


def pytest_addoption(parser, pluginmanager):
    """With pytest-xdist blocked (`-p no:xdist`), the suite runs serially: the parallel options in
    pyproject.toml's addopts are still accepted, and do nothing."""
    if pluginmanager.has_plugin("xdist"):
        return
    group = parser.getgroup("xdist", "pytest-xdist is not loaded: these do nothing")
    # `_addoption`, as pytest-xdist itself declares `-n`: pytest keeps lowercase short options for plugins.
    group._addoption("-n", "--numprocesses", dest="numprocesses", default=None, help="ignored without pytest-xdist")
    group.addoption("--dist", dest="dist", default="no", help="ignored without pytest-xdist")
