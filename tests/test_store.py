"""engine.store: the SQLite run history, its JSON/CSV export and import."""
from __future__ import annotations

import csv
import io
import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.records import RequestRecord, RunResult  # noqa: E402
from engine.stats import summarize  # noqa: E402
from engine.store import ImportFailed, RunNotFound, RunStore, from_bench_json  # noqa: E402


def make_run(started_at: float = 1_764_500_000.0, label: str = "vLLM, 4 at once", n: int = 4,
             kind: str = "vllm") -> RunResult:
    recs = [RequestRecord(index=-1, prompt="warm up", send_time=-1.0, end_time=-0.5, first_token_time=-0.9,
                          chunk_times=[-0.9, -0.7], output_tokens=2, warmup=True)]
    for i in range(n):
        chunks = [0.1 + i * 0.01 + k * 0.02 for k in range(20)]
        recs.append(RequestRecord(index=i, prompt=f"Prompt {i}, with a comma and \"quotes\"\nand a newline",
                                  send_time=i * 0.01, end_time=chunks[-1] + 0.005, first_token_time=chunks[0],
                                  chunk_times=chunks, prompt_tokens=12 + i, output_tokens=20,
                                  output_text=f"안녕하세요 answer {i}"))
    recs.append(RequestRecord(index=n, prompt="boom", send_time=0.05, end_time=0.3, error="HTTP 500: oops"))
    run = RunResult(kind=kind, scenario=f"concurrent-{n}", label=label, records=recs, duration=0.6,
                    started_at=started_at, model="/models/SmolLM2-135M-Instruct",
                    config={"max_model_len": 2048, "gpu_memory_utilization": 0.85},
                    command="vllm serve /models/SmolLM2-135M-Instruct --max-model-len 2048",
                    load={"concurrency": n, "max_tokens": 20, "request_rate": float("inf")},
                    hardware={"accelerator": "cpu", "gpus": []}, versions={"vllm": "0.32.0", "torch": "2.13.0"},
                    extra={"kv_cache_tokens": 12345, "memory": [{"t": 0.0, "used_gb": 1.5}]})
    run.summary = summarize(run.records, run.duration)
    return run


@pytest.fixture
def store(tmp_path) -> RunStore:
    return RunStore(tmp_path / "history.sqlite")


def test_save_load_round_trip(store):
    run = make_run()
    assert store.save(run) == run.id
    back = store.load(run.id)
    assert back == run  # dataclass equality: every field, every record, in order
    assert back.records[0].warmup and back.records[-1].error == "HTTP 500: oops"


def test_wal_and_durable_settings(store):
    with sqlite3.connect(store.path) as c:
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_list_newest_first_and_cheap(store):
    old, mid, new = make_run(100.0, "old"), make_run(200.0, "mid"), make_run(300.0, "new", kind="naive")
    for r in (mid, new, old):
        store.save(r)
    rows = store.list()
    assert [r.label for r in rows] == ["new", "mid", "old"]
    assert rows[0].n_requests == 5 and rows[0].n_failed == 1  # warm-up not counted
    assert rows[0].summary["completed"] == 4 and rows[0].source == "local"
    assert not hasattr(rows[0], "records")
    assert [r.label for r in store.list(limit=2)] == ["new", "mid"]
    assert [r.label for r in store.list(kind="naive")] == ["new"]
    assert len(store) == 3


def test_save_again_replaces(store):
    run = make_run()
    store.save(run)
    run.label = "renamed"
    run.records = run.records[:2]
    store.save(run)
    assert len(store) == 1 and store.load(run.id).records == run.records
    store.rename(run.id, "again")
    assert store.list()[0].label == "again"


def test_delete(store):
    a, b = make_run(1.0), make_run(2.0)
    store.save(a)
    store.save(b)
    assert store.delete([a.id]) == 1
    assert [r.id for r in store.list()] == [b.id]
    with pytest.raises(RunNotFound):
        store.load(a.id)
    with sqlite3.connect(store.path) as c:
        assert c.execute("SELECT COUNT(*) FROM requests WHERE run_id=?", (a.id,)).fetchone()[0] == 0
    assert store.delete(b.id) == 1 and store.delete([]) == 0 and len(store) == 0


