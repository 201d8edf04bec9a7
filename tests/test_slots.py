"""Batch slots step by step (engine.measure.judge.slots, engine.figures.slots) from hand-built records whose
answers are known: which state each slot is in at each step, and how many slot-steps were wasted."""
from __future__ import annotations

import pytest

from engine import figures
from engine.measure.judge.slots import FINISHED, GENERATING, IDLE, MAX_COLUMNS, PROMPT, SlotGrid, occupancy
from engine.results.records import RequestRecord, RunResult

from .said import said, values

P, G, F, I = PROMPT, GENERATING, FINISHED, IDLE  # noqa: E741 (a grid reads as letters)
STEP = 0.125  # a binary fraction: the column arithmetic below is exact


def static_run(tokens: list[int]) -> RunResult:
    """A static batch as the naive worker records it: every request sent at 0 and answered at the batch's
    end; each row's token times stop at its own last token."""
    longest = max(tokens)
    recs = []
    for i, k in enumerate(tokens):
        chunks = [0.5 + STEP * j for j in range(k)]
        recs.append(RequestRecord(index=i, prompt=f"p{i}", send_time=0.0, end_time=0.5 + STEP * longest,
                                  first_token_time=chunks[0], chunk_times=chunks, output_tokens=k))
    return RunResult(kind="static-batch", scenario="static-batch-5", label="static batch", records=recs,
                     duration=0.5 + STEP * longest, started_at=0.0, load={"mode": "static-batch"})


def request(i: int, send: float, tokens: int, wait: float = 2 * STEP) -> RequestRecord:
    """A streamed vLLM request: `wait` to its first token, then one token a step."""
    chunks = [send + wait + STEP * j for j in range(tokens)]
    return RequestRecord(index=i, prompt=f"p{i}", send_time=send, first_token_time=chunks[0], chunk_times=chunks,
                         end_time=chunks[-1] + STEP, output_tokens=tokens)


def vllm_run(recs: list[RequestRecord], shape: str = "concurrency") -> RunResult:
    return RunResult(kind="vllm", scenario="concurrent-2", label="vLLM", records=recs,
                     duration=max(r.end_time for r in recs), started_at=0.0, load={"shape": shape, "concurrency": 2})


def test_static_batch_wastes_what_the_short_answers_wait_for_the_longest():
    g = occupancy(static_run([2, 5, 10]))
    assert isinstance(g, SlotGrid) and g.kind == "static"
    assert (g.slots, g.steps) == (3, 11)  # the padded prefill, then 10 steps
    assert g.cells[0] == [P, G, G] + [F] * 8
    assert g.cells[1] == [P] + [G] * 5 + [F] * 5
    assert g.cells[2] == [P] + [G] * 10
    assert g.used == 2 + 5 + 10
    assert g.wasted == (10 - 2) + (10 - 5) == g.counts[FINISHED]
    assert g.useful_share == pytest.approx(17 / 30)
    assert g.step_s == pytest.approx(STEP)
    assert "13 were wasted" in g.said and "(57%)" in g.said


def test_equal_answers_waste_nothing_in_a_static_batch():
    g = occupancy(static_run([4, 4]))
    assert g.wasted == 0 and g.useful_share == 1.0


def test_vllm_gives_a_finished_slot_to_the_queued_request_at_once():
    """Two slots, three requests: the short one ends and the third, sent that moment, takes its slot."""
    a = request(0, 0.0, 2)  # columns 0-3: waits 2, generates 2, ends at 0.5
    b = request(1, 0.0, 9)  # columns 0-10
    c = request(2, a.end_time, 3)  # sent as `a` ends: columns 4-8, then its slot is idle
    g = occupancy(vllm_run([c, b, a]))
    assert isinstance(g, SlotGrid) and g.kind == "continuous"
    assert g.step_s == pytest.approx(STEP) and g.steps_per_column == 1
    assert (g.slots, g.steps) == (2, 11)
    assert g.cells[0] == [P, P, G, G, P, P, G, G, G, I, I]
    assert g.owner[0][3] == 0 and g.owner[0][4] == 2  # the lowest free slot, refilled at once
    assert g.cells[1] == [P, P] + [G] * 9
    assert g.counts[FINISHED] == 0 and g.idle_waiting == 0 and g.wasted == 0
    assert g.used == 2 + 9 + 3 and g.useful_share == 1.0
    assert (g.requests, g.refills) == (3, 1)
    assert "the next one took its slot at once" in figures.caption(figures.slot_chart([vllm_run([c, b, a])]))


