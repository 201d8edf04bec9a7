"""Where the app keeps what it owns: converted models, the run history, server records, logs."""
from __future__ import annotations

import os
from pathlib import Path


def data_home() -> Path:
    """The app's data directory: $SERVING_LAB_HOME, else ~/.cache/serving-lab (shared by clones,
    so a second checkout reuses the converted model)."""
    home = Path(os.environ.get("SERVING_LAB_HOME") or Path.home() / ".cache" / "serving-lab")
    home.mkdir(parents=True, exist_ok=True)
    return home


def models_dir() -> Path:
    d = data_home() / "models"
    d.mkdir(parents=True, exist_ok=True)
    return d


def runtime_dir() -> Path:
    """Server records and logs. Kept apart from models so tests can isolate it."""
    d = Path(os.environ.get("SERVING_LAB_RUNTIME") or data_home() / "runtime")
    d.mkdir(parents=True, exist_ok=True)
    return d
