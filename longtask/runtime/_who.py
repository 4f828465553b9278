"""Who acts, when a command does not say: the login name of the process's user."""

from __future__ import annotations

import getpass


def whoami() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name (a container): still say who acted, vaguely
        return "unknown"
