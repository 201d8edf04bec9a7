"""A server at a URL that needs a real API key, and one that stops answering and comes back.

The real part is a vLLM CPU server this module starts the product's way (`VLLMServer` with the Server page's API
key, which reaches vLLM as VLLM_API_KEY), then attaches to by URL as if it ran elsewhere; it is stopped and
started again in the middle, as a person restarting their deployment would. One server serves the whole module
(an eager start costs about 40 s). A small aiohttp app stands in only where a real vLLM cannot be made to do it on
demand: come back serving another model, or restart between two checks without a pause."""
from __future__ import annotations

import contextlib
import os
import stat
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiohttp import web
from google.protobuf import text_format
from streamlit.testing.v1 import AppTest

from engine.errors import ServerBusy
from engine.measure.workloads import scenarios
from engine.measure.workloads.defaults import load_defaults, load_test_spec, sweep_spec
from engine.serving import endpoint
from engine.serving.endpoint import EndpointError
from tests import said as sentences
from tests.test_remote import free_port, serve

from tests.conftest import MODELS, apps_lab, settings_for

KEY = "sk-live-key-NEVER-STORED-4d1e9b"
WRONG = "sk-wrong-key-5c2a"
APP = str(Path(__file__).resolve().parent.parent / "app.py")
STOPPED = ("The server at {url} stopped answering at {time} ({why}): check that it still runs, or disconnect on the "
           "Server page.")


def _defaults(lab):
    """What the Load test page offers first, as the page asks for it."""
    return load_defaults(lab.device, lab.serving_max_len(), lab.attached())


def _said_as(lab, start: str):
    """What the attached server's watch says now, when it is the sentence whose message id begins with `start`."""
    said = lab.attached().said
    return said if getattr(said, "template", "").startswith(start) else None


def _until(check, what: str, limit_s: float = 120):
    """Wait for `check()` to hold (a liveness bound, not a timing claim)."""
    deadline = time.time() + limit_s
    while time.time() < deadline:
        if value := check():
            return value
        time.sleep(0.2)
    pytest.fail(f"{what} within {limit_s:.0f} s")


def _done(job, limit_s: float = 300):
    _until(lambda: not job.active, f"the job '{job.label}' did not end", limit_s)
    return job


@pytest.fixture(scope="module")
def keyed(isolated_home, tmp_path_factory, lab_settings):
    """The embedded model served on a free port with --api-key (as VLLM_API_KEY), started as the app starts it."""
    from engine.serving import models
    from engine.serving.config import ServerConfig
    from engine.serving.server import VLLMServer

    port = free_port()
    srv = VLLMServer(lab_settings, port=port)
    cfg = ServerConfig.for_model(models.embedded(MODELS), "cpu", port=port, cpu_kvcache_gib=1, max_model_len=1024,
                                 api_key=KEY, enforce_eager=True)  # eager: starts in ~40 s, not ~110 s
    srv.start_and_wait(cfg)
    try:
        yield SimpleNamespace(server=srv, cfg=cfg, url=cfg.base_url, model=cfg.model_name)
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def app_lab(tmp_path_factory, keyed, lab_settings):
    """The app's own Lab (ui.get_lab, as every page gets it), its history in this module's file."""
    d = tmp_path_factory.mktemp("remote-live")
    import ui

    with apps_lab(settings_for(lab_settings, d)):
        yield SimpleNamespace(lab=ui.get_lab(), dir=d)


