"""A comparison beside a disturbed run claims nothing: whatever the t test says, a difference measured
while other programs, another client or chats took from one side is not this machine's, so every place that
compares runs (the verdict itself, Tuning's and History's captions, the CLI's tuning verdict, `compare`, the Naive
page's speed-up) says how sure it would be and that the machine was disturbed, in English and Korean, as the guided
lab's "No verdict" heading does. Constructed runs: the same numbers, quiet and disturbed."""
from __future__ import annotations

import copy
import json

import pytest

from engine.measure.judge import stats, verdict
from engine.messages import say, translate
from engine.observe import disturbance
from engine.results.records import Beside, Disturbance, Notes, Repeat, RequestRecord, RunResult

from .said import read, reads, said, values

BUSY = Disturbance(seconds=10.0, cores=2, others_cores=1.5, steal_cores=0.0)  # 1.5 of 2 cores used by others
QUIET = Disturbance(seconds=10.0, cores=2, others_cores=0.05, steal_cores=0.0, other_requests=0)
WITHHELD = ("{name}: no verdict, because the machine was disturbed: {b} measured {effect} against {a} ({sure}). "
            "{beside} Measure both again on a quiet machine.")


def _run(label: str, ttft_s: float, *, tput: float, group: str = "", index: int | None = None,
         started: float = 1.76e9, beside: Disturbance | None = None) -> RunResult:
    """A run of 12 requests of 10 tokens, the first token after about `ttft_s`, its throughput `tput`."""
    recs = []
    for i in range(12):
        ttft = ttft_s * (1 + 0.01 * ((i % 5) - 2))
        chunks = [0.1 * i + ttft + 0.02 * k for k in range(10)]
        recs.append(RequestRecord(index=i, prompt=f"p{i}", send_time=0.1 * i, first_token_time=chunks[0],
                                  end_time=chunks[-1], chunk_times=chunks, prompt_tokens=20, output_tokens=10))
    run = RunResult(kind="vllm", scenario="tuning", label=label, records=recs, duration=2.0, started_at=started,
                    extra=Notes(repeat=Repeat(group=group, index=index, total=3 if group else None),
                                beside=Beside(disturbance=beside)))
    run.summary = stats.summarize(recs, run.duration)
    run.summary.output_throughput = tput
    return run


def _set(label: str, group: str, tputs, start: float, beside_second: dict | None = None) -> list[RunResult]:
    """Three repeats of one configuration; the second measured beside `beside_second` when given."""
    return [_run(label, 0.2, tput=t, group=group, index=i + 1, started=start + i,
                 beside=beside_second if i == 1 else QUIET) for i, t in enumerate(tputs)]


def _sets(busy: bool) -> tuple[list[RunResult], list[RunResult]]:
    """max-model-len 512 at ~100 tok/s against 2048 at ~150: far beyond the repeats' noise on a quiet machine."""
    return (_set("max-model-len 512", "g1", (100.0, 104.0, 98.0), 1.76e9),
            _set("max-model-len 2048", "g2", (150.0, 148.0, 153.0), 1.76e9 + 60, BUSY if busy else None))


def test_a_verdict_beside_a_disturbed_run_withholds_its_finding_and_says_why():
    quiet_a, quiet_b = _sets(busy=False)
    quiet = verdict.compare_runs(quiet_a, quiet_b, "output_throughput", name="Output throughput",
                                 label_a="512", label_b="2048")
    assert quiet.beyond_noise is True and quiet.finding is True and quiet.disturbed is None
    assert "beyond noise" in said(quiet.said).template

    busy_a, busy_b = _sets(busy=True)
    v = verdict.compare_runs(busy_a, busy_b, "output_throughput", name="Output throughput", label_a="512",
                             label_b="2048")
    assert v.beyond_noise is True  # what the test found: kept (the JSON says it), but not stated as a finding
    assert v.finding is None and v.disturbed is not None
    assert said(v.said).template == WITHHELD and "beyond noise" not in str(v.said)
    got = values(v.said)
    assert got["sure"]["how"]["counts"] == {"n": 3}  # how sure it would have been: the interval and the method
    assert got["sure"]["interval"]["low"] == said(quiet.interval).values["low"]
    # which side, and what disturbed it: the run's own sentence (1 of its 3 runs)
    assert got["beside"]["side"] == "2048"
    assert got["beside"]["sentence"] == {"k": 1, "n": 3, "sentence": values(disturbance.said(busy_b[1].extra))}
    assert "beyond noise" not in str(v.short) and "disturbed" in str(v.short)
    ko = translate(v.said, "ko")
    assert ko != str(v.said) and "2048" in ko and "1.5" in ko
    assert translate(v.short, "ko") != str(v.short)


