"""A note of each node's body in ``$LGAPPS_NOTES`` (the tests count them), and a hold."""

import os
import time
from pathlib import Path


def note(what: str) -> None:
    where = os.environ.get("LGAPPS_NOTES")
    if where:
        with open(where, "a") as f:
            f.write(what + "\n")
            f.flush()
            os.fsync(f.fileno())


def hold() -> None:
    """Wait while ``$LGAPPS_HOLD`` names a file that exists (at most two minutes)."""
    gate = os.environ.get("LGAPPS_HOLD")
    deadline = time.monotonic() + 120
    while gate and Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
