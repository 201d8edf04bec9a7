"""Prefix caching: cached prompt tokens read from the answers' usage, the server's
prefix-cache counters over a run's measured part, the sentence that compares caching on and off, the
chart. The real comparison on vLLM's CPU build runs through the CLI in tests/test_e2e_browser.py, which checks
its runs and the Tuning page's view of them."""
from __future__ import annotations

from dataclasses import replace

import pytest

from tests.fakes import FakeOpenAIServer

from engine import figures
from engine.measure.judge import prefix
from engine.measure.workloads import prompts, scenarios
from engine.measure.load.request import Requester, cached_tokens
from engine.measure.load.spec import LoadSpec
from engine.measure.load.sse import StreamParser
from tests.said import said, values
from engine.results.records import Disturbance, Notes, PrefixCache, RequestRecord, RunResult, Summary
from engine.runs import Runner, ServerCount, Target

USAGE = b'{"id":"x","choices":[],"usage":{"prompt_tokens":1300,"completion_tokens":3,"total_tokens":1303%s}}'


def _parsed(usage_tail: bytes) -> RequestRecord:
    """One streamed answer (a content chunk, the usage chunk, [DONE]) read as the load generator reads it."""
    st = StreamParser(chat=True)
    st.event(1.0, b'{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}')
    st.event(1.1, USAGE % usage_tail)
    st.event(1.2, b"[DONE]")
    rec = RequestRecord(index=0, prompt="q", send_time=0.5)
    Requester(LoadSpec(base_url="http://x", model="m", prompts=["q"]))._finish(rec, st, None)
    return rec


def test_cached_tokens_come_from_the_usage_chunk_when_the_server_says_them():
    rec = _parsed(b',"prompt_tokens_details":{"cached_tokens":1280}')
    assert rec.ok and rec.prompt_tokens == 1300 and rec.cached_tokens == 1280
    # vLLM without --enable-prompt-tokens-details says nothing: unknown, not zero
    assert _parsed(b"").cached_tokens is None
    assert _parsed(b',"prompt_tokens_details":null').cached_tokens is None
    assert cached_tokens({"prompt_tokens_details": {"cached_tokens": 0}}) == 0
    assert cached_tokens({"prompt_tokens_details": {"cached_tokens": True}}) is None


def test_runs_saved_before_cached_tokens_read_back():
    rec = RequestRecord.from_dict({"index": 0, "prompt": "q", "send_time": 0.0, "end_time": 1.0})
    assert rec.cached_tokens is None
    notes, summary = Notes.from_dict({"cancelled": False}), Summary.from_dict({"completed": 1})
    assert notes.prefix_cache.hits is None and notes.prefix_cache.queries is None
    assert summary.mean_cached_tokens is None and "mean_cached_tokens" not in summary.to_dict()


def test_a_run_keeps_cached_tokens_and_the_cache_counters_of_its_measured_part():
    """The system prompt goes first; each answer's cached tokens are kept and averaged; the server's hits and
    queries are counted from the end of the warm-up (2 answers) to the end of the run (4 answers)."""
    with FakeOpenAIServer(metrics=True) as srv:
        spec = LoadSpec(base_url=srv.base_url, model="cached", prompts=["q1", "q2"], system="Be brief.",
                        shape="sequential", num_requests=4, warmup=2, max_tokens=3, timeout_s=10)
        res = Runner(save=lambda r: r).load(spec, Target(srv.base_url, "cached"))
        assert srv.last_body["messages"][0] == {"role": "system", "content": "Be brief."}
        assert srv.prefix_hits == 6 * 4 and srv.prefix_queries == 6 * 5  # the warm-up's are on the server too
        plain = Runner(save=lambda r: r).load(replace(spec, model="ok", warmup=0), Target(srv.base_url, "ok"))
    assert [r.cached_tokens for r in res.measured] == [4, 4, 4, 4]
    assert res.summary.mean_cached_tokens == 4
    assert (res.extra.prefix_cache.hits, res.extra.prefix_cache.queries) == (16, 20)
    assert prefix.hit_rate(res) == 0.8
    assert [r.cached_tokens for r in plain.measured] == [None] * 4 and plain.summary.mean_cached_tokens is None
    assert (plain.extra.prefix_cache.hits, plain.extra.prefix_cache.queries) == (0, 20)


def test_counters_that_went_back_give_no_count():
    """A server restarted between the two reads starts its counters again: no count rather than a negative one."""
    with FakeOpenAIServer(metrics=True) as srv:
        srv.prefix_hits, srv.prefix_queries = 500, 900
        count = ServerCount(Target(srv.base_url, "ok"))
        count.start()
        srv.prefix_hits, srv.prefix_queries = 10, 20
        run = count.finish(RunResult(kind="vllm", scenario="s", label="l", records=[], duration=1, started_at=0))
    assert run.extra.prefix_cache.hits is None and run.extra.prefix_cache.queries is None