def test_export_json_has_vllm_keys_and_round_trips(store, tmp_path):
    run = make_run()
    store.save(run)
    objs = json.loads(store.export_json([run.id]))
    assert isinstance(objs, list) and len(objs) == 1
    o = objs[0]
    for key in ("date", "backend", "model_id", "tokenizer_id", "num_prompts", "request_rate", "max_concurrency",
                "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
                "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
                "mean_tpot_ms", "p99_itl_ms", "mean_e2el_ms", "input_lens", "output_lens", "ttfts", "itls",
                "errors", "serving_lab"):
        assert key in o, key
    assert o["date"].count("-") == 1 and len(o["date"]) == 15  # vllm's %Y%m%d-%H%M%S
    assert o["num_prompts"] == 5 and o["completed"] == 4 and o["failed"] == 1
    assert o["request_rate"] == "inf" and o["max_concurrency"] == 4
    assert o["ttfts"][0] == pytest.approx(run.records[1].ttft)  # seconds, as vllm writes them
    assert len(o["itls"][0]) == 19 and o["errors"][-1] == "HTTP 500: oops" and o["errors"][0] == ""
    assert from_bench_json(o) == run

    other = RunStore(tmp_path / "laptop.sqlite")
    f = tmp_path / "export.json"
    f.write_text(store.export_json())
    assert other.import_json(f) == [run.id]
    assert other.load(run.id) == run
    assert other.import_json(str(f)) == [run.id]  # again, by path string: no duplicate
    assert other.import_json(f.read_text()) == [run.id]  # and as text
    assert len(other) == 1 and other.list()[0].source == "import:export.json"


def test_export_csv(store):
    a, b = make_run(1.0, "a"), make_run(2.0, "b", n=2)
    store.save(a)
    store.save(b)
    rows = list(csv.DictReader(io.StringIO(store.export_csv([a.id, b.id]))))
    assert len(rows) == len(a.records) + len(b.records)
    r = rows[1]
    assert r["run_id"] == a.id and r["run_label"] == "a" and r["index"] == "0"
    assert r["prompt"] == a.records[1].prompt  # commas, quotes, newline survive
    assert float(r["ttft_s"]) == pytest.approx(a.records[1].ttft)
    assert json.loads(r["chunk_times_s"]) == a.records[1].chunk_times
    assert rows[0]["warmup"] == "1" and rows[len(a.records) - 1]["error"] == "HTTP 500: oops"
    assert rows[-1]["run_label"] == "b"


def test_second_connection_sees_save_at_once(store):
    run = make_run()
    store.save(run)
    # another process, its own connection, right after save() returned
    code = ("import sqlite3,sys; c=sqlite3.connect(sys.argv[1]);"
            "print(c.execute('select count(*) from requests where run_id=?',(sys.argv[2],)).fetchone()[0])")
    out = subprocess.run([sys.executable, "-c", code, str(store.path), run.id], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == str(len(run.records))
    assert RunStore(store.path).load(run.id) == run


def test_threads(store):
    runs = [make_run(float(i), f"r{i}") for i in range(8)]
    errors = []

    def work(r):
        try:
            store.save(r)
            store.list()
            store.load(r.id)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(r,)) for r in runs]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and len(store) == 8