def test_vllm_slot_idle_while_a_ready_request_was_not_sent_is_waste():
    """The third request was ready from the start (a closed loop) but sent 4 steps after a slot freed."""
    a, b = request(0, 0.0, 2), request(1, 0.0, 9)
    c = request(2, a.end_time + 4 * STEP, 2)
    g = occupancy(vllm_run([a, b, c]))
    assert g.cells[0][4:8] == [I] * 4 and g.idle_waiting == 4 and g.wasted == 4
    # with Poisson arrivals the third had not arrived yet: an idle slot then costs nothing
    assert occupancy(vllm_run([a, b, c], shape="poisson")).idle_waiting == 0


def test_a_refill_takes_the_slot_of_the_request_it_replaced():
    """Slot 1 freed last: the request sent that moment fills it (slot 0 had stood idle for two steps, not
    waiting for anyone), so nothing counts as idle while waiting."""
    a, b, c = request(0, 0.0, 2), request(1, 0.0, 4), request(2, 0.0, 12)  # a ends at 0.5, b at 0.75
    d = request(3, b.end_time, 2)
    g = occupancy(vllm_run([a, b, c, d]))
    assert g.owner[1][6] == 3 and g.cells[0][4:] == [I] * (g.steps - 4)
    assert g.idle_waiting == 0 and g.wasted == 0


def test_requests_that_each_had_a_slot_are_not_said_to_refill_one():
    run = vllm_run([request(0, 0.0, 2), request(1, 0.0, 5)], shape="burst")
    assert occupancy(run).refills == 0
    said_first = figures.caption_said(figures.slot_chart([run]))[0]
    assert said(said_first).template.startswith("No slot held a finished answer") and values(said_first) == {"n": 2}


def test_a_long_run_groups_steps_into_at_most_max_columns():
    g = occupancy(vllm_run([request(0, 0.0, 3 * MAX_COLUMNS)]))
    assert g.steps_per_column == 4 and g.steps <= MAX_COLUMNS  # 3,003 steps of the run, 4 a column
    assert g.step_s == pytest.approx(4 * STEP)


@pytest.mark.parametrize("run, why", [
    (vllm_run([RequestRecord(index=0, prompt="p", send_time=0.0, end_time=1.0, output_tokens=5)]), "no token times"),
    (RunResult(kind="static-batch", scenario="static-batch-5", label="s", duration=1.0, started_at=0.0,
               records=[RequestRecord(index=0, prompt="p", send_time=0.0, error="out of memory")]), "failed"),
    (RunResult(kind="naive", scenario="naive-5", label="n", records=[], duration=1.0, started_at=0.0),
     "one request at a time"),
])
def test_a_run_without_what_the_picture_needs_says_why(run, why):
    said = occupancy(run)
    assert isinstance(said, str) and not isinstance(said, SlotGrid) and why in said


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_the_figure_puts_both_side_by_side_on_one_step_axis(lang):
    static = static_run([2, 5, 10])
    vllm = vllm_run([request(0, 0.0, 2), request(1, 0.0, 9), request(2, 0.5, 3)])
    fig = figures.slot_chart([static, vllm], lang=lang)
    maps = [t for t in fig.data if t.type == "heatmap"]
    assert [list(map(list, m.z)) for m in maps] == [occupancy(static).cells, occupancy(vllm).cells]
    assert fig.layout.xaxis.range == fig.layout.xaxis2.range == (-0.5, 11.5)  # one scale: the longer of the two
    assert len([t for t in fig.data if t.type == "scatter" and t.showlegend is not False]) == 4  # the states
    assert values(figures.caption_said(fig)[0]) == {"wasted": 13, "share": "43%", "v_wasted": 0}  # either language
    assert "13" in figures.caption(fig) and "43%" in figures.caption(fig)  # and shown in it


def test_a_panel_that_cannot_be_drawn_says_why():
    bare = vllm_run([RequestRecord(index=0, prompt="p", send_time=0.0, end_time=1.0, output_tokens=5)])
    fig = figures.slot_chart([static_run([3, 6]), bare])
    assert any("no token times" in (a.text or "") for a in fig.layout.annotations)
    assert values(figures.caption_said(fig)[0]) == {"wasted": 3, "share": "25%"}  # 3 of 3 + 6 + 3