def _run(on: bool | None, ttfts_s: list[float], cached: list[int | None], hits=None, queries=None,
         started: float = 1.7e9) -> RunResult:
    recs = [RequestRecord(index=i, prompt=f"q{i}", send_time=2.0 * i, first_token_time=2.0 * i + t,
                          chunk_times=[2.0 * i + t], end_time=2.0 * i + t + 0.5, prompt_tokens=1300, output_tokens=8,
                          cached_tokens=c) for i, (t, c) in enumerate(zip(ttfts_s, cached))]
    config = {} if on is None else {"enable_prefix_caching": on}
    return RunResult(kind="vllm", scenario="prefix-cache", label=f"caching {on}", records=recs, duration=8,
                     started_at=started, config=config,
                     extra=Notes(prefix_cache=PrefixCache(hits=hits, queries=queries)))


def test_the_sentence_says_what_caching_saved_after_the_first_request():
    on = _run(True, [0.9, 0.10, 0.14, 0.12], [0, 1280, 1280, 1280], hits=3840, queries=5200)
    off = _run(False, [0.9, 0.80, 0.84, 0.86], [0, 0, 0, 0], hits=0, queries=0)
    side = prefix.Side.of(on)
    assert side.first_ms == pytest.approx(900) and side.rest_ms == pytest.approx(120)
    assert (side.cached_tokens, side.prompt_tokens) == (3840, 5200)
    sentence = prefix.sentence(on, off)
    got = values(sentence)
    assert {k: got[k] for k in ("off", "on", "cached", "prompt")} == {
        "off": pytest.approx(840), "on": pytest.approx(120), "cached": 3840, "prompt": 5200}
    # two runs, one a side: the requests' spread plus the run-to-run allowance (without it 0.0995 to 0.205)
    assert got["interval"] == {"level": "95 %", "low": "0.0913", "high": "0.223"} and got["how"]["counts"] == {"n": 3}
    assert got["how"]["between"] == {"pct": "10"}
    assert "fell" in said(sentence).template
    fig = figures.prefix_cache_compare([off, on])  # either order: the runs say which had caching
    assert figures.caption(fig) == sentence
    assert [t.y[0] for t in fig.data if t.type == "scatter"] == [pytest.approx(900)] * 2


def test_without_usage_the_counters_say_the_cached_tokens_and_no_gain_is_said_as_such():
    on = _run(None, [0.9, 0.9, 0.9], [None] * 3, hits=2560, queries=3900)  # vLLM's default, found in its cache
    off = _run(False, [0.9, 0.5, 0.5], [None] * 3)
    assert prefix.caching_on(on) is True and prefix.pair([on, off]) == (on, off)
    slower = prefix.sentence(on, off)
    got = values(slower)
    assert {k: got[k] for k in ("cached", "prompt", "on", "off")} == {"cached": 2560, "prompt": 3900,
                                                                     "on": pytest.approx(900), "off": 500}
    # requests that do not vary: the interval is the run-to-run allowance alone, 1.8 × 1.1^(±1.96 × √2)
    assert got["interval"] == {"level": "95 %", "low": "1.38", "high": "2.34"} and got["how"]["counts"] == {"n": 2}
    assert "slower beyond noise" in said(slower).template and "did not show" in said(slower).template
    assert prefix.pair([on]) is None
    assert "both on and off" in figures.caption(figures.prefix_cache_compare([on]))


def test_a_fall_beside_a_disturbed_run_is_no_verdict():
    """The prefix-cache pair is two runs compared like any other (engine.measure.judge.verdict.beside): beside a
    run measured while another client used the server, the fall is measured and said, but not called real."""
    on = _run(True, [0.9, 0.10, 0.14, 0.12], [0, 1280, 1280, 1280], hits=3840, queries=5200)
    off = _run(False, [0.9, 0.80, 0.84, 0.86], [0, 0, 0, 0], hits=0, queries=0)
    off.extra.beside.disturbance = Disturbance(other_requests=4)
    sentence = prefix.sentence(on, off)
    assert "fell" not in said(sentence).template and "beyond noise" not in sentence
    assert "no verdict" in said(sentence).template
    got = values(sentence)
    assert got["interval"]["low"] == "0.0913" and got["how"]["counts"] == {"n": 3}  # how sure it would be
    assert got["beside"]["sentence"] == {"what": {"n": 4}}  # which side, and what disturbed it


def test_a_gain_within_a_runs_swing_is_not_called_a_fall():
    """Measured on an H200 (vLLM 0.26, Llama 3 8B shape, eager): 55 ms either way after the first request, as
    a 1,300-token prefill takes milliseconds there. The sentence said "fell from 55 ms to 55 ms"."""
    on = _run(True, [0.16, 0.055, 0.0549, 0.0551], [0, 1280, 1280, 1280])
    off = _run(False, [0.17, 0.0552, 0.0551, 0.0553], [0, 0, 0, 0])
    sentence = prefix.sentence(on, off)
    assert "did not show" in sentence and "fell" not in sentence


