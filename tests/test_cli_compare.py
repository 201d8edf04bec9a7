"""`python -m engine compare A B`: two saved runs or two sets of repeats judged on throughput, TTFT, TPOT and E2E
latency, one verdict sentence per metric (engine.measure.judge.verdict), as JSON with --json; a run measured
beside other work is said; a name that matches nothing is one sentence."""
import json
import math

import pytest

from engine.results.records import Beside, Disturbance, Notes, Repeat, RequestRecord, RunResult
from engine.results.store import RunStore

from .conftest import cli_in_process
from .said import read, reads

# the verdict's sentences, by message id (engine.measure.judge.verdict.Verdict.said)
WITHIN = ("{name}: no measurable difference on this machine between {a} and {b} (measured {effect}; {interval}, which "
          "holds no change; {how}).")
HIGHER = "{name}: {b} is higher than {a}, {effect}, beyond noise ({interval}; {how})."
ONE_VALUE = ("{name}: {b} measured {effect} against {a}, but with one value a side the noise is unknown, so this "
             "decides nothing: repeat each at least twice.")
WITHHELD = ("{name}: no verdict, because the machine was disturbed: {b} measured {effect} against {a} ({sure}). "
            "{beside} Measure both again on a quiet machine.")


def _run(label: str, ttft_s: float, *, gap_s: float = 0.02, tput: float | None = None, group: str = "",
         index: int | None = None, started: float = 1.76e9, spread: float = 0.01, disturbance=None) -> RunResult:
    """A run of 12 requests of 10 tokens, each one's first token after about `ttft_s` (spread by `spread`)."""
    recs = []
    for i in range(12):
        ttft = ttft_s * (1 + spread * ((i % 5) - 2))
        chunks = [0.1 * i + ttft + gap_s * k for k in range(10)]
        recs.append(RequestRecord(index=i, prompt="p", send_time=0.1 * i, first_token_time=chunks[0],
                                  end_time=chunks[-1], chunk_times=chunks, prompt_tokens=20, output_tokens=10))
    run = RunResult(kind="vllm", scenario="concurrent-10", label=label, records=recs, duration=2.0,
                    started_at=started,
                    extra=Notes(repeat=Repeat(group=group, index=index, total=3 if group else None),
                                beside=Beside(disturbance=disturbance)))
    from engine.measure.judge import stats

    run.summary = stats.summarize(recs, run.duration)
    if tput is not None:
        run.summary.output_throughput = tput
    return run


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVING_LAB_DB", str(tmp_path / "history.sqlite"))  # the command's, read where it starts
    return RunStore(tmp_path / "history.sqlite")


def _lines(p):
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    return p.stdout.splitlines()


def test_two_runs_each_metric_in_one_sentence_ttft_beyond_noise(store):
    a, b = _run("fast", 0.2), _run("slow", 0.4)
    store.save(a), store.save(b)
    lines = _lines(cli_in_process("compare", a.id, b.id))
    assert lines[0] == f"A: fast, {a.id}" and lines[1] == f"B: slow, {b.id}"
    said = lines[2:]
    assert len(said) == 4, said  # throughput, TTFT, TPOT, E2E: one sentence each
    sides = lambda x: (x["name"], x["a"], x["b"])  # noqa: E731
    one, = reads(ONE_VALUE, said[0])  # throughput: one value a side decides nothing
    assert sides(one) == ("Output throughput", "fast", "slow"), said[0]
    ttft, = reads(HIGHER, said[1])
    assert sides(ttft) == ("Mean TTFT", "fast", "slow") and ttft["effect"].startswith("2"), said[1]
    how = read("{method}, {counts}; {between}", ttft["how"])
    assert read("{n} requests each", how["counts"]) == {"n": "12"}, said[1]
    # one run a side: the run-to-run allowance its requests cannot see is added and named
    assert read("one run a side: its requests' spread plus ±{pct} % allowed between runs", how["between"]) == {
        "pct": "10"}, said[1]
    ttft = json.loads(cli_in_process("compare", a.id, b.id, "--json").stdout)["metrics"][1]
    assert ttft["per"] == "requests" and ttft["between_runs"] == pytest.approx(math.log(1.1))
    assert [sides(x) for x in reads(WITHIN, said[2])] == [("Mean TPOT", "fast", "slow")], said[2]
    assert [sides(x) for x in reads(HIGHER, said[3])] == [("Mean E2E latency", "fast", "slow")], said[3]


def test_repeat_groups_within_noise_and_by_label(store):
    tputs_a, tputs_b = (100.0, 104.0, 97.0), (101.0, 98.0, 103.0)
    for i, t in enumerate(tputs_a):
        store.save(_run("base", 0.2, tput=t, group="ga", index=i + 1, started=1.76e9 + i))
    for i, t in enumerate(tputs_b):
        store.save(_run("tuned", 0.2, tput=t, group="gb", index=i + 1, started=1.76e9 + 10 + i))
    by_group = _lines(cli_in_process("compare", "ga", "gb"))
    by_label = _lines(cli_in_process("compare", "base", "tuned"))
    assert by_group == by_label
    tput = next(line for line in by_group if line.startswith("Output throughput"))
    within, = reads(WITHIN, tput)
    assert (within["name"], within["a"], within["b"]) == ("Output throughput", "base", "tuned"), tput
    assert within["how"].endswith(", 3 runs each"), tput
    data = json.loads(cli_in_process("compare", "ga", "gb", "--json").stdout)
    assert [m["key"] for m in data["metrics"]] == ["output_throughput", "mean_ttft_ms", "mean_tpot_ms",
                                                   "mean_e2el_ms"]
    first = data["metrics"][0]
    assert first["n_a"] == first["n_b"] == 3 and first["per"] == "runs" and first["beyond_noise"] is False
    assert first["between_runs"] is None  # repeats' own spread holds the run-to-run noise
    assert first["low"] < 1 < first["high"] and first["said"] == tput
    assert len(data["a"]["runs"]) == 3 and data["a"]["disturbed"] is False


def test_a_disturbed_side_is_said(store):
    busy = Disturbance(seconds=10, cores=2, others_cores=1.5, steal_cores=0.0)
    a, b = _run("x", 0.2), _run("x", 0.21, started=1.76e9 + 60, disturbance=busy)
    store.save(a), store.save(b)
    lines = _lines(cli_in_process("compare", a.id[:8], b.id))
    judged = lines[2:]  # one sentence a metric, each withholding its verdict and saying which side was disturbed
    withheld = [read(WITHHELD, x) for x in judged]
    assert len(judged) == 4 and all(withheld), judged
    assert {read("Measured while {what}: this machine can do better than these numbers.", x["beside"])["what"]
            for x in withheld} == {"other programs used 1.5 of 2 cores"}, judged
    assert " from " in lines[0]  # one label on both sides: each told apart by its start time
    assert json.loads(cli_in_process("compare", a.id, b.id, "--json").stdout)["b"]["disturbed"] is True


@pytest.mark.parametrize("args, says", [
    (["nope", "nope2"], "No run, repeat group or label 'nope' in the history"),
    (["RUN", "RUN"], "A and B share a run"),
    ([",", "RUN"], "Name the runs to compare"),
])
def test_a_bad_name_is_one_sentence(store, args, says):
    run = _run("x", 0.2)
    store.save(run)
    p = cli_in_process("compare", *[a.replace("RUN", run.id) for a in args])
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr, p.stderr
    line, = p.stderr.splitlines()
    assert line.startswith("error: ") and says in line, line