def test_the_rule_follows_the_disturbance_recorded_on_the_runs():
    """Withheld exactly when disturbance.disturbed says a run was: another client, chats, steal, other programs;
    a run saved before the field (None) or a quiet one claims as before."""
    a, b = _sets(busy=False)
    for beside, chats in ((BUSY, 0), (Disturbance(other_requests=3), 0), (None, 2),
                          (Disturbance(seconds=10.0, cores=2, others_cores=0.0, steal_cores=0.4), 0),
                          (None, 0), (QUIET, 0)):
        b2 = copy.deepcopy(b)
        b2[0].extra.beside.disturbance, b2[0].extra.beside.chats = beside, chats
        v = verdict.compare_runs(a, b2, "output_throughput", name="x", label_a="A", label_b="B")
        assert (v.finding is None) == disturbance.disturbed(b2[0].extra), (beside, chats)
        assert (said(v.said).template == WITHHELD) == disturbance.disturbed(b2[0].extra)


def test_a_pair_of_single_runs_is_withheld_on_every_metric():
    """--versus, side by side, the report's pair: one run a side, TTFT judged from the requests."""
    a, b = _run("A: here", 0.2, tput=100.0), _run("B: there", 0.4, tput=100.0, beside={"other_requests": 5})
    for v in verdict.of_pair([a], [b], "A: here", "B: there"):
        assert v.finding is None and said(v.said).template == WITHHELD
    b.extra.beside.disturbance = QUIET
    ttft = next(v for v in verdict.of_pair([a], [b], "A: here", "B: there") if v.per == verdict.REQUESTS)
    assert ttft.finding is True and "beyond noise" in said(ttft.said).template


def test_the_naive_pages_speed_up_is_withheld_beside_a_disturbed_run():
    from engine.figures.contenders import speedup_said

    naive = _run("naive", 0.2, tput=10.0)
    for r in naive.records:
        r.end_time += 3.0  # the naive loop: every answer 3 s slower
    fast = _run("vLLM", 0.2, tput=10.0)
    assert verdict.per_prompt(fast, naive, name="Latency", label_a="vLLM", label_b="naive").finding is True
    naive.extra.beside.chats = 2
    v = verdict.per_prompt(fast, naive, name="Latency", label_a="vLLM", label_b="naive")
    assert v.beyond_noise is True and v.finding is None
    title, caption = speedup_said(v)
    assert "faster" not in said(title).template and said(caption).template == WITHHELD


def test_the_naive_pages_title_fits_its_half_of_the_page_whatever_the_verdict():
    """Seen on the Naive page at 1920x1080 with a real server on a busy machine: the latency chart's title read
    "Latency per request: vLLM at 26× the naive loop's speed as" (Korean: "… 26배, 판정 !"), cut at the chart's edge,
    its verdict lost. Every verdict's title fits the half page's room (about 56 Latin letters at the title's size,
    a Hangul letter two), in both languages."""
    from dataclasses import replace

    from engine.figures import latency_bars
    from engine.figures.contenders import speedup_said
    from engine.figures.theme import _shown_width

    naive = _run("naive", 0.2, tput=10.0)
    for r in naive.records:
        r.end_time += 3.0
    fast = _run("vLLM", 0.2, tput=10.0)
    v = verdict.per_prompt(fast, naive, name="Latency", label_a="vLLM", label_b="naive")
    naive.extra.beside.chats = 2
    busy = verdict.per_prompt(fast, naive, name="Latency", label_a="vLLM", label_b="naive")
    assert busy.disturbed is not None
    cases = [v, replace(v, beyond_noise=False), replace(v, beyond_noise=None), busy,
             replace(v, ratio=1 / 26.0, low=1 / 30.0, high=1 / 22.0)]
    for case in cases:
        title, _ = speedup_said(case)
        for lang in ("en", "ko"):
            shown = latency_bars(naive, fast, lang=lang, speed=case).layout.title.text
            assert _shown_width(shown) <= 56, (lang, shown)
            assert translate(title, lang) in shown


def test_the_tuning_caption_withholds_beyond_noise_beside_a_disturbed_run():
    from engine import figures

    quiet = figures.caption(figures.tuning_compare(sum(_sets(busy=False), [])))
    runs_a, runs_b = _sets(busy=True)
    v = verdict.compare_runs(runs_a, runs_b, "output_throughput", name="x", label_a="max-model-len 512",
                             label_b="max-model-len 2048")  # as the chart names them
    for lang in ("en", "ko"):
        cap = figures.caption(figures.tuning_compare(runs_a + runs_b, lang=lang))
        assert translate(v.short, lang) in cap, cap  # the effect measured, its verdict withheld
        assert translate(v.disturbed, lang) in cap  # and what disturbed which configuration
    assert "beyond noise" in quiet and "beyond noise" not in figures.caption(figures.tuning_compare(runs_a + runs_b))


