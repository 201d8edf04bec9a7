"""engine.measure.load.loadgen against a real vLLM server (fixture `vllm_server`) and, for the failures a real
server will not produce on demand, against tests/fakes.py. No timing thresholds here: timings
belong in bench/."""
from __future__ import annotations

import io
import threading

import pytest

from tests.fakes import U2028_TEXT, FakeOpenAIServer

from engine.errors import ConfigError
from engine.measure.workloads import prompts
from engine.measure.judge import failures, token_check
from engine.measure.load.arrivals import offsets as poisson_offsets
from engine.measure.load.loadgen import run_load
from engine.cli.console import Console
from engine.measure.progress import Progress
from engine.measure.load.spec import LoadSpec, parse_levels
from engine.measure.load.sse import SSEDecoder
from engine.observe.telemetry import generation_tokens
from engine.runs import Runner, Target
from tests.said import said, tree, values

MAX_TOKENS = 8


def spec_for(server, **over) -> LoadSpec:
    base = dict(base_url=server.base_url, model=server.model, prompts=prompts.LAB_CONCURRENT[:4], num_requests=4,
                max_tokens=MAX_TOKENS, ignore_eos=True, concurrency=2, timeout_s=120, read_timeout_s=60)
    base.update(over)
    return LoadSpec(**base)


def assert_sane(rec) -> None:
    assert rec.ok, rec.error
    assert rec.send_time <= rec.first_token_time <= rec.end_time
    assert rec.chunk_times and rec.chunk_times[0] == rec.first_token_time
    assert all(a <= b for a, b in zip(rec.chunk_times, rec.chunk_times[1:]))
    assert rec.chunk_times[-1] <= rec.end_time
    assert rec.output_text


def run_guarded(spec: LoadSpec, limit_s: float = 60, **kw):
    """run_load in a thread; the test fails (instead of hanging) if it never returns."""
    box: dict = {}
    t = threading.Thread(target=lambda: box.setdefault("r", run_load(spec, **kw)), daemon=True)
    t.start()
    t.join(limit_s)
    assert not t.is_alive(), "run_load did not return"
    return box["r"]


# -- real server -------------------------------------------------------------------------------

@pytest.mark.server
@pytest.mark.parametrize("shape", ["sequential", "concurrency", "burst", "poisson"])
def test_each_shape_one_record_per_request(vllm_server, shape):
    res = run_load(spec_for(vllm_server, shape=shape, rate=20.0))
    assert res.kind == "vllm" and res.load.shape == shape
    assert [r.index for r in res.records] == [0, 1, 2, 3]
    for r in res.records:
        assert_sane(r)
        assert r.output_tokens == MAX_TOKENS and r.tokens_source == "usage"  # ignore_eos: exactly max_tokens
        assert r.prompt_tokens > 0
    s = res.summary
    assert s.completed == 4 and s.failed == 0 and s.total_output_tokens == 4 * MAX_TOKENS
    assert s.max_concurrency <= {"sequential": 1, "concurrency": 2}.get(shape, 4)


@pytest.mark.server
def test_completions_endpoint(vllm_server):
    res = run_load(spec_for(vllm_server, endpoint="completions", num_requests=2))
    for r in res.records:
        assert_sane(r)
        assert r.output_tokens == MAX_TOKENS


@pytest.mark.server
def test_two_client_processes(vllm_server):
    res = run_load(spec_for(vllm_server, concurrency=4, workers=2))
    assert res.extra.load_client.workers == 2
    assert sorted(r.index for r in res.records) == [0, 1, 2, 3]
    for r in res.records:
        assert_sane(r)
        assert r.send_time >= 0  # one time base across processes


@pytest.mark.server
def test_warmup_not_counted(vllm_server):
    seen = []

    class Obs(Progress):
        def on_request_done(self, record, totals):
            seen.append((record.warmup, totals.done))

    res = run_load(spec_for(vllm_server, num_requests=3, warmup=2), observer=Obs())
    warm = [r for r in res.records if r.warmup]
    assert len(warm) == 2 and all(r.ok and r.end_time <= 0 for r in warm)  # before the measured start
    assert len(res.measured) == 3 and res.summary.get("completed") == 3
    assert [w for w, _ in seen] == [True, True, False, False, False]
    assert seen[-1][1] == 3