def test_import_vllm_bench_serve_result(store):
    """A file written by `vllm bench serve --save-result --save-detailed` imports as a run."""
    vb = {
        "date": "20251130-101500", "endpoint_type": "openai-chat", "backend": "openai-chat", "label": None,
        "model_id": "meta-llama/Meta-Llama-3-8B-Instruct", "tokenizer_id": "meta-llama/Meta-Llama-3-8B-Instruct",
        "num_prompts": 2, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 8, "duration": 2.0,
        "completed": 1, "failed": 1, "total_input_tokens": 10, "total_output_tokens": 3,
        "request_throughput": 0.5, "output_throughput": 1.5, "mean_ttft_ms": 100.0, "max_concurrent_requests": 2,
        "input_lens": [10, 12], "output_lens": [3, 0], "ttfts": [0.1, 0.0], "itls": [[0.05, 0.05], []],
        "latencies": [0.3, 0.0], "start_times": [100.0, 100.2], "generated_texts": ["a b c", ""],
        "errors": ["", "timeout"],
    }
    text = json.dumps(vb) + "\n" + json.dumps({**vb, "date": "20251130-101600"})  # --append-result style
    ids = store.import_json(text)
    assert len(ids) == 2 and len(set(ids)) == 2
    assert store.import_json(text) == ids and len(store) == 2
    run = store.load(ids[0])
    ok, bad = run.records
    assert ok.ttft == pytest.approx(0.1) and ok.e2e == pytest.approx(0.3) and ok.output_tokens == 3
    assert ok.chunk_times == pytest.approx([0.1, 0.15, 0.2])
    assert bad.error == "timeout" and bad.send_time == pytest.approx(0.2)
    assert run.summary["mean_ttft_ms"] == 100.0 and run.summary["max_concurrency"] == 2
    assert run.load["max_concurrency"] == 8 and run.model.endswith("8B-Instruct")


def test_import_rejects_garbage(store, tmp_path):
    with pytest.raises(ImportFailed):
        store.import_json("{not json")
    with pytest.raises(ImportFailed):
        store.import_json('{"hello": 1}')
    with pytest.raises(ImportFailed):
        store.import_json(str(tmp_path / "missing.json"))


def test_import_examples(store, tmp_path):
    src = RunStore(tmp_path / "gpu-box.sqlite")
    a, b = make_run(1.0, "h200 a"), make_run(2.0, "h200 b")
    src.save(a)
    src.save(b)
    ex = tmp_path / "examples"
    ex.mkdir()
    (ex / "h200_a.json").write_text(src.export_json([a.id]))
    (ex / "h200_b.json").write_text(src.export_json([b.id]))
    (ex / "README.md").write_text("not json")
    assert sorted(store.import_examples(ex)) == sorted([a.id, b.id])
    assert store.import_examples(ex) == [] and len(store) == 2  # only new runs are reported
    assert {r.source for r in store.list()} == {"example:h200_a.json", "example:h200_b.json"}
    assert store.import_examples(tmp_path / "nowhere") == []


def test_default_path_uses_data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVING_LAB_HOME", str(tmp_path / "home"))
    s = RunStore()
    assert s.path == tmp_path / "home" / "history.sqlite" and s.path.exists()


def test_kill_right_after_save_loses_nothing(tmp_path):
    """A process killed (SIGKILL) the instant save() returns: the run is there, whole."""
    path = tmp_path / "h.sqlite"
    code = (
        "import os, signal, sys; sys.path.insert(0, sys.argv[2]); sys.path.insert(0, sys.argv[2] + '/tests');"
        "from test_store import make_run; from engine.store import RunStore;"
        "s = RunStore(sys.argv[1]); r = make_run(); s.save(r); print(r.id, flush=True);"
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path), str(ROOT)], capture_output=True, text=True)
    assert out.returncode == -9, out.stderr
    run_id = out.stdout.strip()
    back = RunStore(path).load(run_id)
    expected = make_run()
    expected.id = run_id
    assert back == expected


def test_shipped_h200_runs_load_into_history(store):
    """The repository's example runs (measured on an H200) import on any machine, once."""
    ids = store.import_examples()
    assert len(ids) >= 10
    rows = store.list()
    assert {r.scenario for r in rows} >= {"naive-5", "static-batch-5", "vllm-5-sequential", "concurrent-10",
                                         "stream-300", "tuning", "sweep"}
    assert all("H200" in r.hardware.get("summary", "") for r in rows)
    conc = store.load(next(r.id for r in rows if r.scenario == "concurrent-10"))
    assert len(conc.measured) == 10 and conc.summary["completed"] == 10
    assert store.import_examples() == []  # already there: nothing duplicated
