"""The project's layering rules (docs/architecture.md), checked on every run: engine/ is plain Python; the
UI layer (app.py, ui.py, the page files) never talks to a subprocess, socket or database itself, and
reaches the engine only through the Lab facade (engine.lab: Lab, LabError), the figures and the translations
of the engine's sentences (engine.messages, for i18n.py)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UI_FILES = [ROOT / "app.py", ROOT / "ui.py", ROOT / "i18n.py", *sorted((ROOT / "app_pages").glob("*.py"))]
FORBIDDEN_IN_UI = {"subprocess", "sqlite3", "socket", "httpx", "requests", "aiohttp"}
ENGINE_FOR_UI = {"engine.lab", "engine.figures"}  # the facade and the charts
TRANSLATIONS = {"i18n.py": {"engine.messages"}}  # i18n.py alone says the engine's sentences again
FROM_LAB = {"Lab", "LabError"}
LAB_PARTS = {"server", "jobs", "store", "telemetry", "chat_rate"}  # what Lab owns; pages ask Lab itself


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def _engine_imports(path: Path) -> list[tuple[str, set[str]]]:
    """(module, names) of every import of engine in the file, at any depth (a function's own too):
    `from engine import figures` is ("engine.figures", set()), `from engine.lab import Lab` ("engine.lab", {"Lab"})."""
    out = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            out += [(a.name, set()) for a in node.names if a.name.split(".")[0] == "engine"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "engine":
                out += [(f"engine.{a.name}", set()) for a in node.names]
            elif node.module.startswith("engine."):
                out.append((node.module, {a.name for a in node.names}))
    return out


def test_engine_never_imports_streamlit():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "engine").rglob("*.py") if "streamlit" in _imports(p)]
    assert not offenders


def test_ui_layer_goes_through_the_engine():
    assert len(UI_FILES) > 5
    offenders = {p.name: sorted(_imports(p) & FORBIDDEN_IN_UI) for p in UI_FILES if _imports(p) & FORBIDDEN_IN_UI}
    assert not offenders


@pytest.mark.parametrize("path", UI_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_ui_imports_only_the_facade_and_the_figures(path):
    """A page that needs something of the engine asks Lab for it (see its section `for the pages`)."""
    bad = [f"{module} {sorted(names)}" for module, names in _engine_imports(path)
           if module not in ENGINE_FOR_UI | TRANSLATIONS.get(path.name, set())
           or (module == "engine.lab" and not names <= FROM_LAB)]
    assert not bad, f"{path.name} imports {bad}: only {sorted(ENGINE_FOR_UI)} (from engine.lab: {sorted(FROM_LAB)})"


@pytest.mark.parametrize("path", UI_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_ui_never_reaches_into_what_lab_owns(path):
    """`lab.store.list_cached()` or `lab.server.snapshot()` in a page: ask the facade (lab.runs(),
    lab.server_snapshot()), so one place knows how the server, the jobs and the history are read."""
    reach = sorted({f"lab.{n.attr}" for n in ast.walk(_tree(path)) if isinstance(n, ast.Attribute)
                    and n.attr in LAB_PARTS and isinstance(n.value, ast.Name) and n.value.id == "lab"})
    assert not reach, f"{path.name} reaches into {reach}"


def test_what_the_ui_imports_from_the_facade_exists():
    import engine.lab

    assert {name for name in FROM_LAB if not hasattr(engine.lab, name)} == set()


def test_no_page_file_looks_like_a_test():
    """pytest's default file pattern (test_*.py, *_test.py) must not take a page for a test module."""
    import fnmatch

    assert not [p.name for p in UI_FILES if fnmatch.fnmatch(p.name, "test_*.py") or fnmatch.fnmatch(p.name, "*_test.py")]