def test_a_fall_within_the_noise_of_the_requests_is_no_measurable_difference():
    """A median 40 % lower was called a fall though the requests after the first swung both ways."""
    on = _run(True, [0.9, 0.3, 0.9, 0.5], [0, 1280, 1280, 1280], hits=3840, queries=5200)
    off = _run(False, [0.9, 0.9, 0.4, 0.8], [0, 0, 0, 0])
    sentence = prefix.sentence(on, off)
    assert "fell" not in sentence and "no measurable difference" in said(sentence).template
    assert values(sentence) == {"cached": 3840, "prompt": 5200, "on": 500, "off": pytest.approx(800)}


def test_the_scenario_shares_one_long_system_prompt_and_asks_for_cached_tokens():
    scn = scenarios.get("prefix-cache")
    assert scn.kind == "tuning" and len(prompts.WORKSHOP_SYSTEM.split()) > 900
    spec = scn.load_spec()
    assert spec.system == prompts.WORKSHOP_SYSTEM and spec.shape == "sequential" and spec.warmup == 0
    from engine.serving.config import ServerConfig

    argvs = [ServerConfig(model="m").with_changes(**c).argv() for c in scn.configs]
    assert all("--enable-prompt-tokens-details" in a for a in argvs)
    assert "--enable-prefix-caching" in argvs[0] and "--no-enable-prefix-caching" in argvs[1]


def test_cached_tokens_survive_the_history_and_its_export(tmp_path):
    from engine.results.store import RunStore

    run = _run(True, [0.9, 0.1, 0.1], [0, 1280, None], hits=1280, queries=3900)
    store = RunStore(tmp_path / "history.sqlite")
    store.save(run)
    assert [r.cached_tokens for r in store.load(run.id).records] == [0, 1280, None]
    again = RunStore(tmp_path / "again.sqlite")
    (new_id,) = again.import_text(store.export_json([run.id]), "export.json")
    assert [r.cached_tokens for r in again.load(new_id).records] == [0, 1280, None]
    assert again.load(new_id).extra.prefix_cache.hits == 1280


def test_the_python_behind_a_run_is_not_offered_without_its_system_prompt():
    """The short openai-SDK code leaves a system prompt out: for a prefix-cache run it is not offered at all."""
    from engine.measure.snippets import load as snippets

    run = _run(True, [0.9, 0.1], [0, 1280])
    run.kind, run.model = "vllm", "m"
    run.load = type(run.load).from_dict({"shape": "sequential", "prompts": ["q"], "base_url": "http://x",
                                         "system": "Be brief."})
    assert snippets.spec_of(run) is None
    run.load.other.pop("system")
    assert snippets.spec_of(run) is not None


def _cached_run(hits: int | None, queries: int | None) -> RunResult:
    recs = [RequestRecord(index=i, prompt="q", send_time=0.0, first_token_time=0.1, end_time=1.0, output_tokens=64,
                          prompt_tokens=1000) for i in range(4)]
    return RunResult(kind="vllm", scenario="random-512-64", label="random", records=recs, duration=1.0,
                     started_at=1.7e9, extra=Notes(prefix_cache=PrefixCache(hits=hits, queries=queries)))


def test_a_run_that_took_most_prompt_tokens_from_the_cache_says_so_wherever_its_numbers_are():
    """Once, a repeated random-512-64 took 25,600 of its 31,600 prompt tokens from the prefix cache, and nothing
    on screen said so beside its throughput (twice vllm bench serve's)."""
    from engine.cli.summary import summary_table
    from engine.figures.report import build_report
    from engine.messages import translate

    run = _cached_run(25_600, 31_600)
    said = prefix.cached_said(run)
    assert values(said) == {"share": "81%", "hits": 25_600, "queries": 31_600}
    assert "--no-enable-prefix-caching" in said and translate(said, "ko") != said
    table = summary_table(run)
    assert "81% of this run's prompt tokens" in table
    assert table.index("output throughput") < table.index("81% of this run's prompt tokens") < table.index("TTFT")
    assert "81% of this run" in build_report([run], made_at=1.7e9)
    assert "81%" in build_report([run], lang="ko", made_at=1.7e9)
    for quiet in (_cached_run(100, 31_600), _cached_run(None, None), _cached_run(0, 0)):  # a chat template's block
        assert prefix.cached_said(quiet) is None and "prefix cache" not in summary_table(quiet)


def test_a_sweep_says_which_levels_found_their_prompts_cached():
    """A sweep sends the same prompts at every level: levels after the first may find them in the cache."""
    runs = [_cached_run(0, 4000), _cached_run(2400, 4000), _cached_run(3000, 4000)]
    for r, level in zip(runs, (1, 2, 4)):
        r.load.concurrency = level
    said = prefix.levels_said(runs)
    assert values(said) == {"n": 2, "total": 3, "low": "60%", "high": "75%"}
    assert said in figures.caption(figures.sweep_chart(runs))
    assert prefix.levels_said(runs[:1]) is None and said not in figures.caption(figures.sweep_chart(runs[:1]))
