"""Serving Lab inside JupyterLab / JupyterHub: jupyter-server-proxy starts the app on a free port
of its own and serves it under the Jupyter server's prefix (`<base_url>serving-lab/`), websockets included; a
launcher tile opens it. Registered by pyproject.toml's `jupyter_serverproxy_servers` entry point (after
`pip install -e .`), or by scripts/jupyter_server_config.py without installing anything (README)."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
NAME = "serving-lab"  # the proxied path under Jupyter's base URL, and the launcher's entry


def setup() -> dict:
    """jupyter-server-proxy's server process: Streamlit under the proxy's own path prefix ({base_url} is Jupyter's,
    e.g. /user/kim/), listening on loopback only (the proxy is the way in, behind Jupyter's login)."""
    venv = ROOT / ".venv" / "bin" / "python"
    python = str(venv) if venv.exists() else sys.executable  # the app's own environment, else Jupyter's
    return {
        "command": [python, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port={port}",
                    "--server.address=127.0.0.1", "--server.headless=true", "--browser.gatherUsageStats=false",
                    "--server.baseUrlPath={base_url}" + NAME],
        "cwd": str(ROOT),
        "environment": {"SERVING_LAB_BEHIND": "jupyter"},  # the pre-flight says who can reach it
        "absolute_url": True,  # the app itself lives under the prefix (baseUrlPath): the proxy keeps the path
        "timeout": 120,  # a cold Python and Streamlit on a busy machine
        "launcher_entry": {"title": "Serving Lab", "icon_path": str(ROOT / "docs" / "img" / "serving-lab.svg")},
    }