@pytest.mark.server
def test_the_servers_own_token_count_matches_the_clients(vllm_server):
    """A load test as the Load test page sends it (the lab's 10 prompts all at once, here answers of a fixed
    length), after a warm-up: vLLM's own vllm:generation_tokens_total rose over the measured part by exactly
    the output tokens the client counted (ratio 1.00), the warm-up's answers left out."""
    spec = LoadSpec(base_url="", model="", prompts=prompts.LAB_CONCURRENT, shape="burst", max_tokens=MAX_TOKENS,
                    ignore_eos=True, warmup=3, timeout_s=120, read_timeout_s=60)
    res = Runner(save=lambda r: r).load(spec, Target(vllm_server.base_url, vllm_server.model))
    assert res.summary.completed == 10 and len([r for r in res.records if r.warmup]) == 3
    notes = res.extra
    count = notes.token_count
    print(f"server counted {count.server}, client {count.client}")
    assert count.client == 10 * MAX_TOKENS
    assert count.server == count.client
    check = token_check.token_check(notes)
    assert check.level == "ok" and f"{check.ratio:.2f}" == "1.00"


@pytest.mark.server
def test_cancel_keeps_completed(vllm_server):
    cancel = threading.Event()

    class CancelSoonAfterFirst(Progress):
        def on_request_done(self, record, totals):
            if totals.done == 1:  # the next pair is on its way: cancel it mid-answer
                threading.Timer(0.3, cancel.set).start()

    spec = spec_for(vllm_server, num_requests=6, max_tokens=48)
    res = run_guarded(spec, observer=CancelSoonAfterFirst(), cancel=cancel)
    assert res.extra.cancelled is True
    ok = [r for r in res.records if r.ok]
    cancelled = [r for r in res.records if r.error == "cancelled"]
    assert ok and cancelled and len(ok) + len(cancelled) == len(res.records) < 6
    assert all(r.output_tokens == 48 for r in ok)
    assert res.summary.get("completed") == len(ok) and res.summary.get("failed") == len(cancelled)


@pytest.mark.server
def test_bad_model_name_is_a_clear_error(vllm_server):
    res = run_load(spec_for(vllm_server, model="no-such-model", num_requests=2))
    assert len(res.records) == 2 and res.summary.get("completed") == 0 and res.summary.get("failed") == 2
    for r in res.records:
        assert r.error.startswith("HTTP 404") and "no-such-model" in r.error


def _served_max_len(server) -> int:
    """The max-model-len the server says its model has (GET /v1/models)."""
    from engine.serving import endpoint

    return min(n for n in endpoint.discover(server.base_url).models.values() if n is not None)


@pytest.mark.server
def test_answers_longer_than_the_context_are_counted_by_cause(vllm_server):
    """What the live server answers to max_tokens above its max-model-len, grouped into one sentence."""
    mml = _served_max_len(vllm_server)
    res = run_load(spec_for(vllm_server, max_tokens=mml + 1, num_requests=3, ignore_eos=False))
    assert res.summary.get("failed") == 3
    (n, sentence), = failures.failure_causes(res.records)
    assert n == 3 and tree(sentence) == {
        "id": "{who} {what}: {todo}.", "who": {"id": "All {total} requests", "total": 3},
        "what": {"id": "was refused because the prompt plus {mt} output tokens exceed the server's max-model-len of "
                       "{mml}", "n": 3, "mt": str(mml + 1), "mml": str(mml)},
        "todo": {"id": "lower the max tokens per answer or restart the server with a longer max-model-len"}}


