"""Several GPUs through vLLM itself: the parallel sizes and the GPU choice as settings (rendered, checked
against the GPUs present, sized per GPU by the fit check), and the per-machine commands of a Ray cluster.
NVML's device list is replaced by a known one: this machine has no GPU, and what is checked is the
arithmetic against a given set of GPUs."""
from __future__ import annotations

import subprocess
import sys

import pytest

from engine.errors import ConfigError
from engine.serving import cluster, config
from engine.serving.config import ServerConfig

from .conftest import ROOT

H200 = 141 * 10**9


@pytest.fixture
def two_gpus(monkeypatch):
    gpus = [{"index": i, "name": "NVIDIA H200", "uuid": f"GPU-{i}", "used": 0, "total": H200, "procs": {}}
            for i in range(2)]
    monkeypatch.setattr(config.nvml, "devices", lambda: gpus)
    return gpus


def test_parallel_sizes_and_gpus_render_as_flags_and_cuda_visible_devices():
    cfg = ServerConfig(model="m", device="cuda", tensor_parallel_size=2, pipeline_parallel_size=2,
                       data_parallel_size=2, gpus=(4, 5, 6, 7, 0, 1, 2, 3))
    argv = cfg.argv()
    for flag in ("--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size"):
        assert argv[argv.index(flag) + 1] == "2"
    assert cfg.env()["CUDA_VISIBLE_DEVICES"] == "4,5,6,7,0,1,2,3"
    assert cfg.gpus_needed == 8
    assert "CUDA_VISIBLE_DEVICES=4,5,6,7,0,1,2,3 python -m" in cfg.shell_command()
    one = ServerConfig(model="m", device="cuda")
    assert "--pipeline-parallel-size" not in one.argv() and "CUDA_VISIBLE_DEVICES" not in one.env()
    assert ServerConfig.from_dict(cfg.to_dict()) == cfg  # a stored config reads back (gpus as a list in JSON)


@pytest.mark.parametrize("changes, words", [
    ({"tensor_parallel_size": 2, "data_parallel_size": 2}, "needs 4 GPUs, and 2 are picked"),
    ({"pipeline_parallel_size": 2, "gpus": (1,)}, "needs 2 GPUs, and 1 is picked"),
    ({"gpus": (3,)}, "GPU 3 is not on this machine (it has 0, 1)"),
    ({"gpus": (0, 0)}, "A GPU is picked twice"),
    ({"data_parallel_size": 0}, "data-parallel-size must be at least 1"),
])
def test_sizes_beyond_the_gpus_present_are_refused_with_a_sentence(two_gpus, changes, words):
    with pytest.raises(ConfigError) as e:
        ServerConfig(model="m", device="cuda", **changes).validate()
    assert words in str(e.value)


def test_sizes_the_gpus_allow_pass(two_gpus):
    for ok in ({"tensor_parallel_size": 2}, {"data_parallel_size": 2, "gpus": (1, 0)}, {"gpus": (1,)}):
        ServerConfig(model="m", device="cuda", **ok).validate()


def test_on_cpu_the_gpu_settings_are_refused():
    with pytest.raises(ConfigError, match="apply to GPUs"):
        ServerConfig(model="m", device="cpu", data_parallel_size=2).validate()


def test_fit_check_sizes_each_gpu(two_gpus, monkeypatch):
    """Llama 3 8B in fp16 (16.1 GB of weights, 128 KiB of KV per token): split 2 ways, each GPU holds half
    the weights and half of every sequence's KV, so twice the sequences fit; DP=2 holds two whole copies."""
    from engine.serving import models
    from engine.serving.config import fit_check

    monkeypatch.setattr("engine.serving.config.nvml.devices", lambda: two_gpus)
    llama = models.ModelShape(params=8_030_261_248, layers=32, kv_heads=8, head_dim=128, max_len=8192)
    spec = models.ModelSpec(kind="local", path="m", label="Llama 3 8B", shape=llama)
    base = ServerConfig(model="m", device="cuda", dtype="float16", max_model_len=2048, gpu_memory_utilization=0.9)
    one = fit_check(base, spec, "cuda")
    tp = fit_check(base.with_changes(tensor_parallel_size=2), spec, "cuda")
    dp = fit_check(base.with_changes(data_parallel_size=2), spec, "cuda")
    assert tp.weights_gb == pytest.approx(one.weights_gb / 2)
    assert tp.kv_gb == pytest.approx(one.kv_gb / 2)
    assert "per GPU" in tp.message and "on each of 2 GPUs" in tp.message
    seqs = lambda r: float(r.message.split("room for about ")[1].split(" full")[0].replace(",", ""))  # noqa: E731
    room = 141e9 / 1024**3 * 0.9 - 1.0
    assert seqs(one) == pytest.approx((room - one.weights_gb) / one.kv_gb, abs=1)
    assert seqs(tp) == pytest.approx((room - one.weights_gb / 2) / (one.kv_gb / 2), abs=1)
    assert seqs(dp) == pytest.approx(2 * seqs(one), abs=2)


