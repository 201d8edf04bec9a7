"""VLLMServer against the real vLLM CPU server: ready, stages, KV capacity, chat, streaming, /metrics,
adoption after the app was killed, stop leaving nothing behind, and every bad input."""
import json
import subprocess
import sys
import time

import httpx
import psutil
import pytest

from engine.errors import ConfigError, PortInUse, ServerBusy, ServerFailed
from engine.serving import models
from engine.serving.config import ServerConfig
from engine.serving.flags import known_flags
from engine.serving.server import FAILED, READY, STOPPED, VLLMServer
from engine.serving.vllm_log import STAGES

from .conftest import MODELS, _family, free_port
from .said import tree

pytestmark = pytest.mark.server


def _needs_own_server(vllm_server):
    if vllm_server.server is None:
        pytest.skip("SERVING_LAB_TEST_URL points at an outside server: nothing of ours to inspect")


def test_server_is_adopted_after_the_app_was_killed(vllm_server):
    _needs_own_server(vllm_server)
    snap = vllm_server.server.snapshot()
    assert snap.state == READY and snap.adopted
    assert any("ready in" in line for line in vllm_server.cli_output)
    # The CLI printed the startup stages it read from vLLM's log, in order (polling may skip a short one).
    stages = [line.split("] ", 1)[1] for line in vllm_server.cli_output if line.strip().startswith("[")]
    order = [name for name, _ in STAGES]
    assert stages[-1] == "serving"
    assert [order.index(s) for s in stages] == sorted(order.index(s) for s in stages)
    assert "KV cache allocated" in stages and {"loading weights", "weights loaded"} & set(stages)


def test_a_server_of_this_app_on_another_port_is_named_not_adopted(vllm_server):
    """The session server runs on a port of its own: a page managing another port names it (how to measure
    it, how to stop it) instead of saying nothing; on its own port there is nothing to say."""
    _needs_own_server(vllm_server)
    from engine.serving.leftovers import on_other_ports

    runtime = vllm_server.server.runtime
    other = str(on_other_ports(runtime, vllm_server.port + 1))
    assert f"port {vllm_server.port}, not this page's {vllm_server.port + 1}" in other
    assert f"http://127.0.0.1:{vllm_server.port}" in other and f"stop --port {vllm_server.port}" in other
    assert on_other_ports(runtime, vllm_server.port) is None


def test_kv_capacity_is_read_from_the_log(vllm_server):
    _needs_own_server(vllm_server)
    snap = vllm_server.server.snapshot()
    assert snap.kv_cache_tokens and snap.kv_cache_tokens > 2048
    assert snap.max_concurrency and snap.max_concurrency == pytest.approx(snap.kv_cache_tokens / 2048, rel=0.05)


def test_chat_completion(vllm_server):
    r = httpx.post(f"{vllm_server.base_url}/v1/chat/completions", timeout=60, json={
        "model": vllm_server.model, "max_tokens": 16, "temperature": 0,
        "messages": [{"role": "user", "content": "What is the capital of France?"}]})
    assert r.status_code == 200
    body = r.json()
    assert body["choices"][0]["message"]["content"].strip()
    assert body["usage"]["completion_tokens"] > 0