@pytest.mark.server
def test_a_prompt_longer_than_the_context_and_a_wrong_model_are_counted_apart(vllm_server):
    mml = _served_max_len(vllm_server)
    long = run_load(spec_for(vllm_server, endpoint="completions", prompts=["word " * (mml + 10)], num_requests=1))
    wrong = run_load(spec_for(vllm_server, model="no-such-model", num_requests=2))
    causes = failures.failure_causes(long.records + wrong.records)
    assert [n for n, _ in causes] == [2, 1]
    wrong_model, too_long = (tree(s) for _, s in causes)
    assert (wrong_model["who"], wrong_model["what"]["name"]) == ({"id": "{n} of {total} requests", "n": 2, "total": 3},
                                                                 "no-such-model")
    assert wrong_model["what"]["id"] == "was refused because the server serves no model named '{name}'"
    assert wrong_model["todo"] == {"id": "send the name it serves ({served})", "served": vllm_server.model}
    assert (too_long["who"], too_long["what"]) == ({"id": "{n} of {total} requests", "n": 1, "total": 3}, {
        "id": "was refused because the prompt alone is longer than the server's max-model-len of {mml} tokens",
        "n": 1, "mml": str(mml)})


@pytest.mark.server
def test_console_observer(vllm_server, tmp_path):
    out = io.StringIO()
    run_load(spec_for(vllm_server, num_requests=2), observer=Console(out, log_dir=tmp_path))
    text = out.getvalue()
    assert "2 requests" in text and "[   2/2]" in text and "output tok/s" in text


@pytest.mark.server
def test_sweep_warms_each_level(vllm_server):
    from engine.runs import Runner, Target

    saved = []
    runs = Runner(lambda r: saved.append(r) or r).sweep(spec_for(vllm_server, max_tokens=4), [1, 2],
                                                        Target.at(vllm_server.base_url), rounds=1)
    assert [r.extra.sweep_level for r in runs] == [1, 2] and saved == runs
    for r, level in zip(runs, (1, 2)):
        assert sum(x.warmup for x in r.records) == level
        assert r.summary.get("completed") == max(4, level)


# -- fault injection ---------------------------------------------------------------------------

def fake_spec(srv: FakeOpenAIServer, model: str, **over) -> LoadSpec:
    base = dict(base_url=srv.base_url, model=model, prompts=["hello"], num_requests=2, max_tokens=5,
                concurrency=2, timeout_s=10, read_timeout_s=5)
    base.update(over)
    return LoadSpec(**base)


def test_server_dying_mid_stream_keeps_completed(tmp_path):
    with FakeOpenAIServer(die_after=2) as srv:
        res = run_guarded(fake_spec(srv, "die", shape="sequential", num_requests=5))
    assert [r.index for r in res.records] == [0, 1, 2, 3, 4]
    assert [r.ok for r in res.records] == [True, True, False, False, False]
    assert "mid-answer" in res.records[2].error and res.records[2].output_text == "partial answer"
    assert all("could not connect" in r.error for r in res.records[3:])
    assert res.summary.get("completed") == 2 and res.summary.get("failed") == 3
    # what the page, the CLI and the console say about the three failed ones
    (refused, n_refused), (cut, n_cut) = ((tree(m), n) for n, m in failures.failure_causes(res.records))
    assert (n_refused, refused["who"], refused["what"]) == (2, {"id": "{n} of {total} requests", "n": 2, "total": 5},
                                                            {"id": "found nothing listening at {url}",
                                                             "url": srv.base_url})
    assert refused["todo"]["id"].startswith("start the server (it may have stopped or crashed)")
    assert (n_cut, cut["who"]["n"], cut["what"]["id"]) == (
        1, 1, "was cut off mid-answer when the server closed the connection")
    assert cut["todo"]["id"].startswith("it probably stopped or crashed, so check its state and log")
    out = io.StringIO()
    Console(out, log_dir=tmp_path).on_complete(res)
    said = [line.strip() for line in out.getvalue().splitlines()[1:]]
    assert said == [s for _, s in failures.failure_causes(res.records)]


