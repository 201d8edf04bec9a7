"""What every command prints, and the files it writes: an output file is checked before any work is done."""
from __future__ import annotations

import os
from pathlib import Path

from engine.errors import ConfigError, LabError


def say_line(msg: str) -> None:
    print(msg, flush=True)


def check_writable(path: str) -> None:
    """Refuse an output file that cannot be written, before any work is done."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{path} is a folder: give a file name in it, e.g. {p / 'runs.json'}.")
    if not p.parent.is_dir():
        raise ConfigError(f"The folder {p.parent} does not exist: create it first, or write to a folder that does.")
    if not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise ConfigError(f"{path} cannot be written (permission denied): pick a folder you may write to.")


def write(path: str, text: str, after: str = "") -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise LabError(f"Could not write {path} ({e.strerror or e}){after}: pick a folder that exists and that "
                       "you may write to.") from e
    say_line(f"wrote {path}")
