"""`app`: the dashboard, as `make run` starts it, for an installed `serving-lab` (pipx install .)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from engine.errors import LabError
from engine.messages import say

# app.py, app_pages/, locales/ and .streamlit/ sit beside engine/, in a checkout and in the installed wheel alike
ROOT = Path(__file__).resolve().parents[2]


def register(sub) -> None:
    a = sub.add_parser("app", help="start the dashboard (Streamlit) in this terminal; Ctrl+C stops it")
    a.add_argument("--host", default="127.0.0.1", help="where it listens (default 127.0.0.1; 0.0.0.0 for a room)")
    a.add_argument("--port", type=int, default=8501, help="default 8501")
    a.add_argument("--base", default="", help="a path prefix behind a reverse proxy, e.g. /lab (as make run BASE=)")
    a.set_defaults(func=_app)


def _app(args) -> int:
    if not (ROOT / "app.py").is_file():
        raise LabError(say("The dashboard's files are not beside the engine ({root}): install Serving Lab again "
                           "from its repository (pipx install .).", root=str(ROOT)))
    os.chdir(ROOT)  # Streamlit reads the app's settings from .streamlit/ in the working directory
    argv = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"),
            "--server.address", args.host, "--server.port", str(args.port)]
    if args.base.strip("/"):
        argv += ["--server.baseUrlPath", args.base.strip("/")]
    os.execv(sys.executable, argv)  # the dashboard in this process: its output and Ctrl+C stay here
    return 0  # not reached
