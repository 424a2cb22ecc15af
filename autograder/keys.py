"""The grading key: the secret that, with a seed, decides the hidden cases.

A seed alone must not decide them: a submission sees each step's inputs as it runs, and could
search small seeds for the one that draws them, then compute a later step's inputs and do its slow
work early. So each step's generator is seeded with HMAC-SHA256(key, seed, step), and the key is
kept where no submission can read it: this user's key file (made on first use), an nbgrader
course's `qkv_course.json`, or a Gradescope bundle's configuration. One key and one seed
reproduce every grade exactly. This module loads nothing heavy: the command line reads the key
before numpy is loaded.
"""
from __future__ import annotations

import functools
import hashlib
import os
import secrets
from pathlib import Path

KEY_BYTES = 32
VARIABLE = "QKV_CASE_KEY"


class CaseKeyError(Exception):
    """The grading key cannot be read or made; the message says why in one line."""


def key_file() -> Path:
    """Where this user's grading key lives: $XDG_CONFIG_HOME/qkv-grade/case-key (~/.config/…)."""
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(config) / "qkv-grade" / "case-key"


def parse_key(text: object, where: str) -> bytes:
    """A key written as hex text (at least 32 digits), as key files, courses and bundles hold it."""
    try:
        key = bytes.fromhex(text.strip()) if isinstance(text, str) else b""
    except ValueError:
        key = b""
    if len(key) < 16:
        raise CaseKeyError(f"{where} does not hold a grading key (32 to 64 hex digits)")
    return key


def new_key() -> str:
    """A fresh key, as hex text."""
    return secrets.token_hex(KEY_BYTES)


def fingerprint(key: bytes) -> str:
    """A short name for a key that reveals nothing of it: runs record it, to resume under the same."""
    return hashlib.sha256(b"qkv-key-name\0" + key).hexdigest()[:12]


@functools.lru_cache(maxsize=None)
def local_key() -> bytes:
    """This user's grading key: $QKV_CASE_KEY (hex) if set, else the key file, made on first use
    (mode 0600, a new random key)."""
    if os.environ.get(VARIABLE):
        return parse_key(os.environ[VARIABLE], f"${VARIABLE}")
    path = key_file()
    try:
        return parse_key(path.read_text(encoding="ascii"), str(path))
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError) as exc:
        raise CaseKeyError(f"cannot read the grading key {path} ({getattr(exc, 'strerror', None) or exc})") from None
    try:  # made under a name of its own, then linked into place: two runs starting at once agree on one key
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        from .store import new_temporary

        partial, descriptor = new_temporary(path, 0o600)
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(new_key() + "\n")
        try:
            os.link(partial, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(partial)
        return parse_key(path.read_text(encoding="ascii"), str(path))
    except OSError as exc:
        raise CaseKeyError(f"cannot make the grading key {path} ({exc.strerror}); "
                           f"set {VARIABLE} to 64 hex digits instead") from None
