"""The real app, SIGKILLed while a server starts and again while a load test measures, then started
again: the server is adopted (never two servers, never an orphan), and Stop leaves nothing.

Its own vLLM port and runtime dir (apart from the session server), --enforce-eager to start fast."""
from __future__ import annotations

import os
import re
import sqlite3
import time

import pytest
from playwright.sync_api import expect, sync_playwright

from engine.serving import proctree

from .browser import (
    VIEWPORT,
    StreamlitApp,
    api_servers,
    button,
    free_port,
    goto,
    kill_recorded_server,
    launch_chromium,
    metric,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def tree_of(runtime) -> dict[str, list]:
    """This app's tagged processes grouped by the start they belong to."""
    out: dict[str, list] = {}
    for p, tag in proctree.tagged(str(runtime.resolve())):
        out.setdefault(tag.start_id, []).append(p)
    return out


def sessions(pids) -> list:
    """What still runs in the sessions of these API servers (EngineCore and workers carry no readable tag)."""
    return [p for sid in pids for p in proctree.session(sid)]


def test_app_killed_while_starting_and_while_measuring_is_adopted_and_cleaned(tmp_path):
    vllm_port, runtime, db = free_port(), tmp_path / "runtime", tmp_path / "history.sqlite"
    env = {"SERVING_LAB_VLLM_PORT": str(vllm_port), "SERVING_LAB_RUNTIME": str(runtime), "SERVING_LAB_DB": str(db)}
    apps: list[StreamlitApp] = []

    def app(n: int) -> StreamlitApp:
        a = StreamlitApp(env, tmp_path / f"streamlit-{n}.log")
        a.start()
        apps.append(a)
        return a

    with sync_playwright() as p:
        browser = launch_chromium(p)
        pg = browser.new_context(viewport=VIEWPORT).new_page()
        try:
            # 1. Start from the UI, kill the app mid-start.
            a1 = app(1)
            goto(pg, a1, "server", title="vLLM server")
            pg.get_by_text("Enforce eager (no graphs)").click()
            button(pg, "Start").click()
            expect(metric(pg, "State")).to_have_text("starting", timeout=30000)
            expect(metric(pg, "PID")).to_have_text(re.compile(r"^\d+$"), timeout=10000)
            a1.proc.kill()
            a1.proc.wait()

            # 2. The restarted app adopts the starting server and sees it ready; one server only.
            a2 = app(2)
            goto(pg, a2, "server", title="vLLM server")
            expect(metric(pg, "State")).to_have_text("ready", timeout=600000)
            expect(pg.get_by_text("took it over").first).to_be_visible()  # the page says it twice
            assert len(api_servers(runtime)) == 1 and len(tree_of(runtime)) == 1
            seen = {p.pid for p in api_servers(runtime)}

            # 3. A load test; kill the app while it measures.
            goto(pg, a2, "load_test", title="Load test")
            button(pg, "Run load test").click()
            expect(pg.get_by_text(re.compile(r"[1-9]\d*/\d+ requests done"))).to_be_visible(timeout=300000)
            a2.proc.kill()
            a2.proc.wait()

            # 4. Started again: the same server, adopted and ready; nothing else of ours runs.
            a3 = app(3)
            goto(pg, a3, "server", title="vLLM server")
            expect(metric(pg, "State")).to_have_text("ready", timeout=60000)
            groups = tree_of(runtime)
            assert len(groups) == 1 and len(api_servers(runtime)) == 1, f"two servers or an orphan: {groups}"
            seen |= {p.pid for p in api_servers(runtime)}
            conn = sqlite3.connect(db)
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            conn.close()

            # 5. Stop from the UI leaves nothing.
            button(pg, "Stop").click()
            expect(metric(pg, "State")).to_have_text("stopped", timeout=60000)
            deadline = time.time() + 60  # a liveness bound: a loaded machine reaps slowly
            while (tree_of(runtime) or sessions(seen)) and time.time() < deadline:
                time.sleep(0.2)
            assert not tree_of(runtime) and not sessions(seen)
        finally:
            browser.close()
            for a in apps:
                a.stop()
            kill_recorded_server(runtime, vllm_port)
            for procs in tree_of(runtime).values():  # only if something above failed half-way
                proctree.stop(procs, grace_s=2)
    assert not os.path.exists(runtime / f"server-{vllm_port}.json")
