"""Against `vllm bench serve`: `--goodput ttft:MS tpot:MS e2el:MS` as it takes them (each bad one a sentence), an
export whose keys are a superset of its result JSON (request_goodput always, queue_times, the observed concurrency
counted as vLLM counts it), and a multi-turn run's TTFT printed per turn."""
import pytest

from engine.measure.judge import stats
from engine.results.records import RequestRecord, RunResult
from engine.results.vllm_bench import to_bench_json

from .conftest import cli_in_process

DEAD = "http://127.0.0.1:9"

# The keys of vllm 0.32's `vllm bench serve --save-result --save-detailed` JSON for a text-generation run
# (vllm/benchmarks/serve.py: main's result_json, benchmark()'s result, process_one_metric's default percentile)
VLLM_KEYS = {
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
    "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput", "input_lens",
    "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times", "generated_texts", "errors",
    "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
    *(f"{stat}_{name}_ms" for name in ("ttft", "tpot", "itl", "e2el") for stat in ("mean", "median", "std", "p99")),
}
# and with --max-concurrency, the client's wait for a slot (its "Client Queue Time")
VLLM_QUEUE_KEYS = {f"{stat}_client_queue_time_ms" for stat in ("mean", "median", "std", "p99")}


def _rec(i, send, length, *, planned=None, turn=None, conversation=None):
    chunks = [send + 0.05 + k * length / 5 for k in range(5)]
    return RequestRecord(index=i, prompt="p", send_time=send, first_token_time=chunks[0], end_time=chunks[-1],
                         chunk_times=chunks, prompt_tokens=10 + 20 * (turn or 0), output_tokens=5,
                         planned_time=planned, turn=turn, conversation=conversation)


def _run(records, **load) -> RunResult:
    run = RunResult(kind="vllm", scenario="concurrent-10", label="x", records=records, duration=3.0,
                    started_at=1.76e9, load={"shape": "concurrency", "concurrency": 1, **load})
    run.summary = stats.summarize(records, run.duration)
    return run


def test_the_export_has_every_key_vllm_bench_serve_writes():
    run = _run([_rec(i, 0.4 * i, 0.3) for i in range(6)])
    obj = to_bench_json(run)
    assert VLLM_KEYS | VLLM_QUEUE_KEYS <= obj.keys(), sorted(VLLM_KEYS - obj.keys())
    assert obj["request_goodput"] is None  # no SLO asked for: the key stays, null, as vLLM writes it
    # a closed loop: every request was there from the start and waited for its slot until it was sent
    assert obj["queue_times"] == pytest.approx([0.4 * i for i in range(6)])
    assert obj["rtfx"] == 0.0


def test_the_observed_concurrency_is_counted_as_vllm_counts_it():
    """One request at a time, back to back, each 0.5 s: never two at once, but vLLM counts a request in every
    whole second it touches from the first start, and the second from 1 s holds three of them."""
    recs = []
    for i in range(4):
        r = _rec(i, 0.5 * i, 0.45)
        r.end_time = 0.5 * (i + 1)
        r.chunk_times[-1] = r.end_time
        recs.append(r)
    run = _run(recs)
    assert run.summary.max_concurrency == 1  # ours: the exact peak
    obj = to_bench_json(run)
    assert obj["max_concurrent_requests"] == 3 and obj["peak_in_flight"] == 1


def test_queue_times_of_a_rate_run_and_a_chat():
    rate = _run([_rec(i, 0.3 * i + 0.01, 0.2, planned=0.3 * i) for i in range(4)], shape="poisson", rate=3.0)
    assert to_bench_json(rate)["queue_times"] == pytest.approx([0.01] * 4)
    chat = _run([_rec(2 * c + t, c * 0.1 + t, 0.2, turn=t, conversation=c) for c in range(2) for t in range(2)])
    # a later turn arrives when the reply before it ended (and the think time passed): not recorded, so unknown
    assert to_bench_json(chat)["queue_times"] == [pytest.approx(0.0), None, pytest.approx(0.1), None]


def test_goodput_on_ttft_tpot_and_e2e():
    from engine.measure.judge.slo import Slo

    slo = Slo.parse(["ttft:200", "tpot:50", "e2el:2000"])
    assert slo == Slo(ttft_ms=200.0, tpot_ms=50.0, e2el_ms=2000.0)
    assert slo.goodput_config() == {"ttft": 200.0, "tpot": 50.0, "e2el": 2000.0}
    recs = [_rec(i, 0.0, 0.1 * (i + 1)) for i in range(10)]  # answers of 0.13, 0.21, .. 0.85 s
    good = stats.summarize(recs, 2.0, goodput_slo=Slo.parse(["e2el:500"]).goodput_config()).request_goodput
    assert good == pytest.approx(5 / 2.0)  # 0.13 to 0.45 s: five answers within 500 ms, in 2 s


@pytest.mark.parametrize("argv, says", [
    (["--goodput", "ttft"], "--goodput takes KEY:MILLISECONDS pairs such as ttft:200"),
    (["--goodput", "itl:10"], "--goodput judges ttft, tpot or e2el, not 'itl'"),
    (["--goodput", "ttft:fast"], "--goodput ttft:fast is not a number of milliseconds"),
    (["--goodput", "ttft:0"], "The TTFT limit must be a number of milliseconds above 0, not 0"),
    (["--goodput", "ttft:200", "ttft:300"], "--goodput names ttft twice"),
    (["--goodput", "e2el:2000", "--slo-ttft-ms", "100"], "--goodput and --slo-ttft-ms both set the SLO"),
])
def test_a_bad_goodput_is_one_sentence(argv, says):
    p = cli_in_process("run", "concurrent-10", "--url", DEAD, *argv)
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr, p.stderr
    line, = p.stderr.splitlines()
    assert line.startswith("error: ") and says in line, line


def test_a_multi_turn_run_prints_its_ttft_per_turn():
    from engine.cli.summary import summary_table

    recs = [_rec(3 * c + t, c * 0.1 + t, 0.2, turn=t, conversation=c) for c in range(4) for t in range(3)]
    for r in recs:  # later turns start slower: their history is longer
        r.first_token_time = r.send_time + 0.05 * (r.turn + 1)
    lines = summary_table(_run(recs)).splitlines()
    turns = [line for line in lines if line.startswith("  turn ")]
    assert turns[0].startswith("  turn 1: TTFT median 50 ms, p99 50 ms; 10 prompt tokens (4 answered)"), turns
    assert turns[2].startswith("  turn 3: TTFT median 150 ms"), turns
    assert any(line.startswith("TTFT by turn") for line in lines)
