"""The layering rules (docs/architecture.md): engine/ is plain Python; the UI layer (app.py, ui.py, the pages)
acts through the Lab facade and reads through the figures and an allowlist of read-only concept modules."""
import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UI_FILES = [ROOT / "app.py", ROOT / "ui.py", ROOT / "i18n.py", ROOT / "app_settings.py",
            *sorted((ROOT / "app_pages").rglob("*.py"))]
FORBIDDEN_IN_UI = {"subprocess", "sqlite3", "socket", "httpx", "requests", "aiohttp"}
ENGINE_FOR_UI = {"engine.lab", "engine.figures"}  # the facade (actions, live state) and the charts (engine.figures.*)
# What the UI may read without Lab: each answers from what it is given, and does no I/O of its own.
READ_ONLY = {
    "engine.measure.judge.stats": "a run's numbers as vllm bench serve defines them, peak in flight",
    "engine.measure.judge.failures": "why a run's requests failed, in sentences",
    "engine.measure.judge.token_check": "the server's token count against the client's",
    "engine.measure.judge.cost": "a million output tokens' cost at a typed price",
    "engine.measure.judge.speculation": "a run's speculative decoding as the server counted it",
    "engine.measure.judge.utilization": "the work the server estimated it did, against the memory bandwidth",
    "engine.measure.judge.slo": "service-level objectives and a run's verdict against them",
    "engine.measure.judge.slots": "a run's batch slots step by step",
    "engine.measure.judge.ceiling": "a run's decode speed against its hardware's memory bandwidth",
    "engine.measure.judge.warmth": "why a run is cold or warm, from its stored notes, and its warm-up's cost",
    "engine.measure.judge.repeats": "N repeats' median and spread, and whether the prefix cache was emptied",
    "engine.measure.judge.lateness": "whether a run's client sent on its schedule, from its stored notes",
    "engine.measure.judge.kvcache": "a run's KV cache row and sentence, from its stored notes",
    "engine.measure.judge.worker_memory": "the naive worker's own memory and whether it came back, from its notes",
    "engine.measure.snippets.load": "the Python behind a run, as text",
    "engine.measure.load.spec": "a load spec and its deadlines' sentence",
    "engine.measure.load.shape": "a request's headers, extra body and LoRA modules from the page's text",
    "engine.measure.workloads.scenarios": "the workload catalogue and the specs it makes",
    "engine.measure.workloads.named": "what a run records of its workload, named for History's column",
    "engine.measure.workloads.defaults": "the Load test page's first offers, from the server's facts passed in",
    "engine.measure.workloads.traces": "a trace's replay time and what looks wrong in its timestamps",
    "engine.serving.states": "a server's states and how far its start has come",
    "engine.serving.models": "the model catalogue (reading folders; preparing one is a Lab action)",
    "engine.serving.config": "server settings: presets, limits, checked configs, the GPU picker's names",
    "engine.serving.cluster": "commands a person runs on other machines, and the side-by-side sentence",
    "engine.metrics": "metric names and the answer deadline the pages quote",
    "engine.observe.disturbance": "whether a run was measured beside other programs or clients, from its notes",
    "engine.settings": "the SERVING_LAB_* settings (a room's fixed language)",
    "engine.digits": "a measured number in significant figures",
    "engine.measure.judge.prefix": "the share of a run's prompt tokens its server took from the prefix cache",
    "engine.guide.sheet": "a rehearsal's sheet in words, and its machine against the day's",
}
TRANSLATIONS = {"i18n.py": {"engine.messages"}}  # i18n.py alone says the engine's sentences again
FROM_LAB = {"Lab", "LabError"}
LAB_PARTS = {"server", "jobs", "store", "telemetry", "chat_desk", "connection"}  # what Lab owns; pages ask Lab itself
FORBIDDEN_IN_READ_ONLY = FORBIDDEN_IN_UI | {"threading"}  # reading needs no process, socket, database or thread


@functools.cache  # each file parsed once for all the tests that read it (read only: ast.walk)
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


