"""The runtime folder, made private before use: server records, locks and logs (the models' folder, the history's
file and the CLI's logs are the Settings' own `models`, `db` and `home`). It takes the Settings its caller was built
with (engine.settings: read from the environment once, where a process starts), so two Labs with different settings
in one process keep their servers apart."""
from __future__ import annotations

from pathlib import Path

from engine.settings import Settings


def runtime_dir(s: Settings) -> Path:
    """Server records, locks and logs. Kept apart from models so tests can isolate it. Private to its owner:
    a record holds the server's API key."""
    d = s.runtime
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    if d.stat().st_mode & 0o077:
        d.chmod(0o700)
    return d
