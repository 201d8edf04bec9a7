"""Repeats that stop with their server: the server gone during repeat 2 of 3, repeat 3 is not
run, the finished repeats are kept, the reason is said, and a failed repeat never enters the statistics as a zero;
the CLI caps --repeats as the page does unless told. The dying server is tests/fakes.py's (`die`)."""
from __future__ import annotations


from engine.cli.summary import repeats_table
from engine.measure.judge import failures
from engine.measure.load.spec import LoadSpec
from engine.runs import Runner, Target

from .conftest import cli_in_process
from .fakes import FakeOpenAIServer
from .said import read, values

DEAD = "http://127.0.0.1:9"


def _spec(url: str) -> LoadSpec:
    return LoadSpec(base_url=url, model="die", prompts=["hi"], num_requests=4, shape="sequential", max_tokens=3,
                    warmup=0, timeout_s=10, read_timeout_s=5)


def test_repeats_stop_when_their_server_is_gone_and_keep_what_finished():
    saved = []
    with FakeOpenAIServer(die_after=6, models=("die",)) as srv:  # repeat 1 answers 4; repeat 2, 2 and then it dies
        target = Target.at(srv.base_url)
        out = Runner(lambda r: saved.append(r) or r).repeat(_spec(srv.base_url), target, 3)
    assert len(out) == 2 and [r.id for r in saved] == [r.id for r in out]  # repeat 3 never ran; both kept
    assert [r.extra.repeat.failed for r in out] == [False, True]
    assert out.stopped is not None
    stopped = values(out.stopped)  # the repeat that failed, what it counted, and the 1 repeat left unrun
    assert (stopped["i"], stopped["total"], stopped["n"], stopped["url"]) == (2, 3, 1, srv.base_url), stopped
    assert stopped["counts"] in ({"planned": 4, "ok": 2, "failed": 1, "never": 1},
                                 {"planned": 4, "ok": 2, "failed": 2, "never": 0}), stopped
    assert [r.summary.output_throughput > 0 for r in failures.counted_repeats(out)] == [True]
    table = repeats_table(out)
    assert "left out: repeat 2" in table and "0.00" not in table, table


def test_repeats_go_on_past_a_failed_repeat_while_the_server_answers():
    """A repeat with one failed request on a server that still answers: the rest run; the failed one is only left
    out of the statistics."""
    with FakeOpenAIServer(models=("ok",)) as srv:
        spec = LoadSpec(base_url=srv.base_url, model="ok", prompts=["hi"], num_requests=2, max_tokens=2, warmup=0)
        out = Runner(lambda r: r).repeat(spec, Target.at(srv.base_url), 3)
    assert len(out) == 3 and out.stopped is None and not any(r.extra.repeat.failed for r in out)


def test_the_cli_runs_no_repeat_against_a_dead_server(tmp_path, monkeypatch):
    for name, value in (("HOME", tmp_path), ("RUNTIME", tmp_path / "runtime"), ("DB", tmp_path / "h.sqlite")):
        monkeypatch.setenv(f"SERVING_LAB_{name}", str(value))
    with FakeOpenAIServer(die_after=7, models=("die",)) as srv:  # repeat 2 answers 2 of its 5, then it dies
        done = cli_in_process("run", "vllm-5-sequential", "--url", srv.base_url, "--max-tokens", "2", "--repeats", "3")
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert out.count("saved as run ") == 2 and "repeat 3 of 3" not in out, out
    left = read("Repeat {i} of {total} failed ({counts}) and the server at {url} no longer answers, so the {n} repeat "
                "left was not run: the finished repeats are kept, and only those that answered every request count in "
                "the statistics.", out)
    assert left and (left["i"], left["total"], left["n"], left["url"]) == ("2", "3", "1", srv.base_url), out
    assert "median 0.00" not in out and "Traceback" not in done.stderr


def test_the_cli_caps_repeats_as_the_page_does_unless_told():
    p = cli_in_process("run", "concurrent-10", "--url", DEAD, "--repeats", "1000")
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr, p.stderr
    line, = p.stderr.splitlines()
    # a CLI-only sentence (no message id): its numbers and the flags it names
    assert line.startswith("error: --repeats 1000 ") and "1000 times" in line, line
    assert "the Load test page stops at 10" in line and "--repeats 10 or fewer" in line and "--many-repeats" in line
    p = cli_in_process("run", "concurrent-10", "--url", DEAD, "--repeats", "1000", "--many-repeats")
    assert "--repeats" not in p.stderr  # allowed: it fails later, on the dead server


def test_the_cap_says_how_long_the_repeats_would_take_from_the_history(tmp_path, monkeypatch):
    from engine.results.store import RunStore
    from tests.test_store import make_run

    monkeypatch.setenv("SERVING_LAB_DB", str(tmp_path / "h.sqlite"))  # the command's, read where it starts
    run = make_run(label="ten at once", n=10)  # scenario concurrent-10
    run.duration = 12.0
    RunStore(tmp_path / "h.sqlite").save(run)
    p = cli_in_process("run", "concurrent-10", "--url", DEAD, "--repeats", "1000")
    found = read("--repeats {n} runs the load test {n} times, one after another (about {total}, at the {each} its last "
                 "run in the history measured, warm-ups not counted); the Load test page stops at {most}: give "
                 "--repeats {most} or fewer, or add --many-repeats to run all {n}.", p.stderr)
    assert found and (found["n"], found["total"], found["each"]) == ("1000", "3 h 20 min", "12 s"), p.stderr