def _is_module(name: str) -> bool:
    path = ROOT / name.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _engine_imports(path: Path) -> list[tuple[str, set[str]]]:
    """(module, names) of every import of engine in the file, at any depth (a function's own too):
    `from engine import figures` is ("engine.figures", set()), `from engine.lab import Lab` ("engine.lab", {"Lab"}),
    `from engine.measure.judge import stats` ("engine.measure.judge.stats", set())."""
    out = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            out += [(a.name, set()) for a in node.names if a.name.split(".")[0] == "engine"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "engine":
                out += [(f"engine.{a.name}", set()) for a in node.names]
            elif node.module.startswith("engine."):
                modules = {a.name for a in node.names if _is_module(f"{node.module}.{a.name}")}
                out += [(f"{node.module}.{name}", set()) for name in modules]  # from engine.x import module
                if names := {a.name for a in node.names} - modules:
                    out.append((node.module, names))
    return out


def test_engine_never_imports_streamlit():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "engine").rglob("*.py") if "streamlit" in _imports(p)]
    assert not offenders


def test_ui_layer_goes_through_the_engine():
    assert len(UI_FILES) > 5
    offenders = {p.name: sorted(_imports(p) & FORBIDDEN_IN_UI) for p in UI_FILES if _imports(p) & FORBIDDEN_IN_UI}
    assert not offenders


def _allowed(module: str, path: Path) -> bool:
    return (module in ENGINE_FOR_UI | READ_ONLY.keys() | TRANSLATIONS.get(path.name, set())
            or module.startswith("engine.figures."))


@pytest.mark.parametrize("path", UI_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_ui_imports_only_the_facade_the_figures_and_read_only_modules(path):
    """An action or live state goes through Lab; reading a finished run, a workload or a setting goes to its
    concept module, if READ_ONLY names it."""
    bad = [f"{module} {sorted(names)}" for module, names in _engine_imports(path)
           if not _allowed(module, path) or (module == "engine.lab" and not names <= FROM_LAB)]
    assert not bad, (f"{path.name} imports {bad}: only {sorted(ENGINE_FOR_UI)} (from engine.lab: {sorted(FROM_LAB)}) "
                     f"and {sorted(READ_ONLY)}")


@pytest.mark.parametrize("module", sorted(READ_ONLY))
def test_read_only_modules_do_no_io_of_their_own(module):
    """A module the pages may import does not start processes, open sockets or databases, or run threads:
    its own imports, at any depth (a function's too), name none of those."""
    path = ROOT / (module.replace(".", "/") + ".py")
    bad = sorted(_imports(path) & FORBIDDEN_IN_READ_ONLY)
    assert not bad, f"{module} imports {bad}"


def test_the_pages_use_the_read_only_modules():
    """Each allowlisted module is there because some UI file reads it: an unused entry is taken out."""
    used = {module for path in UI_FILES for module, _names in _engine_imports(path)}
    assert not READ_ONLY.keys() - used


@pytest.mark.parametrize("path", UI_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_ui_never_reaches_into_what_lab_owns(path):
    """`lab.store.list_cached()` or `lab.server.snapshot()` in a page: read through lab.history,
    lab.monitor or lab.server_snapshot(), so one place knows how the server, the jobs and the history are read."""
    reach = sorted({f"lab.{n.attr}" for n in ast.walk(_tree(path)) if isinstance(n, ast.Attribute)
                    and n.attr in LAB_PARTS and isinstance(n.value, ast.Name) and n.value.id == "lab"})
    assert not reach, f"{path.name} reaches into {reach}"


def test_what_the_ui_imports_from_the_facade_exists():
    import engine.lab

    assert {name for name in FROM_LAB if not hasattr(engine.lab, name)} == set()


def test_no_page_file_looks_like_a_test():
    """pytest's default file pattern (test_*.py, *_test.py) must not take a page for a test module."""
    import fnmatch

    assert not [p.name for p in UI_FILES if fnmatch.fnmatch(p.name, "test_*.py") or fnmatch.fnmatch(p.name,
                                                                                                    "*_test.py")]


# The engine's packages, lowest first (docs/architecture.md): a module may import its own package, the
# shared root modules and the packages ranked below its own, never one above (a `TYPE_CHECKING` import of a
# type is no dependency).
ENGINE_RANKS = {"messages": 0, "particles": 0, "errors": 0, "paths": 0, "metrics": 0, "settings": 0, "digits": 0,
                "results": 1, "observe": 2, "serving": 3, "measure": 4, "figures": 5, "jobs": 5, "runs": 5, "access": 5,
                "chat_desk": 5, "guide": 6, "room": 6, "lab": 7, "cli": 8, "__main__": 9,
                "__init__": 9}  # cli over lab: `rehearse`
# Inside a package, its parts ranked the same way, lowest first: measure/'s progress protocol, then what judges a
# finished record, what sends load, the naive baseline, the workloads (which fill a LoadSpec), and the Python
# behind a run (which writes them all out).
PART_RANKS = {"measure": {"progress": 0, "judge": 1, "load": 2, "baseline": 3, "workloads": 4, "snippets": 5}}
# Where the engine is imported inside a function without a comment saying why: the CLI, whose commands import the
# engine as they run so that `--help` answers at once (engine/cli/__init__.py).
LAZY = "cli"


def _engine_modules() -> dict[str, Path]:
    """Every engine module by its dotted name (a package by its own: engine.measure.load)."""
    out = {}
    for path in (ROOT / "engine").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _engine_modules()


def _runtime_engine_imports(path: Path) -> list[tuple[str, ast.stmt, bool]]:
    """(module, import statement, whether at the file's top) for each engine module the file imports at run time,
    at any depth (a function's too): `from engine.measure import progress` is engine.measure.progress,
    `from engine.runs import Runner` the package engine.runs. A `TYPE_CHECKING` import is no dependency."""
    tree = _tree(path)
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING"
                   for n in ast.walk(node)}
    top = {id(node) for node in tree.body}
    out = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                     for a in node.names]
        else:
            continue
        out += [(name, node, id(node) in top) for name in dict.fromkeys(names) if name.split(".")[0] == "engine"]
    return out


