"""The server's view drawn (engine.figures.server_view): on records with known numbers the bars
are the notes' means and the caption says the bars' very numbers; a queue that dominates is named; a run without
a server view is a sentence, not an empty chart; the energy line and J per output token."""
from __future__ import annotations

import pytest

from engine.figures import caption, caption_said
from engine.figures import server_view as sv
from engine.results.records import Energy, EnergyReading, Notes, RequestRecord, RunResult, ServerView

from .said import read, said, values

# vLLM's means per request (s): 0.8 in the queue, 0.1 in prefill, 1.0 in decode, 1.95 in all by its own clock
VIEW = {"histograms": {"queue": {"mean": 0.8, "p50": 0.7, "p90": 0.9, "p99": 1.0, "count": 2},
                       "prefill": {"mean": 0.1, "count": 2}, "decode": {"mean": 1.0, "count": 2},
                       "e2e": {"mean": 1.95, "count": 2}}, "missing": []}


def _run(view: dict | None, ttfts=(1.0, 1.0), e2es=(2.0, 2.2), label="ten at once",
         energy: Energy | None = None) -> RunResult:
    """A run of requests with those TTFTs and E2Es, the server's view `view` (as stored), its `energy`."""
    recs = [RequestRecord(index=i, prompt="q", send_time=0.0, first_token_time=t, end_time=e, output_tokens=32)
            for i, (t, e) in enumerate(zip(ttfts, e2es))]
    return RunResult(kind="vllm", scenario="concurrent-10", label=label, records=recs, duration=2.2,
                     started_at=1.7e9, extra=Notes(server_view=None if view is None else ServerView.from_dict(view),
                                                   energy=energy or Energy()))


def _bars(fig) -> dict[str, dict[str, float]]:
    """row -> trace name -> its bar's length (ms)."""
    out: dict[str, dict[str, float]] = {}
    for d in fig.data:
        out.setdefault(d.y[0], {})[d.name] = d.x[0]
    return out


def test_the_bars_are_the_notes_means_and_add_up_to_the_client_e2e():
    fig = sv.server_view_chart(_run(VIEW))
    bars = _bars(fig)
    server, client = bars["vLLM (its /metrics)"], bars["the client"]
    assert server["waiting in the queue"] == pytest.approx(800)
    assert server["prefill"] == pytest.approx(100) and server["decode"] == pytest.approx(1000)
    # the gap named, split where vLLM timed its whole request too: 1.95 - 1.9 inside it, 2.1 - 1.95 outside it
    assert server[sv.FRONT] == pytest.approx(50) and server[sv.OUTSIDE] == pytest.approx(150)  # the legend's names
    assert sum(server.values()) == pytest.approx(2100)  # the client's mean E2E (2.0 and 2.2 s)
    assert client == pytest.approx({sv.CLIENT_TTFT: 1000, sv.CLIENT_REST: 1100})
    parts, _queue_said, estimated = caption_said(fig)  # the bars' numbers, the queue named, how they were read
    assert values(parts) == {"queue": "800", "prefill": "100", "decode": "1,000", "front": "50", "outside": "150",
                             "e2e": "2,100"}
    queue = next(d for d in fig.data if d.name == "waiting in the queue")
    assert "bucket estimates" in queue.hovertext[0] and "p90 900 ms" in queue.hovertext[0]
    assert "estimated from the histograms' buckets" in said(estimated).template


def test_a_gap_vllm_did_not_split_is_one_named_part():
    view = {**VIEW, "histograms": {k: v for k, v in VIEW["histograms"].items() if k != "e2e"}}
    fig = sv.server_view_chart(_run(view))
    server = _bars(fig)["vLLM (its /metrics)"]
    assert server["HTTP, detokenising, streaming, the client"] == pytest.approx(200)
    assert values(caption_said(fig)[0])["gap"] == "200" and "front" not in caption_said(fig)[0].values


