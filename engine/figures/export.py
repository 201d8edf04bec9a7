"""Figures as PNG files (kaleido driving a Chromium) for the docs and the CLI; a self-contained HTML file where no
browser can be started. See docs/internals.md#figures."""
from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

WIDTH = 1280  # pixels; each figure keeps its own height


def _ensure_browser() -> None:
    """kaleido 1.x drives a Chrome; point it at the system Chromium when none is configured."""
    if not os.environ.get("BROWSER_PATH"):
        for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"):
            if os.path.exists(p):
                os.environ["BROWSER_PATH"] = p
                break


def to_png(fig: go.Figure, path: str | Path, width: int = WIDTH) -> Path:
    """Write `fig` as a PNG with kaleido (+ Chromium). If that cannot work here, write an HTML
    file beside it instead (same name, .html), warn, and return that path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        _ensure_browser()
        fig.write_image(str(path), format="png", width=width, height=fig.layout.height or 540)
        if path.exists() and path.stat().st_size > 0:
            return path
        raise RuntimeError("kaleido wrote nothing")
    except Exception as e:  # no Chrome, kaleido missing, sandbox trouble ...
        html_path = path.with_suffix(".html")
        fig.write_html(str(html_path), include_plotlyjs=True)  # self-contained: works offline
        why = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        warnings.warn(f"PNG export failed ({why}); wrote {html_path} instead.", RuntimeWarning, stacklevel=2)
        return html_path


def to_pngs(items: Sequence[tuple[go.Figure, str | Path]]) -> list[Path]:
    """Several PNGs with one browser start (much faster than to_png in a loop); HTML fallback."""
    paths = [(f, Path(p)) for f, p in items]
    for _, p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
    try:
        _ensure_browser()
        pio.write_images([f for f, _ in paths], [str(p) for _, p in paths], format="png", width=WIDTH,
                         height=[f.layout.height or 540 for f, _ in paths])
        return [p for _, p in paths]
    except Exception:
        return [to_png(f, p) for f, p in paths]