def test_failed_bars_carry_their_reason_in_the_hover():
    """The request-level charts of a run whose server died: each grey bar's hover says why, in the sentence
    failure_causes groups (what happened and what to do)."""
    from engine import figures

    with FakeOpenAIServer(die_after=1) as srv:
        res = run_guarded(fake_spec(srv, "die", shape="sequential", num_requests=3))
    bad = [r for r in res.records if not r.ok]
    assert len(bad) == 2
    reasons = {failures.failure_cause(r.error) for r in bad}

    def failed_hovers(fig, trace=None):
        return [h.replace("<br>", " ") for t in fig.data if trace in (None, t.name) and t.hovertext
                for h in t.hovertext if "failed" in h]

    timeline, bars = figures.request_timeline(res), figures.concurrent_latency_bars(res)
    grouped = figures.latency_bars(None, res)
    for shown in (failed_hovers(timeline, "failed"), failed_hovers(bars), failed_hovers(grouped)):
        assert len(shown) == 2, shown
        assert {next(w for w in reasons if w in h) for h in shown} == reasons
    assert {"id": "{count} failed (grey, ✕; hover a bar for why).", "count": 2} in map(tree, figures.caption_said(
        timeline))
    assert {"id": "{failed} failed (grey; hover a bar for why).", "failed": 2} in map(tree, figures.caption_said(bars))
    title = tree(figures.title_said(bars))
    assert title["id"] == "{count} requests at once: {done} done, {failed} failed in {wall} s"
    assert (title["count"], title["done"], title["failed"]) == (3, 1, 2)


def test_a_run_where_every_request_failed_is_not_drawn_as_batching():
    from engine import figures

    with FakeOpenAIServer(die_after=0) as srv:
        res = run_guarded(fake_spec(srv, "die", num_requests=3))
    assert res.summary.get("failed") == 3
    timeline, bars = figures.request_timeline(res), figures.concurrent_latency_bars(res)
    assert timeline.layout.title.text == "Request timeline: all 3 requests failed"
    assert bars.layout.title.text == "3 requests at once: all 3 failed"
    for fig in (timeline, bars):
        assert "batch" not in figures.caption(fig) and "hover a bar for why" in figures.caption(fig)
    grouped = figures.latency_bars(None, res)
    assert grouped.data[0].name.endswith("(all failed)")
    assert "failed on every request" in figures.caption(grouped) and "nan" not in figures.caption(grouped)


def test_client_processes_measure_on_the_connections_their_warmup_opened():
    """With several client processes each warms up its own connections: the measured part opens none
    (a burst of new connections would be billed to the first requests' TTFT)."""
    with FakeOpenAIServer() as srv:
        res = run_guarded(fake_spec(srv, "ok", concurrency=4, workers=2, warmup=4, num_requests=8))
    assert res.extra.load_client.workers == 2
    warm = [r for r in res.records if r.warmup]
    assert len(warm) == 4 and all(r.ok and r.end_time <= 0 for r in warm)
    assert res.summary.get("completed") == 8
    assert srv.connections == 4


@pytest.mark.parametrize("workers", [1, 2])
def test_the_server_count_covers_the_measured_part_only(workers):
    """The Runner reads the server's token counter once the warm-up is over and again after the run: what it
    stores is the measured part's alone, in one client loop or spread over client processes."""
    n, warmup = 8, 4
    with FakeOpenAIServer(metrics=True) as srv:
        res = Runner(save=lambda r: r).load(fake_spec(srv, "ok", concurrency=4, workers=workers, warmup=warmup,
                                                      num_requests=n), Target(srv.base_url, "ok"))
        assert srv.generated == (n + warmup) * 5  # the server also generated the warm-up's answers
    assert res.extra.load_client.workers == workers
    assert res.extra.token_count.server == res.extra.token_count.client == n * 5
    said = token_check.token_check(res.extra).sentences
    assert [values(s) for s in said] == [{"server": 40, "client": 40, "ratio": 1.0}]