def test_streaming_sends_events_and_done(vllm_server):
    events = []
    with httpx.stream("POST", f"{vllm_server.base_url}/v1/chat/completions", timeout=60, json={
            "model": vllm_server.model, "max_tokens": 12, "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "Say hello."}]}) as r:
        raw = b"".join(r.iter_raw())
    for block in raw.split(b"\n\n"):
        if block.startswith(b"data: "):
            events.append(block[6:])
    assert events[-1] == b"[DONE]"
    usage = [json.loads(e)["usage"] for e in events[:-1] if json.loads(e).get("usage")]
    assert usage and usage[-1]["completion_tokens"] > 0


def test_metrics_endpoint(vllm_server):
    text = httpx.get(f"{vllm_server.base_url}/metrics", timeout=10).text
    from engine.observe.telemetry import parse_metrics

    m = parse_metrics(text)
    assert {"running", "waiting", "kv_usage", "generation_tokens_total"} <= set(m)


def test_second_start_on_a_running_server_is_refused(vllm_server):
    _needs_own_server(vllm_server)
    cfg = vllm_server.server.snapshot().config
    with pytest.raises(ServerBusy, match="already ready"):
        vllm_server.server.start(cfg)


def test_foreign_process_on_the_port_is_reported_and_left_alone(embedded_model, lab_settings):
    port = free_port()
    foreign = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=0.5)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        srv = VLLMServer(lab_settings, port=port)
        with pytest.raises(PortInUse) as e:
            srv.start(ServerConfig(model=embedded_model.path, port=port))
        held = tree(e.value)  # the program holding the port named, and left alone
        assert (held["id"], held["port"], held["pid"]) == (
            "Port {port} is already in use by another program ({name}, pid {pid}); it was left alone: stop that "
            "program or pick another port.", port, foreign.pid), held
        assert foreign.poll() is None, "the foreign process must not be killed"
        assert srv.snapshot().state == STOPPED
    finally:
        foreign.kill()


def test_bad_inputs_never_start_anything(embedded_model, tmp_path, lab_settings):
    srv = VLLMServer(lab_settings, port=free_port())
    base = ServerConfig(model=embedded_model.path, port=srv.port)
    with pytest.raises(ConfigError, match="outside"):
        srv.start(base.with_changes(gpu_memory_utilization=1.5))
    with pytest.raises(ConfigError, match="above this model's limit"):
        srv.start(base.with_changes(max_model_len=100_000), model_max_len=embedded_model.max_len)
    with pytest.raises(Exception, match="does not exist"):
        models.local(tmp_path / "no-such-model")
    assert srv.snapshot().state == STOPPED and srv.snapshot().pid is None


@pytest.mark.slow
def test_unknown_flag_is_caught_from_vllms_own_parser(embedded_model, lab_settings):
    flags = known_flags(MODELS)  # read from the installed vLLM's --help, cached per version
    assert flags and "--max-model-len" in flags and "--gpu-memory-utilization" in flags
    srv = VLLMServer(lab_settings, port=free_port())
    with pytest.raises(ConfigError, match="no flag '--max-model-lenght'"):
        srv.start(ServerConfig(model=embedded_model.path, port=srv.port, extra_args=("--max-model-lenght", "9")),
                  known_flags=flags)


@pytest.mark.slow
def test_a_value_vllm_rejects_ends_in_failed_with_the_cause(embedded_model, lab_settings):
    """A known flag with a bad value passes our checks; vLLM exits and the cause is shown in words."""
    srv = VLLMServer(lab_settings, port=free_port())
    srv.start(ServerConfig(model=embedded_model.path, port=srv.port, enforce_eager=True,
                           extra_args=("--max-num-batched-tokens", "lots")))
    with pytest.raises(ServerFailed, match="rejected a flag"):
        srv.wait_ready(timeout_s=300)
    snap = srv.snapshot()
    assert snap.state == FAILED and "lots" in snap.error
    assert snap.pid is None and not srv.record_path.exists()


@pytest.mark.slow
def test_stop_during_startup_leaves_no_process(embedded_model, lab_settings):
    srv = VLLMServer(lab_settings, port=free_port())
    srv.start(ServerConfig(model=embedded_model.path, port=srv.port, cpu_kvcache_gib=1, enforce_eager=True))
    deadline = time.time() + 300
    family: set[int] = set()
    while time.time() < deadline:  # wait until vLLM has spawned its engine core
        family |= {p.pid for p in _family(srv.snapshot().pid)}
        if len(family) >= 2 or srv.snapshot().state != "starting":
            break
        time.sleep(0.5)
    snap = srv.snapshot()
    assert snap.state == "starting", snap.error
    assert srv.record_path.exists()
    srv.stop()
    assert srv.snapshot().state == STOPPED
    assert not srv.record_path.exists()
    alive = [pid for pid in family if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"left behind: {alive}"
