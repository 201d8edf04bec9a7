"""What an install gets: every package the code imports is declared in a requirements file (pyproject.toml reads
them), and the lock scripts/setup.sh installs holds every declared pin (make lock after changing one)."""
from __future__ import annotations

import ast
import importlib
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [p for folder in ("engine", "app_pages", "tests", "bench", "scripts") for p in (ROOT / folder).rglob("*.py")]
SOURCES += [ROOT / "app.py", ROOT / "ui.py", ROOT / "i18n.py", ROOT / "app_settings.py"]
BUILDS = {"cpu": ["requirements.txt", "requirements-test.txt", "requirements-cpu.txt"],
          "gpu": ["requirements.txt", "requirements-test.txt", "requirements-gpu.txt"]}


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def _pins(path: Path) -> dict[str, str | None]:
    """name -> version (None: unpinned) of a requirements file."""
    out = {}
    for line in path.read_text().splitlines():
        if line := line.split("#")[0].strip():
            m = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(?:==\s*(\S+))?", line)
            assert m, f"{path.name}: {line!r} is neither `name` nor `name==version`"
            out[_name(m[1])] = m[2]
    return out


def _own(module: str, path: Path) -> bool:
    """A module of this repository: a top-level one, or a sibling of the importing file (tests/, bench/)."""
    return any((d / f"{module}.py").is_file() or (d / module / "__init__.py").is_file() or (d / module).is_dir()
               for d in (ROOT, path.parent))


def test_every_imported_package_is_declared():
    declared = {name for files in BUILDS.values() for f in files for name in _pins(ROOT / f)}
    provided = importlib.metadata.packages_distributions()
    missing = set()
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for module in {n.split(".")[0] for n in names}:
                if module in sys.stdlib_module_names or _own(module, path):
                    continue
                if not {_name(d) for d in provided.get(module, [module])} & declared:
                    missing.add(f"{module} ({path.relative_to(ROOT)})")
    assert sorted(missing) == []


@pytest.mark.parametrize("build", sorted(BUILDS))
def test_the_lock_holds_every_declared_pin(build):
    locked = _pins(ROOT / f"requirements-{build}.lock")
    wrong = [f"{name}=={version} ({f}): the lock has {locked.get(name)}" for f in BUILDS[build]
             for name, version in _pins(ROOT / f).items()
             if name not in locked or version is not None and locked[name] != version]
    assert wrong == [], "run `make lock` (Makefile) after changing a requirements file"


def test_the_installed_command_is_the_cli():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, func = scripts["serving-lab"].split(":")  # what `python -m engine` runs too (engine/__main__.py)
    assert getattr(importlib.import_module(module), func) is importlib.import_module("engine.cli").command
    assert "command()" in (ROOT / "engine" / "__main__.py").read_text()

