"""The folders the app keeps what it owns in: converted models, server records and logs (the history's file and the
CLI's logs are the Settings' own `db` and `home`). Each takes the Settings its caller was built with
(engine.settings: read from the environment once, where a process starts), so two Labs with different settings in
one process keep their servers apart."""
from __future__ import annotations

from pathlib import Path

from engine.settings import Settings, from_env


def models_dir(s: Settings | None = None) -> Path:
    """Converted models; $SERVING_LAB_MODELS moves them apart from the rest (tests isolate the rest). Without
    Settings, the environment's at the call: models.py, prepare.py and flags.py do not hold one yet."""
    s = s or from_env()
    s.models.mkdir(parents=True, exist_ok=True)
    return s.models


def runtime_dir(s: Settings) -> Path:
    """Server records, locks and logs. Kept apart from models so tests can isolate it. Private to its owner:
    a record holds the server's API key."""
    d = s.runtime
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    if d.stat().st_mode & 0o077:
        d.chmod(0o700)
    return d