def test_the_sentence_names_the_queue_when_it_dominates_and_only_then():
    queue = [m for m in caption_said(sv.server_view_chart(_run(VIEW))) if "waiting for a slot" in said(m).template]
    assert [values(m) for m in queue] == [{"share": 0.8}]
    quick = {**VIEW, "histograms": {**VIEW["histograms"], "queue": {"mean": 0.05}}}
    assert not [m for m in caption_said(sv.server_view_chart(_run(quick))) if "waiting for a slot" in m.template]
    # a sweep's levels: each level whose queue dominates is named
    fig = sv.server_view_chart([_run(quick, label="concurrency 1"), _run(VIEW, label="concurrency 64")])
    named = [values(m) for m in caption_said(fig) if "waiting for a slot" in said(m).template]
    assert named == [{"run": "concurrency 64", "share": 0.8}]
    assert {d.y[0] for d in fig.data} == {"concurrency 1 · vLLM", "concurrency 1 · client", "concurrency 64 · vLLM",
                                          "concurrency 64 · client"}


def test_in_korean_the_caption_is_korean_with_the_same_numbers():
    cap = caption(sv.server_view_chart(_run(VIEW), lang="ko"))
    assert "큐 대기에 800 ms" in cap and "--max-num-seqs" in cap and "waiting" not in cap


def test_no_server_view_is_a_sentence_not_an_empty_chart():
    # a server that is not vLLM: the run was measured by this app (its energy said), /metrics had no histograms
    said = sv.server_view_chart(_run(None, energy=Energy(missing="no-meter")))
    assert isinstance(said, str) and "published no request histograms" in said
    vllm_like = sv.server_view_chart(_run({"histograms": {}, "missing": ["queue"]},
                                          energy=Energy(missing="no-meter")))
    assert isinstance(vllm_like, str) and "published no request histograms" in vllm_like
    # a run that holds no trace of the reading at all may be older than it: both are said
    older = sv.server_view_chart(_run(None))
    assert read("This run holds no histograms of the server's: its server published none on /metrics, or the run "
                "was saved before this app read them. Where the time went inside the server is not known.",
                older) == {}
    assert "히스토그램" in sv.server_view_chart(_run(None), lang="ko")


def test_the_energy_line_and_the_joules_per_token():
    run = _run(VIEW, energy=Energy(reading=EnergyReading(method="nvml-counter", joules=128.0, seconds=2.0,
                                                         idle_w=70.0)))
    assert sv.j_per_token(run) == pytest.approx(2.0)  # 128 J over 2 answers of 32 tokens
    line = sv.energy_line(run)
    assert "2.000 J per output token" in line and "0.50 output tokens per J" in line
    assert "NVML's energy counter" in line and "70 W before the run" in line
    assert "출력 토큰당 2.000 J" in sv.energy_line(run, lang="ko")
    missing = _run(VIEW, energy=Energy(missing="elsewhere"))
    assert sv.j_per_token(missing) is None and "another machine" in sv.energy_line(missing)
    assert "Energy is not measurable here" in sv.energy_line(_run(VIEW, energy=Energy(missing="no-meter")))
    assert sv.energy_line(_run(VIEW)) is None  # recorded neither: nothing said


def _texts(fig) -> list[str]:
    """Every text a viewer reads on the figure: title, caption, axis, legend, bar labels, hovers, annotations."""
    out = [fig.layout.title.text, caption(fig), fig.layout.xaxis.title.text, *(a.text for a in fig.layout.annotations)]
    for d in fig.data:
        out += [d.name, *d.y, *(d.hovertext or ()), *(d.text or ())]
    return out


def test_korean_leaves_no_english_but_names():
    from tests.korean import english_in

    run = _run(VIEW, energy=Energy(reading=EnergyReading(method="rapl", joules=128.0, seconds=2.0, idle_w=70.0)))
    fig = sv.server_view_chart([run, _run({**VIEW, "histograms": {k: v for k, v in VIEW["histograms"].items()
                                                                  if k != "e2e"}}, label="둘째")], lang="ko")
    one = sv.server_view_chart(run, lang="ko")
    texts = _texts(fig) + _texts(one) + [sv.energy_line(run, lang="ko"), sv.server_view_chart(_run(None), lang="ko"),
                                         sv.energy_line(_run(VIEW, energy=Energy(missing="no-meter")), lang="ko"),
                                         sv.energy_line(_run(VIEW, energy=Energy(missing="elsewhere")), lang="ko")]
    assert not english_in(texts, frozenset({"ten", "at", "once"})), english_in(texts)  # the run's label is data