def test_a_server_without_metrics_is_measured_and_left_unchecked():
    """A server that is not vLLM (no /metrics): the run is measured as ever, and says in words that its token
    counts could not be checked (in the CLI's summary too)."""
    from engine.cli.summary import summary_table

    with FakeOpenAIServer() as srv:
        res = Runner(save=lambda r: r).load(fake_spec(srv, "ok"), Target(srv.base_url, "ok"))
    assert res.summary.completed == 2
    assert res.extra.token_count.server is None and res.extra.token_count.missing == "no-metrics"
    assert token_check.token_check(res.extra).level == "unchecked"
    (unchecked,) = token_check.token_check(res.extra).sentences
    assert f"  {unchecked}" in summary_table(res).splitlines()  # the CLI prints the check's own sentence


def test_the_generation_counter_is_the_served_models_own():
    text = ("# TYPE vllm:generation_tokens_total counter\n"
            'vllm:generation_tokens_total{engine="0",model_name="a"} 10.0\n'
            'vllm:generation_tokens_total{engine="1",model_name="a"} 2.0\n'
            'vllm:generation_tokens_total{engine="0",model_name="b"} 5.0\n'
            "vllm:num_requests_running 3.0\n")
    assert generation_tokens(text, "a") == 12 and generation_tokens(text, "b") == 5
    assert generation_tokens(text) == generation_tokens(text, "not labelled so") == 17  # then every model's
    assert generation_tokens("vllm:num_requests_running 3.0\n") is None
    assert generation_tokens("<html>Not Found</html>") is None


def test_hanging_server_ends_with_read_timeout():
    with FakeOpenAIServer() as srv:
        res = run_guarded(fake_spec(srv, "hang", read_timeout_s=0.5))
    assert len(res.records) == 2
    assert all("read timeout" in r.error for r in res.records)


def test_trickling_server_ends_with_request_timeout():
    with FakeOpenAIServer() as srv:
        res = run_guarded(fake_spec(srv, "trickle", timeout_s=0.8, read_timeout_s=5, num_requests=1))
    (r,) = res.records
    assert "request timeout" in r.error and r.chunk_times  # what arrived is kept


def test_cancel_a_hanging_run():
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    with FakeOpenAIServer() as srv:
        res = run_guarded(fake_spec(srv, "hang", read_timeout_s=60, timeout_s=60), cancel=cancel)
    assert [r.error for r in res.records] == ["cancelled", "cancelled"]


@pytest.mark.parametrize("after_s", [0.2, 3.0])  # before the client processes are up / mid warm-up
def test_cancel_a_run_spread_over_client_processes(after_s):
    """Cancel lands in any phase: run_load returns, nothing is counted, no client process is lost."""
    cancel = threading.Event()
    threading.Timer(after_s, cancel.set).start()
    with FakeOpenAIServer() as srv:
        res = run_guarded(fake_spec(srv, "hang", concurrency=2, workers=2, warmup=2, read_timeout_s=60,
                                    timeout_s=60), limit_s=30, cancel=cancel)
    assert res.extra.load_client.workers == 2 and res.extra.cancelled
    assert not res.extra.load_client.errors
    assert res.summary.get("completed") == 0


def test_u2028_inside_json_is_parsed_whole():
    with FakeOpenAIServer() as srv:
        res = run_guarded(fake_spec(srv, "u2028", num_requests=1))
    (r,) = res.records
    assert r.ok, r.error
    assert r.output_text == U2028_TEXT and len(r.chunk_times) == 1


def test_crlf_events_split_across_reads():
    with FakeOpenAIServer() as srv:
        res = run_guarded(fake_spec(srv, "crlf", num_requests=1))
    (r,) = res.records
    assert r.ok, r.error
    assert r.output_text == "".join(f" t{i}" for i in range(5)) and r.output_tokens == 5


def test_missing_usage_falls_back_to_chunks_then_tokenizer():
    with FakeOpenAIServer() as srv:
        plain = run_guarded(fake_spec(srv, "no-usage", num_requests=1)).records[0]
        counted = run_guarded(fake_spec(srv, "no-usage", num_requests=1,
                                        count_tokens=lambda s: len(s.split()) * 10)).records[0]
    assert plain.ok and plain.tokens_source == "chunks" and plain.output_tokens == 5
    assert counted.tokens_source == "tokenizer" and counted.output_tokens == 50 and counted.prompt_tokens == 10


