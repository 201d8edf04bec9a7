"""A run's typed metadata (Load, Notes, Summary): read from whatever shape it was stored or imported in,
written back in that shape, a value of the wrong type kept aside rather than trusted."""
import json
import math

import pytest

from engine.measure.judge import stats, token_check
from engine.results.records import Beside, Load, Notes, RequestRecord, RunResult, Summary, TokenCount, from_v5
from tests.said import ids, said, values


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
    r = run(extra={"server": {"placeholder_text": "yes", "kv_cache_tokens": 1.5}, "sweep_level": 4},
            load={"concurrency": True, "rate": math.inf})
    assert r.extra.server.placeholder_text is False and r.extra.server.kv_cache_tokens is None
    assert r.extra.sweep_level == 4
    assert r.extra.server.other == {"placeholder_text": "yes", "kv_cache_tokens": 1.5}  # in the part they belong to
    assert r.load.concurrency is None and r.load.other == {"concurrency": True} and r.load.rate == math.inf


def test_the_stored_shape_round_trips():
    stored = {"load": {"shape": "burst", "num_requests": 10, "seed": 0, "timeout_s": 300.0},
              "extra": {"server": {"kv_cache_tokens": 12345}, "load_client": {"name": "aiohttp", "later": 1},
                        "future_field": [1, 2]},
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


def test_the_token_check_compares_the_servers_count_with_the_clients():
    """The ratio and the sentences from a run's notes, with answers worked out by hand: agreeing counts are
    said with their ratio; a difference beyond 3 % is a warning, explained by chat answers when the
    server counted more and chat ran beside the run; a server without /metrics is said to be unchecked."""
    check = token_check.token_check(Notes(token_count=TokenCount(server=1500, client=1500)))
    assert (check.ratio, check.level) == (1.0, "ok")
    assert [values(s) for s in check.sentences] == [{"server": 1500, "client": 1500, "ratio": 1.0}]

    # 3.0 %: not more than 3 %
    edge = token_check.token_check(Notes(token_count=TokenCount(server=1545, client=1500)))
    assert edge.level == "ok" and len(edge.sentences) == 1 and values(edge.sentences[0])["ratio"] == 1.03

    low = token_check.token_check(Notes(token_count=TokenCount(server=1400, client=1500)))
    assert low.level == "warn" and low.ratio == 1400 / 1500
    assert [values(s) for s in low.sentences] == [{"server": 1400, "client": 1500, "ratio": 1400 / 1500},
                                                  {"gap": pytest.approx(100 / 1500), "tolerance": 0.03}]
    assert "chat" not in said(low.sentences[1]).template and "cancelled" not in said(low.sentences[1]).template

    chat = token_check.token_check(Notes(token_count=TokenCount(server=1800, client=1500), beside=Beside(chats=2)))
    assert chat.level == "warn" and [values(s) for s in chat.sentences[1:]] == [{"n": 2}, {"gap": pytest.approx(0.2),
                                                                                          "tolerance": 0.03}]
    assert "chat" in said(chat.sentences[2]).template  # the difference put down to the chat answers
    one_chat = token_check.token_check(Notes(token_count=TokenCount(server=1510, client=1500), beside=Beside(chats=1)))
    assert one_chat.level == "ok" and ids(one_chat.sentences[1:]) == ids(chat.sentences[1:2])
    assert values(one_chat.sentences[1]) == {"n": 1}

    cancelled = token_check.token_check(Notes(token_count=TokenCount(server=130, client=100), cancelled=True))
    assert cancelled.level == "warn" and "cancelled" in said(cancelled.sentences[1]).template
    assert values(cancelled.sentences[1]) == {"gap": pytest.approx(0.3), "tolerance": 0.03}

    none = token_check.token_check(Notes(token_count=TokenCount(server=0, client=0)))
    assert none.level == "ok" and none.ratio is None
    assert token_check.token_check(Notes(token_count=TokenCount(server=12, client=0))).level == "warn"

    missing = token_check.token_check(Notes(token_count=TokenCount(client=80, missing="no-metrics")))
    assert (missing.level, missing.server, missing.ratio) == ("unchecked", None, None)
    assert len(missing.sentences) == 1 and "/metrics" in said(missing.sentences[0]).template
    assert token_check.token_check(Notes(token_count=TokenCount(missing="counter-reset"))).level == "unchecked"
    assert token_check.token_check(Notes()) is None  # an older run, the naive baseline, an import: never tried


def test_the_token_counts_are_stored_under_their_own_keys():
    flat = {"server_output_tokens": 1500, "client_output_tokens": 1500, "chat_requests_beside": 1}  # schema 5
    assert run(extra=from_v5(flat)).extra.to_dict() == {"token_count": {"server": 1500, "client": 1500},
                                                        "beside": {"chats": 1}}
    assert run(extra=flat).extra.other == flat  # read as today's notes: no name of theirs, kept aside
    unchecked = {"token_count": {"missing": "no-metrics"}}
    assert run(extra=unchecked).to_dict()["extra"] == unchecked
    older = run(extra={"server": {"kv_cache_tokens": 5}})  # saved before the check existed: nothing said about it
    assert older.extra.token_count.server is None and "token_count" not in older.to_dict()["extra"]
    odd = run(extra={"token_count": {"server": "1500"}})
    assert odd.extra.token_count.server is None and odd.extra.token_count.other == {"server": "1500"}


def test_the_client_count_covers_every_measured_request_and_no_warmup():
    recs = [RequestRecord(index=0, prompt="p", send_time=0.0, end_time=1.0, output_tokens=16),
            RequestRecord(index=1, prompt="p", send_time=0.0, end_time=1.0, output_tokens=5, error="cut off"),
            RequestRecord(index=0, prompt="w", send_time=-1.0, end_time=-0.5, output_tokens=16, warmup=True)]
    assert token_check.client_output_tokens(recs) == 21


def test_a_stored_label_wording_is_rebuilt_only_when_sound():
    """A run's label keeps its wording (extra.label_said) to be said in the viewer's language; stored or
    imported data is used only when it is sound, and never crashes a page or an import."""
    from engine.messages import from_json, say_n, to_json, translate

    label = say_n("{n} request at once, {tokens} tokens", "{n} requests at once, {tokens} tokens", 3, tokens=64)
    assert from_json(to_json(label), english=str(label)) == "3 requests at once, 64 tokens"
    plural = {"template": "{n} request", "plural": "{n} requests", "values": {"n": 3}}
    assert from_json({**plural, "n": None}, "3 requests") is None  # a plural without its count
    assert from_json({**plural, "n": 3}, "3 requests") is not None
    for hostile in ({"template": "{v.__class__}", "values": {"v": "a"}},  # attribute lookups
                    {"template": "{v:>999999999}", "values": {"v": "a"}},  # a huge width
                    {"template": "{x:f}", "values": {"x": 10 ** 400}},  # a number too large to format
                    {"template": "x" * 2000, "values": {}},
                    {"template": "{a}", "values": {"a": 1}, "plural": 5}):
        assert from_json(hostile) is None, hostile
    assert from_json(to_json(label), english="something else") is None  # it must say the stored English
    run = RunResult(kind="vllm", scenario="s", label="3 requests", records=[], duration=1.0, started_at=1e9,
                    extra={"label_said": {**plural, "n": None}})
    assert run.label == "3 requests" and translate(run.label, "ko") == "3 requests"
