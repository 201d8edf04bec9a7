"""One settings object: every SERVING_LAB_* variable read in engine/settings.py when a process starts, none at
import, so a test's (or a second app's) environment is the one its Lab uses."""
from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

import engine.lab  # noqa: F401  (imported at collection, as many test modules do: it must freeze nothing)
from engine import settings
from engine.cli import main
from engine.errors import ConfigError
from engine.lab import Lab
from engine.serving import leftovers
from engine.serving.config import ServerConfig
from engine.messages import catalog
from tests.conftest import app_page, app_speaks, free_port

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [*sorted((ROOT / "engine").rglob("*.py")), *sorted((ROOT / "app_pages").rglob("*.py")),
           ROOT / "ui.py", ROOT / "app.py", ROOT / "i18n.py", ROOT / "app_settings.py"]


def test_a_fixtures_lab_uses_its_own_settings(lab, lab_settings):
    """conftest's `lab` is the app's Lab (ui.get_lab) built with Settings the fixture made (a free port, a history of
    its module's) after engine.lab was imported, none read from this process's environment: the Lab listens, keeps its
    history and its server records where they say."""
    own, env = lab.settings, settings.from_env()
    assert own.vllm_port not in (settings.DEFAULT_PORT, env.vllm_port) and lab.server.port == own.vllm_port
    assert own.db != lab_settings.db and lab.store.path == own.db and own.db.exists()
    assert lab.server.runtime == own.runtime == lab_settings.runtime  # the session's: where its server's record is


def test_a_labs_models_history_and_records_are_where_its_settings_say(tmp_path, monkeypatch):
    """Every folder a Lab (and what it hands them to) uses comes from its Settings: the models its pages offer and
    its guide accepts, the flags it reads beside them, its history, its server's record and lock; the environment
    (pointing elsewhere) is never read."""
    from engine.errors import LabError
    from engine.serving import models

    from tests.conftest import MODELS

    mine = settings.Settings(home=tmp_path / "home", models=tmp_path / "models", runtime=tmp_path / "runtime",
                             db=tmp_path / "history.sqlite", vllm_port=free_port())
    (tmp_path / "models").mkdir()
    for kept in MODELS.glob("vllm-flags-*.json"):  # the flags it reads beside the models, without asking vLLM anew
        (tmp_path / "models" / kept.name).write_bytes(kept.read_bytes())
    for name, value in (("HOME", "/nonexistent/home"), ("RUNTIME", "/nonexistent/runtime"),
                        ("DB", "/nonexistent/history.sqlite"), ("VLLM_PORT", "70000")):  # read, these would fail
        monkeypatch.setenv(f"SERVING_LAB_{name}", value)
    lab = Lab(mine, telemetry_interval_s=3600)
    try:
        assert lab.server.port == mine.vllm_port and lab.store.path == mine.db and mine.db.exists()
        assert lab.server.record_path == tmp_path / "runtime" / f"server-{mine.vllm_port}.json"
        assert models.catalogue(lab.settings.models) == []  # nothing prepared in its own folder
        shared = models.embedded(MODELS)  # prepared in the session's models folder, not in this Lab's
        with pytest.raises(LabError):
            lab.guide.set_model(shared.path)
        with pytest.raises(models.ModelNotPrepared):
            lab.guide.model_spec()  # the embedded default, looked for in its own folder
    finally:
        lab.shutdown()


def test_the_apps_pages_speak_the_language_its_settings_fix(app_lab, monkeypatch):
    """A room's fixed language (SERVING_LAB_LANG) reaches the pages through the app's one Settings
    (app_settings.get): a page drawn with `lang="ko"` in them is Korean, whatever this process's environment says."""
    monkeypatch.setenv("SERVING_LAB_LANG", "en")
    app_speaks(monkeypatch, "ko")
    at = app_page("app_pages/monitor.py")
    assert at.title[0].value == catalog("ko").gettext("Monitor") != "Monitor"


