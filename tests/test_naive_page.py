"""Naive vs vLLM teaches batching the right way round: each contender's whole job (wall time and
throughput for all the prompts) beside the per-request latency, the four contenders numbered as the buttons
are and drawn in that order, "vLLM, all at once" in the chart and the numbers, the legend clear of the
title, a cold vLLM run said, the ceiling sentence once. Figures from hand-made runs; the page with AppTest."""
from __future__ import annotations

import time

import pytest

from engine import figures
from engine.digits import significant
from engine.measure.judge import warmth
from engine.results.records import EnergyReading, KeptHistogram, ServerView
from tests.conftest import app_page
from engine.messages import say
from tests.said import said, tree, values
from tests.test_figures import NAIVE_PROMPTS, _run, make_naive, make_static_batch, make_vllm_sequential, streamed

NAMES = ["1 · Naive, one at a time", "2 · Static batch", "3 · vLLM, one at a time", "4 · vLLM, all at once"]


def make_vllm_batch():
    """The same 5 prompts sent at once to vLLM: all finish within 1.2 s."""
    recs = [streamed(i, p, 0.0, 0.08, 200, 180.0) for i, p in enumerate(NAIVE_PROMPTS)]
    return _run("vllm", "vllm-5-batch", "vLLM, the same 5 prompts at once", recs, 1.2,
                load={"max_tokens": 200, "shape": "burst", "concurrency": 5})


def four():
    return [make_naive(), make_static_batch(), make_vllm_sequential(), make_vllm_batch()]


def test_the_whole_job_per_contender_in_the_buttons_order():
    runs = four()
    fig = figures.contenders_chart(runs)
    wall, tput = fig.data[0], fig.data[1]
    assert [y.replace("<br>", " ") for y in wall.y] == NAMES  # numbered and ordered as the buttons
    assert list(wall.x) == pytest.approx([r.duration for r in runs])
    assert list(tput.x) == pytest.approx([r.summary.output_throughput for r in runs])
    assert "4.6 s" in wall.text[1] and "1.2 s" in wall.text[3]
    cap = figures.caption(fig)
    # the static batch is slower per request than naive, yet finished the whole job sooner: the caption says so
    naive, static = runs[0], runs[1]
    assert static.summary.mean_latency_s > naive.summary.mean_latency_s and static.duration < naive.duration
    # the times, never their ratio: one run each, and the speed-up is the latency chart's one number
    soonest, batching = (tree(m) for m in figures.caption_said(fig))
    assert soonest == {"id": "{fast} answered all {n} prompts soonest, in {t_fast} s; {slow} took longest, {t_slow} s "
                             "(one run each).", "fast": "4 · vLLM, all at once", "slow": "1 · Naive, one at a time",
                       "n": 5, "t_fast": "1.2", "t_slow": significant(naive.duration)}
    assert "×" not in cap
    assert batching["id"].endswith("batching pays in total time, not in each request's latency.")
    assert (batching["batch"], batching["naive"]) == (significant(static.duration), significant(naive.duration))


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_beside_a_disturbed_run_the_whole_job_names_no_soonest(lang):
    """Seen on the Naive page with a real server on a busy machine: the latency chart's title said "no verdict" (the
    machine was disturbed) while the whole job's caption beside it said "4 · vLLM, all at once answered all 5 prompts
    soonest". Its words follow the verdict's rule: the times as measured, no contender called soonest, and which
    runs were disturbed; the batching lesson kept where its two runs were quiet."""
    from engine.figures.contenders import speedup_said
    from engine.messages import translate
    from engine.observe.disturbance import Disturbance

    runs = four()
    runs[2].extra.beside.disturbance = Disturbance(seconds=10.0, cores=2, others_cores=1.5, steal_cores=0.0)
    title, _ = speedup_said(figures.contenders.speedup(runs[0], runs[2], lang))
    assert "no verdict" in said(title).template  # the latency chart's title beside it withholds
    fig = figures.contenders_chart(runs, lang=lang)
    measured, batching = (tree(m) for m in figures.caption_said(fig))
    assert measured["id"].startswith("All {n} prompts answered, one run each, as measured: {times}.")
    assert measured["runs"] == {"id": "run {runs}", "n": 1, "runs": "3"} and measured["n"] == 5  # by its number
    for k, r in enumerate(runs):
        assert translate(say("{run} ({time} s)", run=figures.contender_name(k, lang),
                             time=significant(r.duration)), lang) in measured["times"]
    assert batching["id"].endswith("batching pays in total time, not in each request's latency.")  # both quiet
    quiet = figures.caption(figures.contenders_chart(four(), lang=lang))
    soonest = figures.caption_said(figures.contenders_chart(four(), lang=lang))[0]
    assert translate(soonest, lang) in quiet and translate(soonest, lang) not in figures.caption(fig)
    runs[0].extra.beside.chats = 2  # the naive run disturbed too: no batching lesson from it either
    both = figures.caption_said(figures.contenders_chart(runs, lang=lang))
    assert len(both) == 1 and tree(both[0])["runs"] == {"id": "run {runs}", "n": 2, "runs": "1, 3"}
    for r in runs:
        r.extra.beside.chats = 1
    assert tree(figures.caption_said(figures.contenders_chart(runs, lang=lang))[0])["runs"] == {"id": "every run"}


