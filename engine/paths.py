"""Where the app keeps what it owns: converted models, the run history, server records, logs. runtime_dir takes
the Settings its caller was built with (engine.settings: read from the environment once, where a process starts),
so two Labs with different settings in one process keep their servers apart; the models, the history and the
data home still read the environment at the call (settings.current()) until their callers hold a Settings."""
from __future__ import annotations

from pathlib import Path

from engine import settings
from engine.settings import Settings


def data_home(s: Settings | None = None) -> Path:
    """The app's data directory: $SERVING_LAB_HOME, else ~/.cache/serving-lab (shared by clones,
    so a second checkout reuses the converted model)."""
    s = s or settings.current()
    s.home.mkdir(parents=True, exist_ok=True)
    return s.home


def models_dir(s: Settings | None = None) -> Path:
    """Converted models; $SERVING_LAB_MODELS moves them apart from the rest (tests isolate the rest)."""
    s = s or settings.current()
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


def history_path(s: Settings | None = None) -> Path:
    """The run history database: $SERVING_LAB_DB, else data_home()/history.sqlite. Tests point it at a
    temporary file while the models stay shared under data_home()."""
    return (s or settings.current()).db