def _is_environment(n: ast.AST) -> bool:
    """`os.environ` or `os.getenv`."""
    return isinstance(n, ast.Attribute) and n.attr in ("environ", "getenv") and getattr(n.value, "id", "") == "os"


def _variable_read(n: ast.AST) -> object:
    """The name `os.environ.get(NAME)`, `os.getenv(NAME)` or `os.environ[NAME]` reads; None for any other node."""
    if isinstance(n, ast.Call) and n.args and (_is_environment(n.func) or isinstance(n.func, ast.Attribute)
                                               and _is_environment(n.func.value)):
        return getattr(n.args[0], "value", "?")
    if isinstance(n, ast.Subscript) and _is_environment(n.value):
        return getattr(n.slice, "value", "?")
    return None


def test_no_module_reads_the_environment_at_import():
    """A read in a module's or a class's body happens once, at import: one from before a test (or the app) set
    the variable. Reads belong in functions, SERVING_LAB_* ones in engine/settings.py alone."""
    at_import, elsewhere = [], []
    for path in SOURCES:
        tree = ast.parse(path.read_text())
        body = list(tree.body)
        while body:
            node = body.pop()
            if isinstance(node, ast.ClassDef):
                body += node.body
            elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    any(_is_environment(n) for n in ast.walk(node)):
                at_import.append(f"{path.relative_to(ROOT)}:{node.lineno}")
        if path != ROOT / "engine" / "settings.py":
            elsewhere += [f"{path.relative_to(ROOT)}:{n.lineno} {name}" for n in ast.walk(tree)
                          if isinstance(name := _variable_read(n), str) and name.startswith("SERVING_LAB_")]
    assert at_import == [] and elsewhere == []


def test_the_environment_is_read_with_its_defaults():
    s = settings.from_env({"SERVING_LAB_HOME": "/lab", "SERVING_LAB_VLLM_PORT": " 9123 ", "SERVING_LAB_LANG": "ko-KR",
                           "SERVING_LAB_GUIDE_EAGER": "1", "SERVING_LAB_START_TIMEOUT_S": "90"})
    assert (s.home, s.models, s.runtime, s.db) == (Path("/lab"), Path("/lab/models"), Path("/lab/runtime"),
                                                   Path("/lab/history.sqlite"))
    assert (s.vllm_port, s.lang, s.guide_eager, s.start_timeout_s, s.presenter_token) == (9123, "ko", True, 90.0, None)
    empty = settings.from_env({"SERVING_LAB_VLLM_PORT": "", "SERVING_LAB_PRESENTER_TOKEN": "",
                               "SERVING_LAB_LANG": "fr"})
    assert (empty.vllm_port, empty.presenter_token, empty.lang) == (9000, None, "")
    with pytest.raises(AttributeError):
        s.vllm_port = 1  # frozen: one object, the same for everyone who holds it


@pytest.mark.parametrize("name, value", [("SERVING_LAB_VLLM_PORT", "abc"), ("SERVING_LAB_VLLM_PORT", "70000"),
                                         ("SERVING_LAB_START_TIMEOUT_S", "soon")])
def test_a_bad_value_is_one_sentence_naming_the_variable(name, value):
    with pytest.raises(ConfigError) as e:
        settings.from_env({name: value})
    assert f"{name}={value}" in str(e.value)


def test_the_cli_says_a_bad_port_variable_in_one_sentence(monkeypatch, capsys):
    monkeypatch.setenv("SERVING_LAB_VLLM_PORT", "nine")
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: SERVING_LAB_VLLM_PORT=nine") and "Traceback" not in err and err.count("\n") == 1


def _own(base: settings.Settings, folder: Path) -> settings.Settings:
    """`base` with the server records and the history in `folder` instead."""
    return dataclasses.replace(base, runtime=folder / "runtime", db=folder / "history.sqlite")


