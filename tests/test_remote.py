"""A server this app did not start, attached by URL ("Connect to an existing server").

The real part is the session's vLLM CPU server (conftest's `vllm_server`), attached by its URL as if it
ran elsewhere: a load test and a chat through the Lab, the run recording the endpoint and never the key
(vLLM started without --api-key accepts any key, so a made-up one travels the whole path). Small aiohttp
apps in this file stand in only for what a real vLLM will not do on demand: answer with an HTML page,
refuse a key (as vLLM started with --api-key does), or sit behind a router's path prefix (a real
reverse proxy in front of the real server)."""
from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from engine.errors import ConfigError, ServerBusy
from engine.measure.snippets.load import run_code
from engine.measure.workloads import scenarios
from engine.measure.workloads.defaults import load_test_spec
from engine.serving import models
from engine.serving.endpoint import EndpointError, discover, root_url
from tests.conftest import MODELS, free_port
from tests.said import read, said, values

KEY = "sk-serving-lab-test-NEVER-STORED-7f3a"


@contextlib.contextmanager
def serve(app: web.Application):
    """`app` on a free local port in its own thread's event loop; yields its http://127.0.0.1:PORT."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    port = free_port()

    async def start():
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        if not thread.is_alive():
            loop.close()


def html_site() -> web.Application:
    """A web server that is not vLLM: every path is a 200 HTML page."""
    async def page(request):
        return web.Response(text="<html><body>Welcome to nginx!</body></html>", content_type="text/html")

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", page)
    return app


def keyed_vllm() -> web.Application:
    """What vLLM started with --api-key answers a request without the right key: 401 {"error": "Unauthorized"}."""
    async def refuse(request):
        return web.json_response({"error": "Unauthorized"}, status=401)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", refuse)
    return app


def prefix_proxy(upstream: str, prefix: str = "/team-a") -> web.Application:
    """A router in front of the real server: forwards {prefix}/v1/* (streamed, headers and all) to
    upstream/v1/*, and hides /metrics (404), as a gateway often does."""
    async def forward(request: web.Request):
        path = request.path.removeprefix(prefix)
        if not request.path.startswith(prefix + "/v1/"):
            return web.Response(status=404, text="not found")
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "content-type")}
        async with aiohttp.ClientSession() as session:
            async with session.request(request.method, upstream + path, headers=headers,
                                       data=await request.read()) as up:
                out = web.StreamResponse(status=up.status, headers={"Content-Type": up.headers.get("Content-Type",
                                                                                                   "text/plain")})
                await out.prepare(request)
                async for chunk in up.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
                return out

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


# -- the address ------------------------------------------------------------------------------
@pytest.mark.parametrize("given, root", [
    ("http://host:8000", "http://host:8000"),
    ("http://host:8000/", "http://host:8000"),
    ("  http://host:8000/v1/ ", "http://host:8000"),
    ("https://gw.example/team-a/v1", "https://gw.example/team-a"),
    ("https://gw.example/team-a", "https://gw.example/team-a"),
])
def test_an_address_is_taken_to_the_servers_root(given, root):
    assert root_url(given) == root


@pytest.mark.parametrize("given, says", [
    ("ftp://host:8000", "'ftp://host:8000' is not a server address"),
    ("host:8000", "is not a server address"),
    ("http://host:99999", "is not a server address"),
    ("http://me:secret@host:8000/v1", "without a user name, password or ?query (for example http://host:8000/v1)"),
    ("http://host:8000/v1?api_key=secret", "a key goes in the API key field"),
])
def test_an_address_that_cannot_be_measured_is_one_sentence(given, says):
    with pytest.raises(ConfigError) as e:
        root_url(given)
    assert says in str(e.value) and "secret" not in str(e.value)
    assert str(e.value).count(". ") == 0 and str(e.value).endswith(".")  # one sentence


def test_a_shared_server_counting_more_tokens_says_other_clients_are_the_likely_cause():
    """Measured on the session's shared server while others used it: 1,316 tokens counted there, 1,157 here."""
    from engine.measure.judge.token_check import token_check
    from engine.results.records import Notes, ServerNotes, TokenCount

    check = token_check(Notes(server=ServerNotes(endpoint="http://gw:8000"),
                              token_count=TokenCount(server=1316, client=1157)))
    assert check.level == "warn"
    assert values(check.sentences[-1]) == {"gap": pytest.approx(1316 / 1157 - 1), "tolerance": 0.03,
                                           "url": "http://gw:8000"}
    assert "other clients" in said(check.sentences[-1]).template  # the likely cause: its other users


# -- what does not lead to a vLLM server ----------------------------------------------------------
def test_a_dead_endpoint_is_one_sentence():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(EndpointError) as e:
        discover(url)
    assert str(e.value).startswith(f"Nothing answers at {url} (")
    assert str(e.value).endswith("reachable from this machine.")


def test_a_web_page_that_is_not_vllm_is_one_sentence():
    with serve(html_site()) as url:
        with pytest.raises(EndpointError) as e:
            discover(url + "/v1")
    assert values(e.value) == {"url": url, "models": f"{url}/v1/models", "got": {"kind": "text/html"}}
    assert "not as an OpenAI-compatible server" in said(e.value).template


def test_a_wrong_key_and_a_missing_key_are_one_sentence_each():
    with serve(keyed_vllm()) as url:
        with pytest.raises(EndpointError) as wrong:
            discover(url, api_key=KEY)
        with pytest.raises(EndpointError) as missing:
            discover(url)
    assert values(wrong.value) == values(missing.value) == {"url": url, "code": 401}
    assert "refused the API key" in said(wrong.value).template and "asks for an API key" in said(missing.value).template
    assert KEY not in str(wrong.value)


def test_the_lab_refuses_a_bad_endpoint_and_stays_on_its_own(tmp_path, lab_settings):
    from engine.lab import Lab
    from engine.results.store import RunStore

    lab = Lab(lab_settings, port=free_port(), store=RunStore(tmp_path / "h.sqlite"), telemetry_interval_s=3600)
    try:
        with serve(keyed_vllm()) as url, pytest.raises(EndpointError):
            lab.attach(url, KEY)
        assert lab.attached() is None and not lab.ready()
    finally:
        lab.shutdown()


# -- the real server, attached by URL ---------------------------------------------------------------
def _wait(job, limit_s: float = 300):
    deadline = time.time() + limit_s  # a liveness bound, not a timing claim
    while job.active and time.time() < deadline:
        time.sleep(0.2)
    assert job.status == "done", job.error
    return job.result


def _bytes_under(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


def test_attached_server_runs_a_load_test_and_a_chat_and_never_keeps_the_key(vllm_server, tmp_path, isolated_home,
                                                                             capfd, lab_settings):
    from engine.lab import Lab
    from engine.results.store import RunStore

    url = vllm_server.base_url.rstrip("/")
    lab = Lab(lab_settings, port=free_port(), store=RunStore(tmp_path / "h.sqlite"), telemetry_interval_s=0.5)
    try:
        seen = lab.attach(url + "/v1/", KEY)  # as pasted from a client's config
        assert (seen.url, seen.model, seen.max_model_len, seen.vllm, seen.metrics) == (
            url, vllm_server.model, 2048, True, True)
        assert seen.version and KEY not in repr(seen) and seen.key == "••••••••"
        assert KEY not in repr(lab.remote)  # a Target's repr leaves its key out
        assert lab.ready() and lab.serving_max_len() == 2048

        run = _wait(lab.run_load(load_test_spec("burst", 3, 16, max_len=lab.serving_max_len())))
        assert run.summary.completed == 3
        assert run.extra.server.endpoint == url and run.load.base_url == url
        # a loopback address shares this machine: its hardware is recorded (the ceiling needs it)
        assert run.versions == {"vllm": seen.version} and run.hardware.get("cpu")
        assert run.extra.token_count.server is not None  # its /metrics, read with the key, checked the count
        code = run_code(run)  # the Python behind it: the server's address, the key from the environment
        assert f'base_url="{url}/v1"' in code and "set OPENAI_API_KEY" in code and KEY not in code

        record = lab.chat_record("Say hi.")
        answer = "".join(lab.chat([{"role": "user", "content": "Say hi."}], record, max_tokens=8))
        assert answer and record.ttft is not None
        assert lab.code_for_chat("Say hi.", max_tokens=8, temperature=0.7) is not None

        with pytest.raises(ServerBusy) as busy:
            lab.start_server(lab.default_config(models.pick("embedded", MODELS)))
        assert said(busy.value).template.startswith("The app is connected to {url}: disconnect on the Server page")
        assert values(busy.value) == {"url": url}
        with pytest.raises(ServerBusy) as busy:
            lab.run_tuning([], scenarios.get("tuning").load_spec())
        assert said(busy.value).template.startswith("Tuning restarts a server this app started, and {url} is not one")
        assert values(busy.value) == {"url": url}

        stored = lab.history.run(run.id)
        assert stored.extra.server.endpoint == url
        exported = lab.history.export_json()
        assert f'"endpoint": "{url}"' in exported
        assert KEY not in exported + lab.history.export_csv()
        out, err = capfd.readouterr()
        assert KEY not in out + err
        assert KEY.encode() not in _bytes_under(tmp_path) + _bytes_under(isolated_home)
        lab.detach()
        assert lab.attached() is None and lab.remote is None
    finally:
        lab.shutdown()


def test_a_server_behind_a_path_prefix_works_without_its_metrics(vllm_server, tmp_path, lab_settings):
    from engine.lab import Lab
    from engine.results.store import RunStore

    lab = Lab(lab_settings, port=free_port(), store=RunStore(tmp_path / "h.sqlite"), telemetry_interval_s=3600)
    try:
        with serve(prefix_proxy(vllm_server.base_url.rstrip("/"))) as proxy:
            seen = lab.attach(proxy + "/team-a/v1", KEY)
            assert seen.url == proxy + "/team-a" and seen.model == vllm_server.model
            assert not seen.metrics and "HTTP 404" in seen.metrics_said and "left out" in seen.metrics_said
            run = _wait(lab.run_load(load_test_spec("burst", 2, 8, max_len=lab.serving_max_len())))
            record = lab.chat_record("Hello")
            assert "".join(lab.chat([{"role": "user", "content": "Hello"}], record, max_tokens=4))
        assert run.summary.completed == 2 and run.extra.server.endpoint == proxy + "/team-a"
        assert run.extra.token_count.missing == "no-metrics"  # measured all the same, unchecked
    finally:
        lab.shutdown()


def test_the_cli_sends_the_key_from_the_environment_and_a_refusal_is_one_sentence():
    """`python -m engine run --url` takes the key as `vllm bench serve` does, from OPENAI_API_KEY (never a flag,
    which `ps` would show); a server that refuses it is one sentence, without a traceback or the key."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    with serve(keyed_vllm()) as url:
        done = subprocess.run([sys.executable, "-m", "engine", "run", "concurrent-10", "--url", url + "/v1"], cwd=root,
                              capture_output=True, text=True, timeout=120, env={**os.environ, "OPENAI_API_KEY": KEY})
    assert done.returncode != 0
    refused = read("The server at {url} refused the API key (HTTP {code}): enter the key it was started with (vLLM's "
                   "--api-key).", done.stderr.strip().splitlines()[-1])
    assert refused == {"url": url, "code": "401"}, done.stderr
    assert "Traceback" not in done.stderr and KEY not in done.stdout + done.stderr


def test_only_a_server_on_another_machine_goes_without_this_machines_hardware():
    from engine.serving.endpoint import Endpoint

    def where(url: str) -> bool:
        return Endpoint(url, {"m": None}, True, True).on_this_machine

    assert where("http://127.0.0.1:8000") and where("http://localhost:8000") and where("http://[::1]:8000")
    assert not where("http://10.0.0.5:8000") and not where("https://gateway.example.com/team-a")
