"""The project's layering rules (DESIGN.md), checked on every run: engine/ is plain Python, and the
UI layer (app.py, ui.py, the page files) never talks to a subprocess, socket or database itself."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UI_FILES = [ROOT / "app.py", ROOT / "ui.py", *sorted((ROOT / "app_pages").glob("*.py"))]
FORBIDDEN_IN_UI = {"subprocess", "sqlite3", "socket", "httpx", "requests", "aiohttp"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_engine_never_imports_streamlit():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "engine").rglob("*.py") if "streamlit" in _imports(p)]
    assert not offenders


def test_ui_layer_goes_through_the_engine():
    assert len(UI_FILES) > 5
    offenders = {p.name: sorted(_imports(p) & FORBIDDEN_IN_UI) for p in UI_FILES if _imports(p) & FORBIDDEN_IN_UI}
    assert not offenders