def test_nothing_listening_is_a_connect_error():
    with FakeOpenAIServer() as srv:
        url = srv.base_url
    res = run_guarded(LoadSpec(base_url=url, model="ok", prompts=["x"], num_requests=1, timeout_s=5))
    assert "could not connect" in res.records[0].error


# -- pure units ----------------------------------------------------------------------------------

def test_sse_decoder_splits_on_blank_lines_only():
    d = SSEDecoder()
    stream = 'data: {"a": "x\u2028y"}\r\n\r\ndata: line1\ndata: line2\n\n: comment\n\ndata: [DONE]\n\n'.encode()
    out = []
    for i in range(len(stream)):  # one byte at a time: CRLF and UTF-8 split across reads
        out += d.feed(stream[i:i + 1])
    assert out == ['{"a": "x\u2028y"}'.encode(), b"line1\nline2", b"[DONE]"]


def test_poisson_offsets_seeded_and_rescaled():
    a = poisson_offsets(20, rate=4.0, seed=7)
    assert a == poisson_offsets(20, rate=4.0, seed=7) != poisson_offsets(20, rate=4.0, seed=8)
    assert a[-1] == pytest.approx(5.0) and a == sorted(a)


def test_spec_validation():
    with pytest.raises(ConfigError, match="arrival pattern 'zigzag' is unknown"):
        LoadSpec(base_url="x", model="m", prompts=["p"], shape="zigzag")
    with pytest.raises(ConfigError, match="Poisson rate"):
        LoadSpec(base_url="x", model="m", prompts=["p"], shape="poisson")
    with pytest.raises(ConfigError, match="at least one prompt"):
        LoadSpec(base_url="x", model="m", prompts=[])
    s = LoadSpec(base_url="http://h:1/v1/", model="m", prompts=["a", "b"], num_requests=5)
    assert s.url == "http://h:1/v1/chat/completions" and s.n == 5
    assert "count_tokens" not in s.as_dict()


BAD_SPECS = [
    (dict(shape="concurrency", concurrency=0), "Requests in flight must be a whole number from 1 to 1024, not 0."),
    (dict(shape="concurrency", concurrency=-3), "Requests in flight must be a whole number from 1 to 1024, not -3."),
    (dict(shape="concurrency", concurrency=100000), "Requests in flight must be a whole number from 1 to 1024"),
    (dict(shape="concurrency", concurrency=2.5), "Requests in flight must be a whole number"),
    (dict(num_requests=0), "The number of requests must be a whole number from 1 to 100000, not 0."),
    (dict(num_requests=10**7, shape="concurrency"), "The number of requests must be a whole number"),
    (dict(shape="burst", num_requests=5000), "Sending all requests at once is limited to 1024 requests"),
    (dict(max_tokens=0), "Max tokens per answer must be a whole number from 1 to 1000000, not 0."),
    (dict(max_tokens=-1), "Max tokens per answer must be a whole number"),
    (dict(max_tokens=10**9), "Max tokens per answer must be a whole number"),
    (dict(shape="poisson", rate=0), "The Poisson rate must be above 0"),
    (dict(shape="poisson", rate=-2.0), "The Poisson rate must be above 0"),
    (dict(shape="poisson", rate=float("inf")), "The Poisson rate must be above 0"),
    (dict(shape="poisson", rate=1e6), "The Poisson rate must be above 0 and at most 1000 requests/s, not 1000000.0."),
    (dict(temperature=-0.5), "The temperature must be between 0 and 2"),
    (dict(temperature=float("nan")), "The temperature must be between 0 and 2"),
    (dict(warmup=-1), "The warm-up must be a whole number"),
    (dict(timeout_s=0), "The request timeout must be a positive number of seconds"),
    (dict(read_timeout_s=-1), "The read timeout must be a positive number of seconds"),
    (dict(endpoint="score"), "The endpoint 'score' is unknown: pick chat, completions, embeddings or rerank."),
]