def test_ray_commands_start_the_head_then_the_workers_then_vllm_split_tp_within_and_pp_across():
    cfg = ServerConfig(model="meta-llama/Meta-Llama-3-8B-Instruct", device="cuda", api_key="s3cret")
    steps = cluster.ray_commands(cfg, "10.0.0.1", nodes=3, gpus_per_node=8)
    assert len(steps) == 1 + 2 + 1
    assert "ray start --head --port 6379 --num-gpus 8" in steps[0].command
    assert all("ray start --address 10.0.0.1:6379 --num-gpus 8" in s.command for s in steps[1:3])
    serve = steps[-1].command
    for piece in ("--tensor-parallel-size 8", "--pipeline-parallel-size 3", "--distributed-executor-backend ray",
                  "--host 0.0.0.0", "--port 8000"):
        assert piece in " ".join(serve.split()), piece
    assert "s3cret" not in "".join(s.command for s in steps)  # the key stays a variable
    assert "24 GPUs" in steps[-1].where


@pytest.mark.parametrize("head, nodes, per_node, words", [
    ("localhost", 2, 8, None), ("127.0.0.1", 2, 8, "loopback"), ("10.0.0.1; rm -rf /", 2, 8, "not an address"),
    ("10.0.0.1", 65, 8, "outside 1 to 64"), ("10.0.0.1", 2, 0, "outside 1 to 16"),
])
def test_ray_inputs_are_checked(head, nodes, per_node, words):
    cfg = ServerConfig(model="m", device="cuda")
    if words is None:
        cluster.ray_commands(cfg, head, nodes, per_node)  # a host name is taken as given
        return
    with pytest.raises(ConfigError, match=words):
        cluster.ray_commands(cfg, head, nodes, per_node)


def test_the_cli_prints_each_machines_commands():
    p = subprocess.run([sys.executable, "-m", "engine", "cluster", "--head", "10.0.0.1", "--nodes", "2",
                        "--gpus-per-node", "4", "--model", "hub:meta-llama/Meta-Llama-3-8B-Instruct"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("ray start") == 2 and "--pipeline-parallel-size 2" in p.stdout
    assert "attach to http://10.0.0.1:8000" in p.stdout


def test_monitor_names_each_gpus_processes_and_whose_they_are():
    """The newest sample's per-GPU processes, each named and told apart: the server's tree (its API server
    and, with parallelism, one worker per GPU) from another program's."""
    import os
    from types import SimpleNamespace

    from engine.observe.monitor import Monitor
    from engine.observe.telemetry import Sample

    me, child = os.getpid(), subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sample = Sample(t=0.0, memory=[
            {"series": "GPU 0", "used_gb": 40, "total_gb": 140, "processes": [{"pid": child.pid, "used_gb": 38.5}]},
            {"series": "GPU 1", "used_gb": 60, "total_gb": 140, "processes": [{"pid": child.pid, "used_gb": 38.5},
                                                                               {"pid": 1, "used_gb": 20.0}]}])
        monitor = Monitor(SimpleNamespace(latest=lambda: sample), lambda: SimpleNamespace(pid=me), lambda: {})
        rows = monitor.gpu_workers()
    finally:
        child.kill()
        child.wait()
    assert [(r["gpu"], r["pid"], r["owner"]) for r in rows] == [
        ("GPU 0", child.pid, "vLLM server"), ("GPU 1", child.pid, "vLLM server"), ("GPU 1", 1, "another program")]
    assert rows[0]["process"].startswith("python")
