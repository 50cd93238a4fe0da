"""Files holding secrets (secret keys, tokens, ZooKeeper credentials) must
be private: mode 0600 or stricter, or the process refuses to start naming
the file (docs/security.rst)."""

from __future__ import annotations

import os
import stat

from mesoslike.errors import ConfigError

__all__ = ["check_secret_file_mode"]


def check_secret_file_mode(path: str) -> None:
    """Refuse (ConfigError naming the file) a secret file that others than
    its owner may read or write: its mode must be 0600 (or stricter)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ConfigError(f"cannot read the secret file {path}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"the secret file {path} has mode {stat.S_IMODE(mode):04o}: it must be 0600 "
                          f"(chmod 600 {path}); refusing to start")
