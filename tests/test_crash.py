"""When things die: the API server killed mid-load-test, the app killed while a server starts and while
it measures, the app killed while it saves, a start that never gets ready, client processes whose app
died. Real vLLM (CPU build, --enforce-eager to start in ~40 s), real processes, real kill -9."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from engine.errors import ServerFailed
from engine.lab import Lab
from engine.measure.workloads import prompts
from engine.measure.load.spec import LoadSpec
from engine.results.store import RunStore
from engine.serving import models, proctree
from engine.serving.config import ServerConfig
from engine.serving.leftovers import leftovers
from engine.serving.server import FAILED, READY, STOPPED, VLLMServer

from .conftest import ROOT, free_port

pytestmark = [pytest.mark.server, pytest.mark.slow]


def eager(spec: models.ModelSpec, port: int) -> ServerConfig:
    return ServerConfig.for_model(spec, "cpu", port=port, cpu_kvcache_gib=1, enforce_eager=True)


def ours(port: int, *api_pids: int) -> list[psutil.Process]:
    """Every live process of the servers on `port` started under this test session's runtime dir: tagged,
    or in the session of one of `api_pids` (vLLM's renamed children show no readable environment)."""
    found = {p.pid: p for p, _ in proctree.tagged(str(Path(os.environ["SERVING_LAB_RUNTIME"]).resolve()), port)}
    found.update((p.pid, p) for sid in api_pids for p in proctree.session(sid))
    return list(found.values())



def wait_for(cond, timeout_s: float, what: str, poll_s: float = 0.2):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if v := cond():
            return v
        time.sleep(poll_s)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")


def test_a_clock_step_does_not_make_our_server_a_stranger(monkeypatch):
    """A server's record names its API server by pid and start time. Written before the wall clock was
    stepped (NTP on a freshly booted machine moves the boot time psutil reports), it must still name the
    same process, or a restarted app would stop its own live server as a leftover."""
    me = psutil.Process()
    started = proctree.since_boot(me)
    real = psutil._psplatform.boot_time
    monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: real() + 7.0)
    assert proctree.same_process(me.pid, started) is not None
    assert proctree.same_process(me.pid, started + 1.0) is None  # a recycled pid is still told apart


def test_a_clock_step_between_two_readings_does_not_move_a_start(monkeypatch):
    """A start time read as the wall clock's boot time plus the kernel's ticks, less the boot time read again,
    moves by the step when the clock is stepped between the two readings: it is read from the kernel alone."""
    me = psutil.Process()
    started = proctree.since_boot(me)
    real, readings = psutil._psplatform.boot_time, iter(range(1_000_000))
    monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: real() + next(readings))  # a step every reading
    assert proctree.since_boot(psutil.Process(me.pid)) == started
    assert proctree.same_process(me.pid, started) is not None


def test_api_server_killed_mid_load_test_takes_its_tree_and_keeps_the_finished_requests(embedded_model, tmp_path,
                                                                                       lab_settings):
    port = free_port()
    lab = Lab(lab_settings, port=port, store=RunStore(tmp_path / "h.sqlite"), telemetry_interval_s=3600)
    try:
        lab.start_server(eager(embedded_model, port), embedded_model)
        snap = lab.server.wait_ready(timeout_s=600)
        tree = proctree.family(snap.pid)
        assert len(tree) >= 2, "vLLM should run as a tree (API server, EngineCore, worker)"
        spec = LoadSpec(base_url="", model="", prompts=list(prompts.LAB_CONCURRENT), num_requests=12,
                        shape="concurrency",
                        concurrency=2, max_tokens=96, ignore_eos=True, timeout_s=120, read_timeout_s=30,
                        scenario="crash", label="killed mid-run")
        job = lab.run_load(spec)
        wait_for(lambda: job.done >= 2, 300, "two finished requests")
        os.kill(snap.pid, signal.SIGKILL)

        wait_for(lambda: not job.active, 150, "the load test to end after the server died")
        wait_for(lambda: lab.server.snapshot().state == FAILED, 30, "the server to be marked failed")
        left = [p.pid for p in tree if proctree.alive(p)]
        assert not left, f"processes of the dead server's tree survived: {left}"
        assert not ours(port, snap.pid)
        error = lab.server.snapshot().error
        assert f"pid {snap.pid}" in error and "SIGKILL" in error and "were stopped" in error, error

        run = job.result
        saved = lab.store.load(run.id)  # saved, with what finished before the kill
        ok = [r for r in saved.records if r.ok]
        assert len(ok) >= 2 and len(ok) < len(saved.records)
        assert all(r.error for r in saved.records if not r.ok)

        lab.start_server(eager(embedded_model, port), embedded_model)  # the next Start works
        assert lab.server.wait_ready(timeout_s=600).state == READY
    finally:
        last = lab.server.snapshot().pid
        lab.server.stop()
        lab.shutdown()
    assert not ours(port, *([last] if last else []))


