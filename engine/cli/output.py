"""What every command prints, and the files it writes: an output file is checked before any work is done."""
from __future__ import annotations

import os
from pathlib import Path

from engine.errors import ConfigError, LabError
from engine.messages import say


def say_line(msg: str) -> None:
    print(msg, flush=True)


def check_writable(path: str) -> None:
    """Refuse an output file that cannot be written, before any work is done."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(say("{path} is a folder: give a file name in it, e.g. {example}.", path=path,
                              example=str(p / "runs.json")))
    if not p.parent.is_dir():
        raise ConfigError(say("The folder {folder} does not exist: create it first, or write to a folder that does.",
                              folder=str(p.parent)))
    if not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise ConfigError(say("{path} cannot be written (permission denied): pick a folder you may write to.",
                              path=path))


def write(path: str, text: str, saved: bool = False) -> None:
    """`text` into the file at `path`; `saved`: what it holds is also in the history, and the sentence of a failed
    write says so."""
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        why = e.strerror or str(e)
        if saved:
            raise LabError(say("Could not write {path} ({why}); the runs are saved in the history (python -m engine "
                               "export --out FILE): pick a folder that exists and that you may write to.", path=path,
                               why=why)) from e
        raise LabError(say("Could not write {path} ({why}): pick a folder that exists and that you may write to.",
                           path=path, why=why)) from e
    say_line(f"wrote {path}")