def _page(path: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page(path).run()  # the guided lab is the default page
    assert not at.exception, [e.value for e in at.exception]
    return at


def _drawn(node) -> str:
    """Every text the page drew, as a viewer reads it: UTF-8 (not octal escapes) and without Markdown's
    backslashes (a key escaped as "sk\\-…" must still be found)."""
    proto = getattr(node, "proto", None)
    own = _unescaped(text_format.MessageToString(proto, as_utf8=True)) if proto is not None else ""
    return own + "".join(_drawn(c) for c in getattr(node, "children", {}).values())


def _unescaped(text: str) -> str:
    return text.replace("\\", "")


@pytest.mark.server  # `keyed` starts a real vLLM
def test_a_real_api_key_measures_a_wrong_or_missing_one_is_one_sentence_and_the_key_shows_nowhere(
        keyed, app_lab, isolated_home, capfd):
    lab, url = app_lab.lab, keyed.url
    with pytest.raises(EndpointError) as wrong:
        lab.attach(url + "/v1", WRONG)
    with pytest.raises(EndpointError) as missing:
        lab.attach(url)
    assert sentences.said(wrong.value).template.startswith("The server at {url} refused the API key (HTTP {code})")
    assert sentences.said(missing.value).template.startswith("The server at {url} asks for an API key (HTTP {code})")
    assert sentences.values(wrong.value) == sentences.values(missing.value) == {"url": url, "code": 401}
    assert lab.attached() is None and WRONG not in str(wrong.value)

    seen = lab.attach(url + "/v1", KEY)
    assert (seen.url, seen.model, seen.max_model_len, seen.key, seen.answering) == (
        url, keyed.model, 1024, "••••••••", True)
    run = _done(lab.run_load(load_test_spec("burst", 3, 16, max_len=lab.serving_max_len()))).result
    assert run.summary.completed == 3 and run.extra.server.endpoint == url and run.extra.server.keyed
    record = lab.chat_record("Say hi.")
    assert "".join(lab.chat([{"role": "user", "content": "Say hi."}], record, max_tokens=8)) and record.ttft

    drawn = ""
    for page in ("app_pages/server.py", "app_pages/load.py", "app_pages/chat.py", "app_pages/history.py",
                 "app_pages/monitor.py", "app_pages/naive_vs_vllm.py"):
        at = _page(page)
        drawn += _drawn(at._tree)
        if page == "app_pages/load.py":  # the sweep's levels follow its KV cache, not this machine's 2 cores
            defaults = _defaults(lab)
            assert at.multiselect[0].value == list(defaults.sweep_levels)
            assert sentences.said(defaults.said).template.startswith("The sweep's levels follow the KV cache of {url}")
            assert sentences.values(defaults.said)["url"] == url
            assert defaults.said in [_unescaped(c.value) for c in at.caption]
    assert url in drawn and "••••••••" in drawn

    # The key lives in the attached Target only: not in a run, an export, the history file, a log, a page.
    # The server record of the server this module started keeps it by design (the app must talk to a server
    # it adopts after a crash): readable by its owner only.
    record_file = keyed.server.record_path
    assert stat.S_IMODE(os.stat(record_file).st_mode) == 0o600
    files = [p for p in [*isolated_home.rglob("*"), *app_lab.dir.rglob("*")] if p.is_file() and p != record_file]
    log = keyed.server.snapshot().log_tail
    out, err = capfd.readouterr()
    everything = (lab.history.export_json() + lab.history.export_csv() + repr(lab.history.run(run.id).to_dict())
                  + repr(lab.attached())
                  + repr(lab.remote) + "\n".join(log) + out + err + drawn)
    assert KEY not in everything and WRONG not in everything
    assert not [p for p in files if KEY.encode() in p.read_bytes()]
    assert any(p.suffix == ".log" for p in files)  # the server's own log was among them


@pytest.mark.server
def test_a_server_that_stops_answering_is_one_sentence_everywhere_and_its_comeback_is_said(keyed, app_lab):
    lab, url = app_lab.lab, keyed.url
    if lab.attached() is None:
        lab.attach(url, KEY)
    first = _done(lab.run_load(load_test_spec("burst", 2, 16, max_len=lab.serving_max_len()))).result
    saved = len(lab.history.runs())

    # A load test running when the server goes: what finished is kept, the job ends in the sentence
    job = lab.run_load(load_test_spec("concurrency", 12, 48, concurrency=1, warmup=False,
                                      max_len=lab.serving_max_len()))
    _until(lambda: job.done >= 1, "the long load test finished no request")
    keyed.server.stop()
    _done(job)
    said = _until(lambda: lab.attached().said if not lab.attached().answering else None,
                  "the watch did not see the server stop")
    stopped = sentences.values(said)
    assert sentences.said(said).template == STOPPED and stopped["url"] == url, said
    assert job.error == said
    kept = lab.history.run(lab.history.runs()[0].id)
    assert len(lab.history.runs()) == saved + 1 and kept.summary.completed >= 1  # the finished requests, saved

    # Started against it now: the same sentence, nothing sent and nothing saved
    with pytest.raises(ServerBusy) as load:
        lab.run_load(load_test_spec("burst", 2, 16, max_len=lab.serving_max_len()))
    with pytest.raises(ServerBusy) as chat:
        list(lab.chat([{"role": "user", "content": "Hello?"}], lab.chat_record("Hello?"), max_tokens=8))
    assert str(load.value) == str(chat.value) == said
    assert len(lab.history.runs()) == saved + 1

    at = _page("app_pages/server.py")
    assert said in [_unescaped(e.value) for e in at.error]
    sidebar = " ".join(_unescaped(m.value) for m in at.sidebar.markdown)
    assert "not answering" in sidebar and said in [_unescaped(e.value) for e in at.sidebar.error]
    at.switch_page("app_pages/chat.py").run()
    at.chat_input[0].set_value("Are you there?").run()
    assert not at.exception and said in [_unescaped(e.value) for e in at.error]
    assert at.session_state["chat"][-1] == {"role": "user", "content": "Are you there?"}  # the question is kept

    # It comes back, restarted with a shorter context: said, and measured as what it is now
    keyed.server.start_and_wait(keyed.cfg.with_changes(max_model_len=512))
    back = _until(lambda: lab.attached().said if lab.attached().answering else None,
                  "the watch did not see the server answer again")
    assert sentences.said(back).template == ("The server at {url} answers again: it restarted at {start} (it stopped "
                                             "answering at {time}), so the first batch of each size is cold again.")
    assert (sentences.values(back)["url"], sentences.values(back)["time"]) == (url, stopped["time"]), back
    assert lab.attached().max_model_len == 512 and lab.serving_max_len() == 512
    again = _done(lab.run_load(load_test_spec("burst", 2, 16, warmup=False, max_len=lab.serving_max_len()))).result
    assert again.summary.completed == 2 and again.extra.warmth.instance != first.extra.warmth.instance
    assert again.extra.warmth.cold  # a new process: its first batch of this size
    at = _page("app_pages/server.py")
    assert back in [_unescaped(i.value) for i in at.info] and not at.error
    lab.detach()


# -- what a real vLLM does not do on demand ------------------------------------------------------------------
@contextlib.contextmanager
def _fake_vllm(state: dict):
    """An OpenAI-style server whose models, process start and health follow `state` as the test changes it."""
    async def models(request):
        if not state["up"]:
            return web.Response(status=503, text="upstream gone")
        if state.get("refuse"):  # restarted with an API key this app was not given
            return web.json_response({"error": "Unauthorized"}, status=401)
        return web.json_response({"data": [{"id": state["model"], "owned_by": "vllm",
                                             "max_model_len": state.get("max_model_len", 256)}]})

    async def metrics(request):
        if not state["up"]:
            return web.Response(status=503, text="upstream gone")
        if not state.get("metrics", True):
            return web.Response(status=404, text="not found")
        cache = (f'vllm:cache_config_info{{block_size="16",kv_cache_size_tokens="{state["kv"]}",num_gpu_blocks='
                 f'"{state["kv"] // 16}"}} 1.0\n' if state.get("kv") else "")
        return web.Response(text=f"process_start_time_seconds {state['start']}\nvllm:num_requests_running 0.0\n"
                                 + cache)

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    with serve(app) as url:
        yield url


def test_a_failure_counts_as_down_only_once_it_has_lasted_down_after_s():
    """The watch's clock is the caller's `t`: one refused or failed check is not an outage (a slow scrape under
    load), DOWN_AFTER_S of them are, and an answer between them starts the count again."""
    import httpx

    watch = endpoint.Watch("http://x", None, started=1.0)
    gone, ok = httpx.ConnectError("refused"), httpx.Response(200, text="", request=httpx.Request("GET", "http://x/v1/models"))
    assert watch.heard(100.0, None, gone) is None and watch.answering
    assert watch.heard(100.0 + endpoint.DOWN_AFTER_S - 0.1, None, gone) is None and watch.answering
    assert watch.heard(100.0 + endpoint.DOWN_AFTER_S, None, gone) == "down" and watch.down_since == 100.0
    again = endpoint.Watch("http://x", None, started=1.0)
    again.heard(100.0, None, gone)
    assert again.heard(101.0, ok, None) is None  # answered: the count starts again
    assert again.heard(102.0, None, gone) is None and again.heard(101.9 + endpoint.DOWN_AFTER_S, None, gone) is None
    assert again.answering


def test_a_server_back_with_another_model_or_restarted_between_checks_is_discovered_anew(tmp_path, monkeypatch,
                                                                                       lab_settings):
    from engine.lab import Lab
    from engine.results.store import RunStore

    # What is checked is what the watch says at each change, not how long it waits (the test above): a failure
    # counts after 1 s, not 3, and a server down is looked for again every 1 s, not 3: about 5 s less of waiting.
    monkeypatch.setattr(endpoint, "DOWN_AFTER_S", 1.0)
    monkeypatch.setattr(endpoint, "CHECK_S", 1.0)
    state = {"up": True, "model": "model-a", "start": 1_700_000_000.0}
    lab = Lab(lab_settings, port=free_port(), store=RunStore(tmp_path / "h.sqlite"), telemetry_interval_s=0.2)
    try:
        with _fake_vllm(state) as url:
            assert lab.attach(url).model == "model-a"
            state["up"] = False  # a router in front whose server went away: 503
            said = _until(lambda: lab.attached().said if not lab.attached().answering else None, "not seen down", 30)
            down = sentences.tree(said)
            assert down["id"].startswith("The server at {url} stopped answering at {time} ({why})"), said
            assert (down["url"], down["why"]) == (url, {"id": "HTTP {code}", "code": 503}), said
            state.update(up=True, model="model-b", start=1_700_000_100.0)
            back = _until(lambda: lab.attached().said if lab.attached().answering else None, "not seen back", 30)
            assert sentences.said(back).template.startswith("The server at {url} answers again (it stopped at {time}), "
                                                            "now serving {model} instead of {old}"), back
            assert {k: sentences.values(back)[k] for k in ("url", "model", "old")} == {
                "url": url, "model": "model-b", "old": "model-a"}, back
            assert lab.attached().model == "model-b" and lab.remote.model == "model-b"

            state["start"] = 1_700_000_200.0  # restarted between two scrapes: never seen down
            restarted = _until(lambda: _said_as(lab, "The server at {url} restarted at {start} (serving {model})"),
                               "the new process not seen", 30)
            assert sentences.values(restarted)["model"] == "model-b", restarted  # said with the first batches cold
            assert lab.remote.started == 1_700_000_200.0

            state["up"] = False
            _until(lambda: not lab.attached().answering, "not seen down again", 30)
            state.update(up=True, refuse=True)  # back with a key: it answers, but cannot be measured
            refused = _until(lambda: _said_as(lab, "The server at {url} asks for an API key"), "the refusal not said",
                             30)
            assert sentences.values(refused) == {"url": url, "code": 401}
            seen = set()
            for _ in range(10):  # its /metrics answer each tick: it stays down in those words, never flickers
                seen.add((lab.attached().answering, lab.attached().said))
                time.sleep(0.2)
            assert seen == {(False, refused)}
    finally:
        lab.shutdown()


def test_the_load_tests_defaults_follow_the_server_at_a_url_not_this_machine(tmp_path, lab_settings):
    """This machine has 2 CPU cores and no GPU: its own server's sweep stops at 16 in flight with 64-token answers.
    A server at a URL sets them by what it said: its max-model-len and its KV cache's capacity (vLLM's
    cache_config_info), else neutral levels, said in a sentence."""
    from engine.lab import Lab
    from engine.measure.workloads.defaults import NEUTRAL_LEVELS
    from engine.results.store import RunStore

    lab = Lab(lab_settings, port=free_port(), store=RunStore(tmp_path / "h.sqlite"), telemetry_interval_s=3600)
    try:
        assert lab.device == "cpu"
        own = _defaults(lab)
        assert (own.in_flight_max, own.sweep_levels, own.sweep_max_tokens, own.said) == (64, (1, 2, 4, 8, 16), 64, "")

        state = {"up": True, "model": "m", "start": 1.0, "kv": 2000, "max_model_len": 4096}
        with _fake_vllm(state) as url:
            lab.attach(url)
            d = _defaults(lab)
            per = 128 + scenarios.get("sweep").prompt_tokens_guess  # a sweep request's tokens, about
            assert d.in_flight_max == 256 and d.sweep_max_tokens == 128 and sweep_spec(d).max_tokens == 128
            assert 2000 // per == 9 and d.sweep_levels == (1, 4, 16)  # all that fit at once, and the next up
            assert sentences.said(d.said).template.startswith("The sweep's levels follow the KV cache of {url}")
            assert sentences.values(d.said) == {"url": url, "capacity": 2000, "fits": 9, "per": per, "top": 16}
            lab.detach()

            state.update(kv=per)  # room for one at a time: 1, and 4 to see them wait
            lab.attach(url)
            assert _defaults(lab).sweep_levels == (1, 4)
            lab.detach()

            state.update(kv=400_000, max_model_len=100)  # room for far more than 256; answers of 100 at most
            lab.attach(url)
            d = _defaults(lab)
            assert d.sweep_levels == (1, 4, 16, 64, 128, 256) and d.sweep_max_tokens == 100
            lab.detach()

            state.update(metrics=False)  # behind a gateway that hides /metrics: nothing said, neutral
            lab.attach(url)
            d = _defaults(lab)
            assert d.sweep_levels == NEUTRAL_LEVELS and d.in_flight_max == 256
            assert sentences.said(d.said).template.startswith("{url} does not say how big its KV cache is")
            assert sentences.values(d.said) == {"url": url, "levels": "1, 4, 16, 64"}
            lab.detach()
        assert _defaults(lab) == own
    finally:
        lab.shutdown()