def test_a_start_past_its_deadline_ends_failed_with_nothing_left(embedded_model, lab_settings):
    srv = VLLMServer(lab_settings, port=free_port(), start_timeout_s=6)
    srv.start(eager(embedded_model, srv.port))
    api = srv.snapshot().pid
    with pytest.raises(ServerFailed, match="was not ready 6 s after Start"):
        srv.wait_ready(timeout_s=120)
    snap = srv.snapshot()
    assert snap.state == FAILED and "it was at" in snap.error and "was stopped" in snap.error
    assert not srv.record_path.exists() and not ours(srv.port, api)


def test_a_restarted_app_stops_what_a_dead_server_left(embedded_model, lab_settings):
    """The app and the API server both died (the app before it could react): the next VLLMServer on that
    port finds the orphaned EngineCore and worker by their tag and stops them; Start is clear again."""
    port = free_port()
    srv = VLLMServer(lab_settings, port=port)
    srv.start(eager(embedded_model, port))
    wait_for(lambda: len(srv._family) >= 2, 300, "the engine core and worker to appear")
    srv._stop_watch.set()  # the app "dies": nobody watches any more
    api = srv.snapshot().pid
    os.kill(api, signal.SIGKILL)
    wait_for(lambda: not psutil.pid_exists(api) or psutil.Process(api).status() == psutil.STATUS_ZOMBIE, 10, "the kill")
    orphans = ours(port, api)
    assert len(orphans) >= 2, f"the engine core survives its API server (the problem this guards against): {orphans}"
    assert leftovers(srv.runtime), "a start should see them as leftovers"

    again = VLLMServer(lab_settings, port=port)  # the restarted app
    assert again.snapshot().state == STOPPED
    assert "leftover" in (again.snapshot().notice or "") and "of RAM returned" in again.snapshot().notice
    assert not ours(port, api) and not leftovers(again.runtime)


def test_client_processes_die_with_their_app(vllm_server, tmp_path):
    """The load generator's client processes exit when the process that runs the load test is SIGKILLed."""
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from engine.measure.load.loadgen import run_load
        from engine.measure.load.spec import LoadSpec
        run_load(LoadSpec(base_url={vllm_server.base_url!r}, model={vllm_server.model!r}, prompts=["Count to 500."],
                          num_requests=400, concurrency=4, workers=2, max_tokens=256, ignore_eos=True))
    """))
    app = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def two_clients():
            assert app.poll() is None, "the load test ended before its client processes were seen"
            found = [c for c in psutil.Process(app.pid).children() if "spawn_main" in " ".join(c.cmdline())
                     and "resource_tracker" not in " ".join(c.cmdline())]
            return found if len(found) >= 2 else None

        clients = wait_for(two_clients, 120, "two client processes")
        wait_for(lambda: all(c.cpu_times().user > 0.5 for c in clients), 120, "clients to be sending")
        app.kill()
        app.wait()
        # A liveness bound, not a timing: left alone the clients would send for minutes (400 x 256 tokens).
        # On a loaded 2-core machine a SIGKILLed process can take seconds to be scheduled out of its exit.
        try:
            wait_for(lambda: not any(proctree.alive(c) for c in clients), 60, "the client processes to exit")
        except BaseException:
            print("clients left:", [_state(c) for c in clients])
            raise
    finally:
        if app.poll() is None:
            app.kill()


def _state(p: psutil.Process) -> str:
    try:
        return f"{p.pid}: {p.status()}, ppid {p.ppid()}, cpu {p.cpu_times()}"
    except psutil.Error as e:
        return f"{p.pid}: {type(e).__name__}"


def test_killing_the_app_while_it_saves_loses_no_finished_run(tmp_path):
    """A process saves runs in a loop and says so after each save returns; it is SIGKILLed at random
    moments. Every run it reported saved is there, and the database passes its integrity check."""
    db = tmp_path / "h.sqlite"
    script = tmp_path / "saver.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from engine.results.records import RequestRecord, RunResult
        from engine.results.store import RunStore
        store = RunStore({str(db)!r})
        for i in range(100000):
            recs = [RequestRecord(index=k, prompt="p" * 200, send_time=k * 0.01, end_time=k * 0.01 + 1,
                                  first_token_time=k * 0.01 + 0.1,
                                  chunk_times=[k * 0.01 + 0.1 * j for j in range(1, 60)],
                                  output_tokens=60, output_text="x" * 400) for k in range(64)]
            run = RunResult(kind="vllm", scenario="s", label=f"run {{i}}", records=recs, duration=1.0,
                            started_at=time.time())
            store.save(run)
            print(run.id, flush=True)
    """))
    reported: list[str] = []
    for kill_after in (0.6, 0.9, 1.3, 1.7, 2.2):
        saver = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
        time.sleep(kill_after)
        saver.send_signal(signal.SIGKILL)
        out, _ = saver.communicate()
        reported += out.split()
    assert len(reported) >= 3, "the saver should have completed some saves before being killed"
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        ids = {r[0] for r in conn.execute("SELECT id FROM runs")}
        counts = dict(conn.execute("SELECT run_id, COUNT(*) FROM requests GROUP BY run_id").fetchall())
    finally:
        conn.close()
    assert set(reported) <= ids, f"runs reported saved but lost: {set(reported) - ids}"
    assert all(counts.get(i) == 64 for i in ids), "a run was saved without all of its requests"