def test_a_contender_not_run_keeps_its_place_and_a_cold_one_is_marked():
    naive, batch = make_naive(), make_vllm_batch()
    batch.extra.warmth.cold = True
    fig = figures.contenders_chart([naive, None, None, batch])
    assert list(fig.data[0].text[1:3]) == ["not run yet"] * 2
    assert fig.data[0].text[3].endswith("❄")  # the cold mark; the caption says what it means
    assert "first batch of its size" in figures.caption(fig)
    ko = figures.contenders_chart([naive, None, None, batch], lang="ko")
    assert ko.data[0].y != fig.data[0].y and "not run yet" not in ko.data[0].text


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_latency_bars_in_the_contenders_order_with_the_legend_clear_of_the_title(lang):
    naive, static, seq, batch = four()
    fig = figures.latency_bars(naive, seq, [batch, static], lang=lang)  # given in any order
    names = [b.name for b in fig.data]
    assert [n.split(" (")[0] for n in names] == [figures.contender_name(k, lang) for k in range(4)]
    # the title sits in the top margin; the legend goes under the plot, so four long names cannot reach it
    assert fig.layout.legend.y < 0 and fig.layout.legend.yanchor == "top"


# -- the page ---------------------------------------------------------------------------------------

def test_the_page_numbers_buttons_and_headline_numbers_alike(lab):
    runs = four()
    for r in runs:
        r.started_at = time.time()
    runs[3].extra.warmth.cold, runs[3].extra.warmth.why, runs[3].extra.warmth.batch_size = True, "first", 5
    for r in runs:
        lab.store.save(r)
    try:
        at = app_page("app_pages/naive_vs_vllm.py")
        assert [b.label for b in at.button][:4] == NAMES
        metrics = [(m.label, m.value) for m in at.metric]
        assert metrics[:4] == [(name, f"{significant(r.duration)} s") for name, r in zip(NAMES, runs)]
        captions = " ".join(c.value for c in at.caption)
        assert "wall time for all 5" in captions
        warned = [w.value.replace("\\", "") for w in at.warning]
        cold = warmth.said(runs[3].extra)  # the judge's sentence for the cold run, led by its contender's name
        assert any(w.startswith(f"{NAMES[3]}: {cold}") for w in warned) and values(cold) == {"n": 5}, warned
    finally:
        lab.store.delete([r.id for r in runs])


def test_the_page_shows_only_its_own_load_jobs(lab):
    """A Load test run is a load job too: the Naive page's panel is not about it (tests/test_load_page.py: nor
    the other way round)."""
    from engine.jobs import JobManager
    from tests.test_figures import make_concurrent

    jobs, lab.jobs = lab.jobs, JobManager()
    try:
        job = lab.jobs.submit("load", "10 at once", lambda job: make_concurrent(), scenario="concurrent-10")
        while job.active:
            time.sleep(0.05)
        job.error = "boom from the load test"
        at = app_page("app_pages/naive_vs_vllm.py")
        assert not [e.value for e in at.error if "boom" in e.value]
    finally:
        lab.jobs = jobs


def test_the_vllm_side_shows_where_its_time_went_inside_the_server_and_its_energy(lab):
    """The server's view on this page: both vLLM contenders' server view in one chart (a row pair each, the bars
    their own notes), each energy line headed by the contender's name; the naive runs, which have no server, none."""
    import json

    runs = four()
    views = {2: 0.05, 3: 0.4}  # queue seconds: one after another nothing waits; all at once some do
    for k, queue in views.items():
        runs[k].extra.server_view = ServerView(histograms={"queue": KeptHistogram(mean=queue),
                                                           "prefill": KeptHistogram(mean=0.02),
                                                           "decode": KeptHistogram(mean=0.6)})
        runs[k].extra.energy.reading = EnergyReading(method="rapl", joules=90.0 * k, seconds=runs[k].duration)
    for r in runs:
        r.started_at = time.time()
        lab.store.save(r)
    try:
        at = app_page("app_pages/naive_vs_vllm.py")
        charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
        fig = next(c for c in charts if "Where a request's time went" in c["layout"]["title"]["text"])
        queued = {d["y"][0]: d["x"][0] for d in fig["data"] if d["name"] == "waiting in the queue"}
        assert queued == {f"{NAMES[k]} · vLLM": pytest.approx(q * 1000) for k, q in views.items()}  # the page's names
        bolts = [m.value.replace("\\", "") for m in at.markdown if m.value.startswith(":material/bolt:")]
        assert [b.split(":", 2)[2].split(":")[0].strip() for b in bolts] == [NAMES[2], NAMES[3]], bolts
    finally:
        lab.store.delete([r.id for r in runs])
