"""A run's typed metadata (Load, Notes, Summary): read from whatever shape it was stored or imported in,
written back in that shape, a value of the wrong type kept aside rather than trusted."""
import json
import math

from engine.measure import stats
from engine.results.records import Load, Notes, RequestRecord, RunResult, Summary


def run(**meta) -> RunResult:
    return RunResult(kind="naive", scenario="naive-5", label="naive", records=[], duration=1.0,
                     started_at=1_764_500_000.0, **meta)


def test_each_setting_has_one_name_whatever_it_was_saved_under():
    naive = run(load={"mode": "sequential", "requests": 5, "max_tokens": 200, "concurrency": 1})
    assert (naive.load.shape, naive.load.num_requests, naive.load.max_tokens, naive.load.concurrency) == \
        ("sequential", 5, 200, 1)
    bench = Load.from_dict({"backend": "openai-chat", "request_rate": 4.0, "max_concurrency": 8, "num_prompts": 100})
    assert (bench.backend, bench.rate, bench.concurrency, bench.num_requests) == ("openai-chat", 4.0, 8, 100)


def test_a_value_of_the_wrong_type_is_kept_aside_not_trusted():
    r = run(extra={"placeholder_text": "yes", "kv_cache_tokens": 1.5, "sweep_level": 4},
            load={"concurrency": True, "rate": math.inf})
    assert r.extra.placeholder_text is False and r.extra.kv_cache_tokens is None and r.extra.sweep_level == 4
    assert r.extra.other == {"placeholder_text": "yes", "kv_cache_tokens": 1.5}
    assert r.load.concurrency is None and r.load.other == {"concurrency": True} and r.load.rate == math.inf


def test_the_stored_shape_round_trips():
    stored = {"load": {"shape": "burst", "num_requests": 10, "seed": 0, "timeout_s": 300.0},
              "extra": {"kv_cache_tokens": 12345, "client": "aiohttp", "future_field": [1, 2]},
              "summary": {"completed": 9, "failed": 1, "median_ttft_ms": 41.5, "p99.9_itl_ms": 7.0,
                          "request_goodput": None, "vendor_metric": 3.0}}
    back = run(**stored).to_dict()
    assert back["load"] == stored["load"] and back["extra"] == stored["extra"]
    assert back["summary"] == {k: v for k, v in stored["summary"].items() if v is not None}
    json.dumps(back)  # plain JSON all the way down


def test_summary_fields_and_the_catalogue_read_the_same_values():
    recs = [RequestRecord(index=i, prompt="p", send_time=0.0, first_token_time=0.1 * (i + 1), end_time=0.5 + i,
                          chunk_times=[0.1 * (i + 1), 0.5 + i], output_tokens=2, prompt_tokens=3) for i in range(3)]
    s = stats.summarize(recs, 3.0)
    assert isinstance(s, Summary) and s.completed == s.get("completed") == 3
    assert s.get("median_ttft_ms") == s.latency_ms["median_ttft_ms"] == 200.0
    assert s.get("no_such_metric") is None and not s.empty and Summary().empty
    assert Summary.from_dict(s.to_dict()) == s


def test_notes_default_to_nothing_said():
    assert Notes().to_dict() == {} and Load().to_dict() == {} and Summary().to_dict() == {}
