"""The naive transformers baseline, for real: a worker process running transformers on the embedded
model (CPU here). Small on purpose (few prompts, <= 32 new tokens); no timing thresholds."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from engine.errors import LabError
from engine.measure.baseline.naive import run_naive
from engine.measure.baseline.protocol import ModelNotFound, NaiveSpec, PromptTooLong
from engine.measure.progress import Progress
from engine.observe import hardware

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [
    "What are the symptoms of diabetes?",
    "Explain how a transformer model works in 3 sentences.",
    "What is the difference between TCP and UDP?",
    "Summarize the key ideas of reinforcement learning.",
]


def _model_dir() -> Path | None:
    env = os.environ.get("SERVING_LAB_TEST_MODEL_DIR")
    candidates = [Path(env)] if env else []
    try:
        from engine.serving.models import EMBEDDED_NAME

        from .conftest import MODELS

        prepared = MODELS / EMBEDDED_NAME
        if (prepared / ".complete").exists():  # conversion finished
            candidates.append(prepared)
    except Exception:
        pass
    candidates.append(Path("/tmp/conv/out"))
    for c in candidates:
        if (c / "config.json").is_file() and any(c.glob("*.safetensors")):
            return c
    return None


@pytest.fixture(scope="module")
def model_dir() -> Path:
    d = _model_dir()
    if d is None:
        pytest.fail("no embedded model folder: run `make test` (or `python -m engine model prepare`)")
    return d


@pytest.fixture()
def tiny_random_dir(tmp_path, model_dir) -> Path:
    """A tiny Llama config with the embedded tokenizer (and its chat template), no weights."""
    d = tmp_path / "tiny-llama"
    d.mkdir()
    for f in model_dir.iterdir():
        if f.name.startswith("tokenizer") or f.name in ("chat_template.jinja", "special_tokens_map.json"):
            shutil.copy(f, d / f.name)
    base = json.loads((model_dir / "config.json").read_text())
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "vocab_size": base["vocab_size"], "max_position_embeddings": 256,
        "bos_token_id": base.get("bos_token_id"), "eos_token_id": base.get("eos_token_id"),
        "pad_token_id": base.get("pad_token_id"), "tie_word_embeddings": True,
    }
    (d / "config.json").write_text(json.dumps(cfg))
    return d


class Recorder(Progress):
    def __init__(self, cancel_after: int | None = None, cancel: threading.Event | None = None):
        self.stages: list[str] = []
        self.plan = None
        self.done: list = []
        self.totals: list = []
        self.completed = None
        self.pid: int | None = None
        self.cancel_after, self.cancel = cancel_after, cancel

    def on_start(self, plan):
        self.plan = plan

    def on_stage(self, text):
        self.stages.append(text)

    def on_request_done(self, record, totals):
        self.done.append(record)
        self.totals.append(totals)
        if self.cancel_after is not None and len(self.done) >= self.cancel_after:
            self.cancel.set()

    def on_complete(self, result):
        self.completed = result

    def on_worker(self, pid):
        self.pid = pid


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slow
def test_sequential_two_prompts(model_dir):
    obs = Recorder()
    spec = NaiveSpec(model_path=str(model_dir), prompts=PROMPTS[:2], max_new_tokens=16, warmup=False)
    res = run_naive(spec, observer=obs)

    assert res.kind == "naive" and len(res.records) == 2
    for i, r in enumerate(res.records):
        assert r.ok and r.index == i
        assert r.output_tokens > 0 and r.output_tokens <= 16
        assert r.tokens_source == "generated"
        assert r.prompt_tokens > 0
        assert r.ttft is not None and r.e2e is not None and 0 < r.ttft < r.e2e
        assert len(r.chunk_times) == r.output_tokens
        assert r.chunk_times == sorted(r.chunk_times)
    # one after another: request 2 starts after request 1 ended
    assert res.records[1].send_time >= res.records[0].end_time
    # the comparison states its terms
    assert res.config["max_new_tokens"] == 16 and res.config["temperature"] == 0.7
    if res.config["device"].startswith("cuda"):
        assert res.config["dtype"] == "float16"  # the lab's dtype
        assert res.extra.naive.memory.after_load.allocated > 0
    else:
        assert res.config["device"] == "cpu" and res.config["dtype"] in ("bfloat16", "float32")
    assert res.extra.naive.params > 100_000_000 and res.extra.naive.load_s > 0 and res.extra.naive.dtype_reason
    assert res.extra.model_size.weights > 0 and res.extra.model_size.kv_per_token > 0  # its ceiling's inputs
    mem = res.extra.naive.memory
    assert mem.after_load.rss > 0 and mem.after_run is not None and mem.after_cleanup is not None
    # the worker's own peak (the kernel's high-water mark it reported) and that its process is gone: what the
    # guided lab's "Free the memory" shows where there is no GPU, never the system's RAM
    assert mem.worker_peak_rss >= mem.after_load.rss and mem.worker_exited is True
    assert res.summary.get("completed") == 2
    # observer saw the whole story
    assert obs.plan and obs.plan.total == 2
    assert any("loading model" in s for s in obs.stages) and any(s.startswith("request 2/2") for s in obs.stages)
    assert [t.done for t in obs.totals] == [1, 2]
    assert obs.completed is res
    assert _gone(res.extra.naive.worker_pid)


@pytest.mark.slow
def test_static_batch_shares_one_end(model_dir):
    spec = NaiveSpec(model_path=str(model_dir), prompts=PROMPTS[:3], max_new_tokens=16, mode="static-batch",
                     warmup=False)
    res = run_naive(spec)

    assert res.kind == "static-batch" and len(res.records) == 3
    assert all(r.ok and r.output_tokens > 0 for r in res.records)
    assert len({r.end_time for r in res.records}) == 1  # everyone waits for the longest
    assert len({r.first_token_time for r in res.records}) == 1  # the batch's first step
    assert all(r.send_time == 0.0 for r in res.records)
    assert all(r.ttft < r.e2e for r in res.records)
    assert res.load.concurrency == 3
    # prompts differ in length: the true (unpadded) lengths are recorded
    assert len({r.prompt_tokens for r in res.records}) > 1


@pytest.mark.slow
def test_cancel_keeps_finished_requests_and_kills_worker(model_dir):
    cancel = threading.Event()
    obs = Recorder(cancel_after=1, cancel=cancel)
    spec = NaiveSpec(model_path=str(model_dir), prompts=PROMPTS, max_new_tokens=32, warmup=False)
    res = run_naive(spec, observer=obs, cancel=cancel)

    assert res.extra.cancelled is True
    assert 1 <= len(res.records) < len(PROMPTS)
    assert all(r.ok for r in res.records)
    assert any("cancel" in n for n in res.extra.naive.notes)
    pid = res.extra.naive.worker_pid
    assert pid == obs.pid
    assert not psutil.pid_exists(pid) or _gone(pid)


def test_missing_model_folder_is_a_clear_error(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelNotFound) as ei:
        run_naive(NaiveSpec(model_path=str(missing), prompts=["hi"], max_new_tokens=4))
    assert isinstance(ei.value, LabError)
    assert str(missing) in str(ei.value) and ":" in str(ei.value)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["static-batch", "sequential"])
def test_a_random_weight_run_warms_up_first_and_its_progress_names_the_prompts(tiny_random_dir, mode):
    """A tiny random-weight Llama (quick on a CPU), one worker a mode: the warm-up runs first and is reported; the
    progress says the run's own sizes (a static batch of 5 once read "static batch of 200: step 23/200", the
    warm-up's token count where the batch's size belongs); the text is marked a placeholder; the worker reports its
    own peak memory and is gone."""
    obs = Recorder()
    prompts = PROMPTS[:3]
    res = run_naive(NaiveSpec(model_path=str(tiny_random_dir), prompts=prompts, max_new_tokens=12, random_weights=True,
                              mode=mode, warmup=True), observer=obs)
    stages = [str(s) for s in obs.stages]
    assert len(res.measured) == len(prompts) and all(r.ok and r.output_tokens > 0 for r in res.measured)
    assert res.extra.naive.warmup_s > 0
    assert any(s.startswith("warming up, not measured") for s in stages)  # the warm-up ran first
    if mode == "static-batch":
        sizes = {int(m.group(1)) for s in stages if (m := re.match(r"static batch of (\d+)", s))}
        assert sizes == {len(prompts)}, stages
    else:
        totals = {int(m.group(1)) for s in stages if (m := re.match(r"request \d+/(\d+)", s))}
        assert totals == {len(prompts)}, stages
    assert res.extra.server.placeholder_text is True
    assert 0 < res.extra.naive.params < 10_000_000
    mem = res.extra.naive.memory  # the worker's own peak as the kernel counted it, and its process gone
    assert mem.worker_peak_rss >= mem.after_load.peak_rss > 0 and mem.worker_exited is True


def test_a_worker_slow_to_exit_after_done_keeps_its_run(tiny_random_dir, tmp_path, monkeypatch):
    """The real worker, whose exit after "done" outlives the grace (CI saw a loaded machine take that long to tear
    one down): it is stopped, and the run it measured is the result, not "The naive worker died from SIGTERM"."""
    import engine.measure.baseline.naive as naive

    monkeypatch.setattr(naive, "TERMINATE_GRACE_S", 0.2)
    slow = tmp_path / "python-slow-exit"  # an interpreter that runs the worker, closes its pipes, then lingers
    slow.write_text(f"""#!/bin/sh