def _above(own: tuple[str, ...], other: tuple[str, ...]) -> bool:
    """Whether the module at `other` (its path in engine/, as parts) ranks at or above `own`'s: the top-level
    packages by ENGINE_RANKS, two parts of one package by PART_RANKS."""
    if own[0] != other[0]:
        mine, theirs = ENGINE_RANKS[own[0]], ENGINE_RANKS.get(other[0], 99)
        return theirs > 0 if mine == 0 else theirs >= mine
    ranks = PART_RANKS.get(own[0])
    if ranks is None or len(own) < 2 or len(other) < 2 or own[1] == other[1]:
        return False
    return ranks.get(other[1], 99) >= ranks[own[1]]


def test_engine_imports_point_down_only():
    """Between packages, and between the parts of a ranked package (measure/): a new upward import fails here."""
    bad = []
    for name, path in sorted(MODULES.items()):
        own = tuple(name.split(".")[1:]) or ("__init__",)
        assert own[0] in ENGINE_RANKS, f"{name}: give its package a rank in ENGINE_RANKS"
        if own[0] in PART_RANKS and len(own) > 1:
            assert own[1] in PART_RANKS[own[0]], f"{name}: give engine.{own[0]}.{own[1]} a rank in PART_RANKS"
        for other, node, _top in _runtime_engine_imports(path):
            if other != "engine" and _above(own, tuple(other.split(".")[1:])):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {other}")
    assert not bad, bad


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_two_engine_modules_import_each_other():
    """No cycle among the engine's modules, through any number of them and at any depth of a file (an import
    inside a function included): two modules that need each other are one concept, or a third holds what both
    use."""
    graph = {name: {other for other, _node, _top in _runtime_engine_imports(path) if other != name}
             for name, path in MODULES.items()}
    assert not _cycles(graph)


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_an_import_inside_a_function_says_why():
    """Outside the CLI, an engine module is imported at the top of the file; one imported inside a function (a
    heavy import only some calls need) says why in a comment on its line, else it only hides a direction."""
    bad = []
    for name, path in sorted(MODULES.items()):
        if name.split(".")[1:2] == [LAZY]:
            continue
        lines = path.read_text().splitlines()
        for other, node, at_top in _runtime_engine_imports(path):
            if not at_top and "#" not in lines[node.lineno - 1]:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {other} inside a function")
    assert not bad, bad