def test_the_tuning_caption_says_how_it_judged_only_beside_a_verdict_it_gives():
    """Seen on Tuning beside disturbed runs: "1.49× (+49 %), no verdict: the machine was disturbed. Judged by Welch's t
    …; within noise is no measurable difference on this machine." How it was judged, and what "within noise" means,
    belong beside a verdict given, not one withheld."""
    from engine import figures

    judged = "Judged by {how}; within noise is no measurable difference on this machine."
    quiet = [said(m).template for m in figures.caption_said(figures.tuning_compare(sum(_sets(busy=False), [])))]
    busy = [said(m).template for m in figures.caption_said(figures.tuning_compare(sum(_sets(busy=True), [])))]
    assert judged in quiet and judged not in busy
    assert any(t.endswith("measure those runs again on a quiet machine.") for t in busy)


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_the_tuning_caption_withholds_its_verdict_once(lang):
    """Seen on Tuning in Korean: "…, 판정 보류: 측정 중 다른 작업이 함께 실행됨." and then "…포함된 비교는 판정하지
    않습니다": the withheld verdict said twice. It is said once, beside its effect; the sentence after says what ran
    beside and what to do."""
    from engine import figures

    cap = figures.caption(figures.tuning_compare(sum(_sets(busy=True), []), lang=lang))
    word = {"en": "verdict", "ko": "판정"}[lang]
    assert cap.lower().count(word) == 1, cap


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_both_sides_disturbed_are_said_in_one_sentence_the_consequence_once(lang):
    """Seen under Tuning's and History's charts beside two disturbed configurations: each side's whole sentence,
    "max-model-len 512: Measured while other programs used 1.5 of 2 cores: this machine can do better than these
    numbers. (3 of 3 runs.) max-model-len 2048: Measured while … (1 of 3 runs.)", a wall of text. Now each side's
    clause and count, and "this machine can do better" once."""
    from engine import figures

    runs_a, runs_b = _sets(busy=True)
    for r in runs_a:
        r.extra.beside.disturbance = BUSY
    v = verdict.compare_runs(runs_a, runs_b, "output_throughput", name="x", label_a="max-model-len 512",
                             label_b="max-model-len 2048")
    both = said(v.disturbed)
    assert both.template == "{each}. This machine can do better than these numbers."
    first, rest = values(both)["each"]["first"], values(both)["each"]["rest"]
    assert (first["side"], first["k"], first["n"]) == ("max-model-len 512", 3, 3)
    assert (rest["side"], rest["k"], rest["n"]) == ("max-model-len 2048", 1, 3)
    assert first["what"] == values(disturbance.what(runs_a[0].extra))
    better = translate(say("{each}. This machine can do better than these numbers.", each="x"), lang)[3:]
    for fig in (figures.tuning_compare(runs_a + runs_b, lang=lang), figures.history_compare(runs_a + runs_b,
                                                                                             lang=lang)):
        cap = figures.caption(fig)
        assert cap.count(better) == 1, cap  # said once, not once a side
        assert translate(v.disturbed, lang) in cap


def test_the_history_caption_withholds_beyond_noise_beside_a_disturbed_run():
    from engine import figures

    a, b = _sets(busy=True)
    _, lead, *_ = figures.caption_said(figures.history_compare(a + b, "output_throughput"))
    assert said(lead).template.startswith("{name}: no verdict, because the machine was disturbed: {b} measured")
    assert values(lead)["beside"]["side"] == "max-model-len 2048"  # what disturbed which side, in numbers
    assert values(lead)["beside"]["sentence"]["sentence"]["what"] == {"used": 1.5, "cores": 2}
    _, quiet, *_ = figures.caption_said(figures.history_compare(sum(_sets(busy=False), []), "output_throughput"))
    assert said(quiet).template == "{name}: {b} is higher than {a}, {effect}, beyond noise ({interval}; {how})."


def test_the_cli_tuning_verdict_withholds_beyond_noise_beside_a_disturbed_run(capsys):
    from engine.cli.run import _said
    from engine.measure.workloads import scenarios

    a, b = _sets(busy=True)
    _said(a + b, scenarios.get("tuning"), None, None)
    out = capsys.readouterr().out
    withheld = [x for line in out.splitlines() for x in reads(WITHHELD, line) if x["name"] == "Output throughput"]
    assert len(withheld) == 1, out
    assert read("Measured while {what}: this machine can do better than these numbers.", withheld[0]["beside"]) == {
        "what": "other programs used 1.5 of 2 cores"}, out


def test_cli_compare_says_it_once_per_metric_and_marks_the_json(tmp_path, monkeypatch):
    from engine.results.store import RunStore

    from .conftest import cli_in_process

    monkeypatch.setenv("SERVING_LAB_DB", str(tmp_path / "history.sqlite"))  # the command's, read where it starts
    store = RunStore(tmp_path / "history.sqlite")
    a, b = _sets(busy=True)
    for r in a + b:
        store.save(r)
    p = cli_in_process("compare", "g1", "g2")
    assert p.returncode == 0 and "Traceback" not in p.stderr
    judged = [x for x in p.stdout.splitlines() if x.startswith(("Output throughput", "Mean "))]
    assert judged and all(read(WITHHELD, x) for x in judged), judged  # each metric's verdict withheld
    assert "beyond noise" not in p.stdout
    data = json.loads(cli_in_process("compare", "g1", "g2", "--json").stdout)
    assert data["b"]["disturbed"] is True and data["a"]["disturbed"] is False
    first = data["metrics"][0]
    assert first["beyond_noise"] is True and first["finding"] is None and first["disturbed"]