@pytest.mark.parametrize("over, says", BAD_SPECS)
def test_a_bad_setting_is_one_sentence(over, says):
    with pytest.raises(ConfigError) as e:
        LoadSpec(**{**dict(base_url="", model="", prompts=["p"]), **over})
    assert str(e.value).startswith(says) and str(e.value).endswith(".")


def test_settings_are_checked_again_on_replace():
    """A spec changed with dataclasses.replace (as pages and sweeps do) is checked like a new one."""
    import dataclasses

    spec = LoadSpec(base_url="", model="", prompts=["p"], shape="concurrency", concurrency=4)
    with pytest.raises(ConfigError, match="Requests in flight"):
        dataclasses.replace(spec, concurrency=0)


def test_max_tokens_beyond_the_running_servers_context_is_refused_before_sending():
    spec = LoadSpec(base_url="", model="", prompts=["p"], max_tokens=3000)
    assert spec.validate() is spec  # no server bound given: fine
    with pytest.raises(ConfigError) as e:
        spec.validate(max_model_len=2048)
    assert tree(e.value) == {"id": "Max tokens per answer ({n}) is more than {of} ({limit} tokens): ask for {limit} or "
                                   "fewer{fix}.", "n": 3000, "limit": 2048,
                             "of": {"id": "the running server's max-model-len"},
                             "fix": {"id": ", or restart the server with a longer max-model-len"}}
    assert spec.validate(max_model_len=3000) is spec


def test_parse_levels():
    assert parse_levels("1, 4,2,4") == [1, 2, 4]
    for text in ("1,x,4", "", "1,,2", "1.5", "one"):
        with pytest.raises(ConfigError) as e:
            parse_levels(text)
        assert said(e.value).template.startswith("The sweep levels '{text}' are not a comma-separated list of whole")
        assert values(e.value) == {"text": text}
    for text, bad in (("0,2", 0), ("1,-4", -4), ("2,100000", 100000)):
        with pytest.raises(ConfigError) as e:
            parse_levels(text)
        assert tree(e.value) == {"id": "{what} must be a whole number from {lo} to {hi}, not {v}.", "lo": 1, "hi": 1024,
                                 "v": bad, "what": {"id": "Each sweep level (requests in flight)"}}


@pytest.mark.parametrize("over, label", [
    (dict(shape="burst", num_requests=10, max_tokens=150), "10 requests at once, 150 tokens"),
    (dict(shape="concurrency", concurrency=4, num_requests=20), "20 requests, 4 in flight, 200 tokens"),
    (dict(shape="concurrency", concurrency=64, num_requests=10), "10 requests, 10 in flight, 200 tokens"),
    (dict(shape="poisson", rate=2.0, num_requests=30, concurrency=10), "30 requests, Poisson 2/s, 200 tokens"),
    (dict(shape="sequential", num_requests=1, max_tokens=None), "1 request one after another, natural length"),
])
def test_describe_says_what_the_load_does(over, label):
    assert LoadSpec(base_url="", model="", prompts=["p"], **over).describe() == label


def test_prompt_sets():
    assert len(prompts.LAB_SEQUENTIAL) == 5 and len(prompts.LAB_CONCURRENT) == 10
    assert prompts.LAB_TUNING[-1] == "Summarize the history of AI."
    assert prompts.LAB_TUNING[:9] == prompts.LAB_CONCURRENT[:9]
    assert prompts.seeded_prompts(5, seed=3) == prompts.seeded_prompts(5, seed=3)
    assert len(set(prompts.seeded_prompts(50, seed=3))) > 40


def test_run_load_works_from_a_thread_that_already_runs_an_event_loop(vllm_server):
    """A notebook cell or Playwright's sync API already runs a loop: run_load must still work there."""
    import asyncio

    spec = LoadSpec(base_url=vllm_server.base_url, model=vllm_server.model, prompts=["Say hi."], max_tokens=4,
                    ignore_eos=True)

    async def inside_a_loop():
        return run_load(spec)

    result = asyncio.run(inside_a_loop())
    assert len(result.measured) == 1 and result.measured[0].ok and result.measured[0].output_tokens == 4
