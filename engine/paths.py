"""Where the app keeps what it owns: converted models, the run history, server records, logs."""
from __future__ import annotations

from pathlib import Path

from engine import settings


def data_home() -> Path:
    """The app's data directory: $SERVING_LAB_HOME, else ~/.cache/serving-lab (shared by clones,
    so a second checkout reuses the converted model)."""
    home = settings.current().home
    home.mkdir(parents=True, exist_ok=True)
    return home


def models_dir() -> Path:
    """Converted models; $SERVING_LAB_MODELS moves them apart from the rest (tests isolate the rest)."""
    d = settings.current().models
    d.mkdir(parents=True, exist_ok=True)
    return d


def runtime_dir() -> Path:
    """Server records and logs. Kept apart from models so tests can isolate it. Private to its owner:
    a record holds the server's API key."""
    d = settings.current().runtime
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    if d.stat().st_mode & 0o077:
        d.chmod(0o700)
    return d


def history_path() -> Path:
    """The run history database: $SERVING_LAB_DB, else data_home()/history.sqlite. Tests point it at a
    temporary file while the models stay shared under data_home()."""
    return settings.current().db