exec {sys.executable} -c 'import os, sys, time
from engine.measure.baseline import naive_worker
rc = naive_worker.main()
sys.stdout.flush(); sys.stderr.flush(); os.close(1); os.close(2)
time.sleep(600)
sys.exit(rc)'
""")
    slow.chmod(0o755)
    prompts = PROMPTS[:2]
    res = run_naive(NaiveSpec(model_path=str(tiny_random_dir), prompts=prompts, max_new_tokens=4,
                              random_weights=True, warmup=False), python=str(slow))
    assert len(res.measured) == len(prompts) and all(r.ok for r in res.measured)
    assert res.extra.naive.memory.worker_exited is True and _gone(res.extra.naive.worker_pid)


def test_warmup_plan_meets_every_shape_of_the_run():
    """Every prefill length and every decode length the measured run reaches is met in the warm-up."""
    from engine.measure.baseline.naive_worker import warmup_plan

    for lengths, max_new, max_len in (([17, 22, 19, 19, 20], 200, 8192), ([5, 40], 16, 0), ([12], 8, 64)):
        plan = warmup_plan(lengths, max_new, max_len, "sequential")
        prefill = {lengths[i] for rows, _ in plan for i in rows}
        decode = {lengths[i] + k for rows, n in plan for i in rows for k in range(1, n + 1)}
        assert set(lengths) <= prefill
        assert {L + k for L in lengths for k in range(1, max_new + 1)} <= decode
    # capped by the model's context: never asks for more positions than it has
    assert warmup_plan([17, 22], 200, 30, "sequential")[-1] == ([0], 13)
    assert warmup_plan([17, 22, 9], 64, 0, "static-batch") == [([0, 1, 2], 64)]


@pytest.mark.slow
def test_prompt_too_long(tiny_random_dir):
    cfg = json.loads((tiny_random_dir / "config.json").read_text())
    cfg["max_position_embeddings"] = 40
    (tiny_random_dir / "config.json").write_text(json.dumps(cfg))
    spec = NaiveSpec(model_path=str(tiny_random_dir), prompts=["hello", PROMPTS[1]], max_new_tokens=16,
                     random_weights=True)
    with pytest.raises(PromptTooLong) as ei:
        run_naive(spec)
    assert "Prompt" in str(ei.value) and "40" in str(ei.value)
    assert ei.value.result is not None and ei.value.result.records == []


@pytest.mark.slow
def test_worker_exits_when_parent_dies(tiny_random_dir):
    """Kill the process that called run_naive mid-generation: the worker notices (stdin EOF) and exits."""
    script = (
        "import sys\n"
        "from engine.measure.baseline.naive import run_naive\n"
        "from engine.measure.baseline.protocol import NaiveSpec\n"
        "from engine.measure.progress import Progress\n"
        "class O(Progress):\n"
        "    def on_worker(self, pid): self.pid = pid\n"
        "    def on_start(self, plan): print(self.pid, flush=True)\n"  # the model is loaded, generation runs
        f"run_naive(NaiveSpec(model_path={str(tiny_random_dir)!r}, prompts=['hi'] * 8, max_new_tokens=200,"
        " random_weights=True, warmup=False), observer=O())\n"  # the warm-up would only delay the kill
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env)
    try:
        line = parent.stdout.readline()
        worker = int(line)
        assert psutil.pid_exists(worker)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _gone(worker):
            time.sleep(0.2)
        assert _gone(worker)
    finally:
        if parent.poll() is None:
            parent.kill()


@pytest.mark.slow  # NVML, as the product picks its device: importing torch to ask costs every collection seconds
@pytest.mark.skipif(hardware.default_device() != "cuda", reason="needs an NVIDIA GPU")
def test_cuda_memory_report(tiny_random_dir):
    """On a GPU: torch.cuda numbers inside the worker, NVML numbers outside it, and the memory is back
    once the worker has exited."""
    res = run_naive(NaiveSpec(model_path=str(tiny_random_dir), prompts=PROMPTS[:2], max_new_tokens=8,
                              random_weights=True, device="cuda"))
    mem = res.extra.naive.memory
    assert res.config["device"].startswith("cuda") and res.config["dtype"] == "float16"
    for point in ("after_load", "after_run", "after_cleanup"):
        assert {"allocated", "reserved", "max_allocated", "device_used"} <= set(getattr(mem, point).to_dict())
    # what del + gc + empty_cache leaves inside the worker: the weights are gone (cuBLAS keeps a small
    # workspace, ~32 MiB, which can exceed a tiny model's weights, so compare with the end of the run)
    assert mem.after_cleanup.allocated < mem.after_run.allocated
    assert mem.after_run.max_allocated >= mem.after_load.allocated
    assert mem.before.device_used is not None and mem.after_exit.device_used is not None
    assert mem.left_after_exit is not None
    assert res.extra.naive.device_name
