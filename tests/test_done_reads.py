"""The command returns within a second of "done". After the last answer the server's /metrics
page is read once when its token counter already counts every token the client received (no settling re-read),
and the run's served count comes from that same page (no read of its own)."""
from __future__ import annotations

from engine.runs import Runner, ServerCount, Target
from engine.results.records import RunResult
from tests.fakes import FakeOpenAIServer
from tests.test_warmth import batch, run_of

SERVED = 'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 4010.0\n'


def _finished(srv: FakeOpenAIServer, counted: int) -> tuple[RunResult, int]:
    """A run of 10 answers of 3 tokens each that the fake's counter counts `counted` of: the run, and the /metrics
    reads its finish took."""
    count = ServerCount(Target(srv.base_url, "ok"))
    count.start()
    srv.generated += counted
    reads = srv.metrics_reads
    run = count.finish(run_of(batch(10)))
    return run, srv.metrics_reads - reads


def test_a_counter_that_already_counts_every_token_is_read_once_after_the_run():
    with FakeOpenAIServer(metrics=True) as srv:
        run, reads = _finished(srv, 30)
    assert reads == 1 and run.extra.token_count.server == 30 == run.extra.token_count.client


def test_a_counter_short_of_the_clients_tokens_is_read_again_until_it_settles():
    with FakeOpenAIServer(metrics=True) as srv:  # still short (a step counted late, or never): settled, then said
        run, reads = _finished(srv, 27)
    assert reads >= 2 and run.extra.token_count.server == 27


def test_the_served_count_after_a_run_comes_from_the_page_already_read():
    target = Target("http://x", "m", instance="http://x started 5.00")
    runner = Runner(lambda r: r)

    def no_read(t):
        raise AssertionError("the served count was read again")

    runner.served = no_read
    notes = runner._keep(run_of(batch(10)), target, 4000, page_after=SERVED).extra
    assert (notes.warmth.served_before, notes.warmth.served_after) == (4000, 4010)


def test_the_kv_watch_takes_the_page_already_read_after_the_run():
    from engine.observe.kvwatch import KvWatch

    reads = []

    def read(url, key=None, timeout_s=5.0):
        reads.append(url)
        return {"preemptions_total": 2.0}

    watch = KvWatch("http://x", read=read)
    watch.INTERVAL_S = 3600  # no sample between start and finish
    watch.start()
    run = watch.finish(run_of(batch(2)), page='vllm:num_preemptions_total{engine="0",model_name="m"} 5.0\n')
    assert reads == ["http://x"] and run.extra.kv.preemptions == 3


def test_the_history_is_asked_about_the_server_before_the_run_not_after_its_last_answer():
    from engine.measure.load.spec import LoadSpec
    from engine.runs.ledger import WarmthLedger

    asked = []  # the requests the server had received each time the history was read
    with FakeOpenAIServer(chunk_delay_s=0.0, models=("ok",)) as srv:
        ledger = WarmthLedger(lambda instance: asked.append(("sizes", srv.requests)) or (),
                              lambda instance: asked.append(("served", srv.requests)))
        target = Target(srv.base_url, "ok", instance=f"{srv.base_url} started 5.00")
        spec = LoadSpec(base_url=srv.base_url, model="ok", prompts=["hi"], num_requests=4, concurrency=2,
                        max_tokens=3, warmup=1)
        run = Runner(lambda r: r, warmth=ledger).load(spec, target)
    assert run.summary.completed == 4 and run.extra.warmth.cold is not None  # judged, from what it recalled
    assert asked == [("sizes", 0), ("served", 0)]  # once, before the warm-up's first request


def test_reading_the_servers_metrics_does_not_make_a_tls_context_each_time(monkeypatch):
    import ssl

    from engine.observe.telemetry import read_metrics_text

    made = []
    make = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context", lambda *a, **k: made.append(1) or make(*a, **k))
    with FakeOpenAIServer(metrics=True) as srv:
        pages = [read_metrics_text(srv.base_url) for _ in range(3)]
    assert all("vllm:generation_tokens_total" in p for p in pages)
    assert len(made) <= 1  # once per process at most: each made one before, 50-140 ms on a busy machine
