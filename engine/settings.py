"""The app's settings: every SERVING_LAB_* variable read in this one place, when a process starts, never at import.
See docs/internals.md#settings."""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ConfigError
from engine.messages import say

DEFAULT_PORT = 9000


@dataclass(frozen=True)
class Settings:
    """What the environment says (empty: the default); `from_env` reads it, a Lab keeps the one it was built with."""

    home: Path  # SERVING_LAB_HOME: the app's data, ~/.cache/serving-lab
    models: Path  # SERVING_LAB_MODELS: converted models, home/models
    runtime: Path  # SERVING_LAB_RUNTIME: server records and logs, home/runtime
    db: Path  # SERVING_LAB_DB: the run history, home/history.sqlite
    vllm_port: int = DEFAULT_PORT  # SERVING_LAB_VLLM_PORT: where the app's own vLLM listens
    presenter_token: str | None = None  # SERVING_LAB_PRESENTER_TOKEN: who may act beyond loopback
    start_timeout_s: float = 1200.0  # SERVING_LAB_START_TIMEOUT_S: a start that never serves ends as failed
    guide_eager: bool = False  # SERVING_LAB_GUIDE_EAGER=1: the guided lab's server skips compiling
    lang: str = ""  # SERVING_LAB_LANG: a room's fixed language ("en" | "ko"); "": each browser's
    behind: str = ""  # SERVING_LAB_BEHIND: "jupyter" when jupyter-server-proxy serves the app (jupyter_proxy.py)


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """The settings `env` (default: this process's environment) gives; a ConfigError sentence for a value that
    is not one."""
    env = os.environ if env is None else env

    def get(name: str) -> str:
        return env.get(f"SERVING_LAB_{name}", "").strip()

    home = Path(get("HOME") or Path.home() / ".cache" / "serving-lab")
    lang = get("LANG").lower()[:2]
    return Settings(
        home=home, models=Path(get("MODELS") or home / "models"), runtime=Path(get("RUNTIME") or home / "runtime"),
        db=Path(get("DB") or home / "history.sqlite"),
        vllm_port=int(_number(get("VLLM_PORT"), "SERVING_LAB_VLLM_PORT", DEFAULT_PORT, 1, 65535, whole=True)),
        presenter_token=get("PRESENTER_TOKEN") or None,
        start_timeout_s=_number(get("START_TIMEOUT_S"), "SERVING_LAB_START_TIMEOUT_S", 1200.0, 1, 10 ** 6),
        guide_eager=get("GUIDE_EAGER") == "1",
        lang=lang if lang in ("en", "ko") else "",
        behind=get("BEHIND").lower(),
    )


def _number(text: str, name: str, default: float, lo: float, hi: float, whole: bool = False) -> float:
    if not text:
        return default
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        value = None
    if value is None or not lo <= value <= hi:
        raise ConfigError(say("{name}={value} is not a number from {lo:g} to {hi:g}: set it to one, or unset it "
                              "for the default ({default:g}).", name=name, value=text, lo=lo, hi=hi, default=default))
    return value
