"""The physical limit: the memory-bandwidth ceiling's arithmetic, where the bandwidth comes
from (the GPU table by NVML name, the CPU's copy benchmark), what a model's decode step reads, and a
stored run's ceiling said from what was stored with it."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from engine import figures
from engine.cli.summary import summary_table
from engine.measure.judge import ceiling
from engine.measure.judge.stats import summarize
from engine.measure.workloads import scenarios
from engine.messages import translate
from engine.observe import bandwidth
from engine.results.records import ModelSize, Notes, RequestRecord, RunResult
from engine.results.store import RunStore
from engine.serving.models import LLAMA3_8B_CONFIG
from tests.said import said, values

LLAMA3_8B_FP16 = 8_030_261_248 * 2  # bytes: its parameters (as torch counts them) in fp16
H200 = {"gb_s": 4800.0, "source": "table", "reference": "NVIDIA datasheet, H200: 4.8 TB/s"}


# -- the arithmetic ---------------------------------------------------------------------------------

def test_llama3_8b_fp16_on_an_h200_cannot_decode_faster_than_about_300_tok_s():
    assert ceiling.decode_ceiling(4.8e12, 16.06e9, 0) == pytest.approx(298.9, abs=0.1)
    # the KV cache read each step lowers it: 1,000 tokens of context at 128 KiB a token (fp16, 8 KV heads)
    assert ceiling.decode_ceiling(4.8e12, 16.06e9, 131_072, 1000) == pytest.approx(4.8e12 / (16.06e9 + 131.072e6))


def test_a_batch_shares_the_weights_but_not_the_kv_cache():
    w, kv, ctx, bw = 16.06e9, 131_072, 1000, 4.8e12
    per_request = ceiling.decode_ceiling(bw, w, kv, ctx, batch=64)
    assert per_request == pytest.approx(bw / (w + 64 * kv * ctx))  # each step is slower ...
    assert 64 * per_request == pytest.approx(64 * bw / (w + 64 * kv * ctx))  # ... but makes 64 tokens
    assert 64 * per_request > 40 * ceiling.decode_ceiling(bw, w, kv, ctx)


def _folder(tmp_path: Path, config: dict, tensors: dict[str, list[int]] | None = None) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config))
    if tensors is not None:  # a safetensors file's header (the tensors' data is never read)
        header = json.dumps({k: {"dtype": "BF16", "shape": s, "data_offsets": [0, 0]} for k, s in tensors.items()})
        (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode())
    return tmp_path


def test_a_decode_step_reads_every_weight_but_an_untied_input_embedding(tmp_path):
    size = ceiling.model_bytes(str(_folder(tmp_path, LLAMA3_8B_CONFIG)), "float16")
    embedding = 128_256 * 4096 * 2  # one row per request is read, not the table
    assert size.weights == LLAMA3_8B_FP16 - embedding == 15_009_849_344
    assert size.kv_per_token == 32 * 2 * 8 * 128 * 2 == 131_072
    assert ceiling.model_bytes(str(tmp_path), "float32").weights == 2 * size.weights
    assert ceiling.server_model_bytes({"model": str(tmp_path), "dtype": "float16",
                                       "extra_args": ["--kv-cache-dtype", "fp8"]}).kv_per_token == 65_536


def test_the_parameter_count_comes_from_the_safetensors_headers(tmp_path):
    cfg = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 100, "tie_word_embeddings": True, "dtype": "bfloat16", "model_type": "other"}
    _folder(tmp_path, cfg, {"embed.weight": [100, 64], "layer.0.w": [64, 64], "norm": [64]})
    size = ceiling.model_bytes(str(tmp_path))  # "auto": the checkpoint's bfloat16
    assert size.weights == (100 * 64 + 64 * 64 + 64) * 2  # tied: the embedding is the output head, read whole
    assert size.kv_per_token == 2 * 2 * 2 * 16 * 2


def test_a_model_without_a_readable_config_has_no_size(tmp_path):
    assert ceiling.model_bytes(str(tmp_path / "missing")) is None
    (tmp_path / "config.json").write_text("{not json")
    assert ceiling.model_bytes(str(tmp_path)) is None


# -- the bandwidth ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, gb_s", [
    ("NVIDIA H200", 4800), ("NVIDIA H200 NVL", 4800), ("NVIDIA H100 80GB HBM3", 3350), ("NVIDIA H100 PCIe", 2000),
    ("NVIDIA H100 NVL", 3900), ("NVIDIA A100-SXM4-80GB", 2039), ("NVIDIA A100 80GB PCIe", 1935),
    ("NVIDIA A100-SXM4-40GB", 1555), ("NVIDIA A100-PCIE-40GB", 1555), ("NVIDIA L40S", 864), ("NVIDIA A10G", 600),
    ("NVIDIA L4", 300), ("NVIDIA GeForce RTX 4090", 1008), ("Tesla T4", 320), ("NVIDIA GH200 480GB", 4000),
])
def test_the_gpu_table_matches_nvml_names(name, gb_s):
    bw = bandwidth.from_table(name)
    assert (bw.gb_s, bw.source) == (gb_s, "table") and bw.said == "table: NVIDIA datasheet"


def test_a_gpu_the_table_lacks_has_no_datasheet_figure():
    assert bandwidth.from_table("NVIDIA GeForce RTX 2060") is None
    assert bandwidth.gpu("NVIDIA GeForce RTX 2060") is None  # no NVML index to ask


def test_the_cpu_copy_benchmark_is_positive_and_measured_once_per_boot(monkeypatch, tmp_path):
    calls = []
    real = bandwidth.copy_benchmark
    monkeypatch.setattr(bandwidth, "copy_benchmark", lambda: calls.append(1) or real(mb=64, budget_s=0.2))

    def as_a_new_process():
        with bandwidth._measuring:  # a Lab of an earlier test may be measuring in the background: let it finish
            bandwidth._this_process.clear()

    as_a_new_process()
    try:
        first, second = bandwidth.cpu(tmp_path), bandwidth.cpu()  # a later caller with no folder: the same
        as_a_new_process()  # the kept measurement, not a second benchmark
        again = bandwidth.cpu(tmp_path)
        (tmp_path / "cpu-bandwidth.json").write_text(
            (tmp_path / "cpu-bandwidth.json").read_text().replace('"boot": "', '"boot": "another '))
        as_a_new_process()  # after a reboot (or on another machine sharing the folder): measured
        after_boot = bandwidth.cpu(tmp_path)
    finally:
        as_a_new_process()  # the next caller measures with the real sizes
    assert calls == [1, 1] and first is second
    assert again.gb_s == pytest.approx(first.gb_s, abs=0.05) and again.source == "measured"
    assert after_boot.gb_s > 0
    assert first.gb_s > 0 and first.source == "measured" and first.said == "measured: copy benchmark"
    assert bandwidth.Bandwidth.from_dict(first.to_dict()).gb_s == pytest.approx(first.gb_s, abs=0.05)


@pytest.mark.parametrize("stored", [None, "fast", {"gb_s": -1, "source": "table"}, {"gb_s": 5.0, "source": "guess"},
                                    {"gb_s": True, "source": "measured"}, {"gb_s": float("nan"), "source": "table"}])
def test_a_stored_bandwidth_that_is_not_one_is_not_read(stored):
    assert bandwidth.Bandwidth.from_dict(stored) is None


# -- a run against its ceiling ----------------------------------------------------------------------

def _run(hardware: dict, tok_s: float, n: int = 1, kind: str = "vllm", device: str = "cuda") -> RunResult:
    """`n` requests decoding together at `tok_s` each (n=1: one request), 200 tokens after a 30-token prompt."""
    recs = []
    for i in range(n):
        first = 0.05
        chunks = [first + k / tok_s for k in range(200)]
        recs.append(RequestRecord(index=i, prompt="p", send_time=0.0, end_time=chunks[-1], first_token_time=first,
                                  chunk_times=chunks, prompt_tokens=30, output_tokens=200))
    run = RunResult(kind=kind, scenario="vllm-5-sequential", label="vLLM", records=recs, duration=recs[0].end_time,
                    started_at=1_764_500_000.0, model="llama3", config={"device": device}, hardware=hardware,
                    extra=Notes(model_size=ModelSize(weights=LLAMA3_8B_FP16, kv_per_token=131_072)))
    run.summary = summarize(run.records, run.duration)
    return run


def test_a_runs_ceiling_sentence_is_built_from_its_stored_hardware(tmp_path):
    run = _run({"accelerator": "gpu", "gpus": [{"index": 0, "name": "NVIDIA H200", "memory_bandwidth": H200}]}, 198.0)
    store = RunStore(tmp_path / "history.sqlite")
    store.save(run)
    back = store.load(run.id)  # as History reads it, on whatever machine
    c = ceiling.run_ceiling(back)
    assert c.batch == 1 and c.context == 130
    assert c.ceiling == pytest.approx(4.8e12 / (LLAMA3_8B_FP16 + 131_072 * 130))
    assert values(c.sentence) == {"measured": "198", "bandwidth": "4,800", "source": "table: NVIDIA datasheet",
                                  "ceiling": "299", "batch": "1.0", "share": "66%"}  # said again in either language
    assert str(c.sentence) in summary_table(back)


def test_a_cpu_run_is_held_to_its_measured_bandwidth_not_the_readers():
    cpu = {"memory_bandwidth": {"gb_s": 14.2, "source": "measured", "reference": "copy benchmark"}}
    run = _run({"accelerator": "cpu", "gpus": [], "cpu": cpu}, 0.5, device="cpu")
    c = ceiling.run_ceiling(run)
    assert c.bandwidth.gb_s == 14.2 and "14 GB/s, measured: copy benchmark" in c.sentence
    # a naive run on the GPU of a GPU machine: the worker's device decides
    gpu_hw = {"gpus": [{"index": 0, "name": "NVIDIA H200", "memory_bandwidth": H200}], "cpu": cpu,
              "naive_device": {"type": "cuda", "nvml_index": 0, "description": "NVIDIA H200"}}
    assert ceiling.run_ceiling(_run(gpu_hw, 41.0, kind="naive")).bandwidth.gb_s == 4800
    # faster than the ceiling: one of the figures is off, and the sentence says so
    assert "above the ceiling" in ceiling.run_ceiling(_run({"cpu": cpu}, 60.0, device="cpu")).sentence


def test_a_batch_is_held_to_the_ceiling_at_its_size():
    hw = {"gpus": [{"index": 0, "name": "NVIDIA H200", "memory_bandwidth": H200}]}
    c = ceiling.run_ceiling(_run(hw, 150.0, n=10))
    assert c.batch == pytest.approx(10)
    assert c.ceiling == pytest.approx(ceiling.decode_ceiling(4.8e12, LLAMA3_8B_FP16, 131_072, 130, 10))
    assert values(c.sentence)["batch"] == "10.0" and "at this batch" in said(c.sentence).template
    # an older GPU run without a stored figure: the table by its NVML name; two GPUs share the weights
    old = _run({"gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}]}, 150.0)
    old.config["tensor_parallel_size"] = 2
    assert ceiling.run_ceiling(old).bandwidth.gb_s == 2 * 3350


@pytest.mark.parametrize("change", ["no-size", "no-bandwidth", "one-token"])
def test_a_run_missing_a_part_has_no_ceiling(change):
    run = _run({"gpus": [{"index": 0, "name": "NVIDIA H200", "memory_bandwidth": H200}]}, 198.0)
    if change == "no-size":
        run.extra.model_size.weights = None
    elif change == "no-bandwidth":
        run.hardware = {"accelerator": "cpu", "gpus": [], "cpu": {}}
        run.config["device"] = "cpu"
    else:
        for r in run.records:
            r.output_tokens, r.chunk_times = 1, r.chunk_times[:1]
        run.summary = summarize(run.records, run.duration)
    assert ceiling.run_ceiling(run) is None


def test_the_figure_sets_each_run_before_its_ceiling():
    hw = {"gpus": [{"index": 0, "name": "NVIDIA H200", "memory_bandwidth": H200}]}
    naive, vllm = _run(hw, 41.0, kind="naive"), _run(hw, 198.0)
    naive.label = "Naive transformers"
    fig = figures.ceiling_bars([naive, None, vllm])
    ceilings, measured = fig.data
    assert list(measured.x) == pytest.approx([41.0, 198.0]) and all(c > m for c, m in zip(ceilings.x, measured.x))
    assert "Naive transformers 14%, vLLM 66%" in figures.caption(fig)
    assert translate(fig.layout.title.text, "en") and figures.caption(figures.ceiling_bars([])).startswith("No run")


@pytest.mark.server
def test_a_load_test_on_the_real_server_is_stamped_with_its_ceiling(vllm_server, lab_settings):
    """The session's vLLM (CPU) server serving the embedded model, measured by the Lab: the run is saved with
    the model's size and this CPU's measured bandwidth, and says its ceiling."""
    import time

    from engine.lab import Lab

    if vllm_server.server is None:
        pytest.skip("SERVING_LAB_TEST_URL points at an outside server: the Lab has nothing to adopt")
    lab = Lab(lab_settings, port=vllm_server.port)
    try:
        job = lab.run_load(scenarios.get("vllm-5-sequential").load_spec(max_tokens=48))
        deadline = time.time() + 240
        while job.active and time.time() < deadline:
            time.sleep(0.2)
        assert job.status == "done", job.error
        run = lab.history.run(job.result.id)
    finally:
        lab.shutdown()
    assert run.extra.model_size.weights == 134_515_008 * 2  # SmolLM2-135M in bf16, its embedding tied to the head
    assert run.hardware["cpu"]["memory_bandwidth"]["source"] == "measured"
    c = ceiling.run_ceiling(run)
    assert c is not None and c.measured > 0 and f"{c.bandwidth.gb_s:,.0f} GB/s, measured: copy benchmark" in c.sentence
    print(f"\n{c.sentence}\n{c.why}")  # for the record: pytest -s shows what this machine reached