def test_two_labs_with_their_own_settings_stay_apart(tmp_path, lab_settings):
    """A Lab keeps its server's lock, record and history where the Settings it was built with say, not where the
    session's say: two Labs in one process on the same port share none of it."""
    port, env_runtime = free_port(), lab_settings.runtime
    a, b = (Lab(_own(lab_settings, tmp_path / n), port=port, telemetry_interval_s=3600) for n in "ab")
    try:
        for lab, n in ((a, "a"), (b, "b")):
            runtime = tmp_path / n / "runtime"
            assert lab.server.runtime == runtime and lab.server.record_path == runtime / f"server-{port}.json"
            assert (runtime / f"server-{port}.lock").exists()  # taken when it looked for a server to adopt
            assert lab.store.path == tmp_path / n / "history.sqlite"
        assert not (env_runtime / f"server-{port}.lock").exists()
    finally:
        a.shutdown()
        b.shutdown()


def test_a_labs_cpu_bandwidth_is_kept_in_its_runtime_before_vllms_flags_are_read(tmp_path, lab_settings, monkeypatch):
    """The Lab's warm-up measures the CPU's memory bandwidth into its runtime folder first: a run that ends while
    vLLM's flags are still being read (`vllm --help`, up to minutes on a first start) asks for the machine with no
    folder, and the process's one measurement would then be made there and kept nowhere."""
    import threading
    import time

    from engine.observe import bandwidth, hardware

    release = threading.Event()
    monkeypatch.setattr(engine.lab, "known_flags", lambda models: release.wait(600) and None)
    real = bandwidth.copy_benchmark
    monkeypatch.setattr(bandwidth, "copy_benchmark", lambda: real(mb=64, budget_s=0.2))
    with bandwidth._measuring:  # as a new process: nothing measured yet
        before = list(bandwidth._this_process)
        bandwidth._this_process.clear()
    mine = _own(lab_settings, tmp_path)
    kept = mine.runtime / "cpu-bandwidth.json"
    lab = Lab(mine, port=free_port(), telemetry_interval_s=3600)
    try:
        deadline = time.monotonic() + 120  # liveness only: a second of copying, on a loaded machine
        while not kept.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert json.loads(kept.read_text())["bandwidth"]["gb_s"] > 0
    finally:
        release.set()
        lab.shutdown()
        with bandwidth._measuring:  # the next caller gets this process's real measurement (the small one dropped)
            bandwidth._this_process[:] = before
        hardware._described.cache_clear()


@pytest.mark.server
@pytest.mark.slow
def test_a_labs_server_is_recorded_and_logged_under_its_own_runtime(tmp_path, embedded_model, lab_settings):
    """The server a Lab starts writes its record and log under that Lab's runtime folder and is tagged with it:
    another Lab (other settings, in this process) neither names it as its own on another port nor as a leftover;
    the environment's folder holds nothing of it."""
    port, other, env_runtime = free_port(), free_port(), lab_settings.runtime
    a = Lab(_own(lab_settings, tmp_path / "a"), port=port, telemetry_interval_s=3600)
    b = Lab(_own(lab_settings, tmp_path / "b"), port=other, telemetry_interval_s=3600)
    try:
        a.server.start(ServerConfig.for_model(embedded_model, "cpu", port=port, cpu_kvcache_gib=1, enforce_eager=True))
        runtime = tmp_path / "a" / "runtime"
        rec = json.loads((runtime / f"server-{port}.json").read_text())  # written before start returns
        assert rec["pid"] == a.server.snapshot().pid and (runtime / f"server-{port}.log").exists()
        assert not list(env_runtime.glob(f"server-{port}*")) and not list((tmp_path / "b").rglob(f"server-{port}*"))
        assert b.servers_on_other_ports() is None and b.leftovers() is None
        named = leftovers.on_other_ports(a.server.runtime, other)  # a page of `a` on another port names it
        assert named is not None and named.values["ports"] == str(port)
    finally:
        a.server.stop()
        a.shutdown()
        b.shutdown()
