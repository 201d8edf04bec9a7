"""engine.results.store: the SQLite run history, its JSON/CSV export and import."""
from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from engine.errors import LabError
from engine.measure.judge.stats import summarize
from engine.results.exchange import MAX_IMPORT_CHARS
from engine.results.records import Load, Notes, RequestRecord, RunResult
from engine.results.store import RunNotFound, RunStore
from engine.results.validation import ImportFailed, RunDamaged
from engine.results.vllm_bench import from_bench_json
from tests.said import parts, values

ROOT = Path(__file__).resolve().parent.parent


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
                    # a value not of its field's type (kept aside in its part)
                    extra={"server": {"kv_cache_tokens": 12345}, "naive": {"memory": [{"t": 0.0, "used_gb": 1.5}]}})
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
    assert rows[0].summary.get("completed") == 4 and rows[0].source == "local"
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
    assert [o["serving_lab"]["id"] for o in json.loads(store.export_json([a.id, b.id]))] == [b.id]  # deleted meanwhile
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
    assert other.import_file(f) == [run.id]
    assert other.load(run.id) == run
    assert other.import_file(str(f)) == [run.id]  # again, by path string: no duplicate
    assert other.import_text(f.read_text(), source="import:upload.json") == [run.id]  # and as text
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
    ids = store.import_text(text, source="import:vb.json")
    assert len(ids) == 2 and len(set(ids)) == 2
    assert store.import_text(text, source="import:vb.json") == ids and len(store) == 2
    run = store.load(ids[0])
    ok, bad = run.records
    assert ok.ttft == pytest.approx(0.1) and ok.e2e == pytest.approx(0.3) and ok.output_tokens == 3
    assert ok.chunk_times == pytest.approx([0.1, 0.15, 0.2])
    assert bad.error == "timeout" and bad.send_time == pytest.approx(0.2)
    assert run.summary.get("mean_ttft_ms") == 100.0 and run.summary.get("max_concurrency") == 2
    assert run.load.concurrency == 8 and run.model.endswith("8B-Instruct")


def test_import_rejects_garbage(store, tmp_path):
    with pytest.raises(ImportFailed, match="not valid JSON"):
        store.import_text("{not json", source="import:x.json")
    with pytest.raises(ImportFailed) as refused:
        store.import_text('{"hello": 1}', source="import:x.json")
    assert parts(refused.value)["why"].startswith("it is neither a Serving Lab export nor a vllm bench serve result")
    with pytest.raises(ImportFailed, match="There is no file"):
        store.import_file(tmp_path / "missing.json")
    with pytest.raises(ImportFailed, match="not a file"):
        store.import_file(tmp_path)


def test_import_examples(store, tmp_path):
    src = RunStore(tmp_path / "gpu-box.sqlite")
    a, b = make_run(1_764_500_001.0, "h200 a"), make_run(1_764_500_002.0, "h200 b")
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


def test_kill_right_after_save_loses_nothing(tmp_path):
    """A process killed (SIGKILL) the instant save() returns: the run is there, whole."""
    path = tmp_path / "h.sqlite"
    code = (
        "import os, signal, sys; sys.path.insert(0, sys.argv[2]);"
        "from tests.test_store import make_run; from engine.results.store import RunStore;"
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
    # each run says its H200, but one sent to a server by URL from the GPU box: that records the server's address
    # (runs made before a loopback address was taken for this machine carry no hardware)
    assert all("H200" in r.hardware.get("summary", "") or (not r.hardware and r.extra.server.endpoint) for r in rows)
    assert sum("H200" in r.hardware.get("summary", "") for r in rows) >= 10
    conc = store.load(next(r.id for r in rows if r.scenario == "concurrent-10"))
    assert len(conc.measured) == 10 and conc.summary.get("completed") == 10
    assert store.import_examples() == []  # already there: nothing duplicated


# -- secrets at rest --------------------------------------------------------------------------------

SECRET = "sk-lab-5ecret-value-0042"

# The tables as schema version 1 wrote them (frozen here: the migration must read what old apps wrote).
V1_SCHEMA = """
CREATE TABLE runs (id TEXT PRIMARY KEY, kind TEXT NOT NULL, scenario TEXT NOT NULL, label TEXT NOT NULL,
    started_at REAL NOT NULL, duration REAL NOT NULL, model TEXT NOT NULL DEFAULT '',
    config TEXT NOT NULL DEFAULT '{}', command TEXT NOT NULL DEFAULT '', load TEXT NOT NULL DEFAULT '{}',
    hardware TEXT NOT NULL DEFAULT '{}', versions TEXT NOT NULL DEFAULT '{}', summary TEXT NOT NULL DEFAULT '{}',
    extra TEXT NOT NULL DEFAULT '{}', n_requests INTEGER NOT NULL DEFAULT 0, n_failed INTEGER NOT NULL DEFAULT 0,
    source TEXT NOT NULL DEFAULT 'local', saved_at REAL NOT NULL);
CREATE INDEX runs_started ON runs(started_at);
CREATE TABLE requests (run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, seq INTEGER NOT NULL,
    request_index INTEGER NOT NULL, prompt TEXT NOT NULL, send_time REAL NOT NULL, end_time REAL,
    first_token_time REAL, chunk_times TEXT NOT NULL DEFAULT '[]', prompt_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0, tokens_source TEXT NOT NULL DEFAULT 'usage',
    output_text TEXT NOT NULL DEFAULT '', error TEXT, warmup INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (run_id, seq));
"""


def insert_raw(conn: sqlite3.Connection, run: RunResult, **columns) -> None:
    """A run row written straight into the tables, as an old app or a hand edit would leave it."""
    row = dict(id=run.id, kind=run.kind, scenario=run.scenario, label=run.label, started_at=run.started_at,
               duration=run.duration, model=run.model, config=json.dumps(run.config), command=run.command,
               load=json.dumps(run.load.to_dict()), hardware=json.dumps(run.hardware),
               versions=json.dumps(run.versions), summary=json.dumps(run.summary.to_dict()),
               extra=json.dumps(run.extra.to_dict()), n_requests=len(run.measured),
               n_failed=sum(1 for r in run.measured if r.error), source="local", saved_at=1.0)
    row.update(columns)
    conn.execute(f"INSERT INTO runs ({','.join(row)}) VALUES ({','.join('?' * len(row))})", list(row.values()))
    for seq, r in enumerate(run.records):
        conn.execute("INSERT INTO requests (run_id, seq, request_index, prompt, send_time, end_time, first_token_time,"
                     " chunk_times, prompt_tokens, output_tokens, tokens_source, output_text, error, warmup)"
                     " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                     (row["id"], seq, r.index, r.prompt, r.send_time, r.end_time, r.first_token_time,
                      json.dumps(r.chunk_times), r.prompt_tokens, r.output_tokens, r.tokens_source, r.output_text,
                      r.error, int(r.warmup)))


def with_secrets(run: RunResult) -> RunResult:
    """A run carrying the key the way older versions stored it, and in places a future field might."""
    run.load = Load.from_dict({**run.load.to_dict(), "api_key": SECRET,
                               "headers": {"Authorization": f"Bearer {SECRET}"}})
    run.config = {**run.config, "api_key": SECRET, "tokenizer": "t", "extra_args": ["--api-key", SECRET]}
    run.extra = Notes.from_dict({**run.extra.to_dict(),
                                 "client": [{"hf_token": SECRET, "Password": SECRET, "kept": 1}]})
    run.command = (f"python -m vllm.entrypoints.openai.api_server \\\n    --model /m \\\n    --api-key {SECRET} \\\n"
                   f"    --port 9000")
    return run


def assert_no_secret(obj) -> None:
    text = json.dumps(obj) if not isinstance(obj, str) else obj
    assert SECRET not in text
    for key in ("api_key", "Authorization", "hf_token", "Password"):
        assert f'"{key}"' not in text, key


def test_v1_database_holding_an_api_key_is_migrated(tmp_path):
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as c:
        c.executescript(V1_SCHEMA)
        run = with_secrets(make_run())
        insert_raw(c, run)
        c.execute("PRAGMA user_version=1")
    assert SECRET.encode() in path.read_bytes()

    store = RunStore(path)
    with sqlite3.connect(path) as c:
        from engine.results.database import SCHEMA_VERSION

        assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION  # through 2 (no secrets) to the newest
        for col in ("load", "config", "extra", "command"):
            assert_no_secret(c.execute(f"SELECT {col} FROM runs").fetchone()[0])
    back = store.load(run.id)
    assert "--api-key $VLLM_API_KEY" in back.command and back.command.endswith("--port 9000")
    assert back.config["extra_args"] == ["--api-key", "$VLLM_API_KEY"]
    # everything that is not a secret stays, tokens counts and tokenizers included
    assert back.load.max_tokens == 20 and back.config["tokenizer"] == "t"
    # schema 5's "client" is the load client's name: a list there is kept aside in that part, not trusted
    assert back.extra.load_client.other == {"name": [{"kept": 1}]} and back.extra.server.kv_cache_tokens == 12345
    assert back.records == run.records and back.records[0].cached_tokens is None  # not reported then
    # and the old bytes are gone from the files, not just from the rows
    del store
    for f in (path, path.with_name(path.name + "-wal")):
        if f.exists():
            assert SECRET.encode() not in f.read_bytes(), f
    assert RunStore(path).load(run.id) == back  # opening again changes nothing


def test_a_newer_database_is_refused_with_a_sentence(tmp_path):
    path = tmp_path / "future.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("PRAGMA user_version=99")
    with pytest.raises(LabError, match="newer Serving Lab"):
        RunStore(path)


def test_save_and_exports_never_write_a_secret(store):
    run = with_secrets(make_run())
    store.save(run)
    with sqlite3.connect(store.path) as c:
        for row in c.execute("SELECT * FROM runs"):
            assert_no_secret([str(x) for x in row])
    assert_no_secret(store.export_json())
    assert SECRET not in store.export_csv()
    from engine.results.vllm_bench import to_bench_json
    assert_no_secret(to_bench_json(with_secrets(make_run())))  # even a run that never went through the store


def test_database_files_are_private(tmp_path):
    old = os.umask(0)  # without the explicit mode, sqlite would create the file 0666 here
    try:
        store = RunStore(tmp_path / "h.sqlite")
        store.save(make_run())
        with sqlite3.connect(store.path) as c:  # an open connection keeps -wal and -shm on disk
            c.execute("SELECT COUNT(*) FROM runs").fetchone()
            for f in (store.path, Path(f"{store.path}-wal"), Path(f"{store.path}-shm")):
                assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    finally:
        os.umask(old)


def test_an_existing_world_readable_database_is_tightened(tmp_path):
    path = tmp_path / "h.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE t (x)")
    path.chmod(0o644)
    RunStore(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# -- hostile imports ---------------------------------------------------------------------------------

def export_obj(**changes) -> dict:
    """One run as an export object, with `changes` applied inside "serving_lab" (dotted paths)."""
    from engine.results.vllm_bench import to_bench_json

    obj = to_bench_json(make_run(label="my run"))
    for path, value in changes.items():
        *parents, last = path.split(".")
        d = obj["serving_lab"]
        for part in parents:
            d = d[int(part)] if isinstance(d, list) else d[part]
        if value is DELETE:
            del d[last]
        elif isinstance(d, list):
            d[int(last)] = value
        else:
            d[last] = value
    return obj


DELETE = object()


@pytest.mark.parametrize("changes, problem", [
    ({"started_at": 1e20}, "started_at is not a date between 2000 and now"),
    ({"started_at": -5.0}, "started_at is not a date between 2000 and now"),
    ({"config": ["a", "list"]}, "config is not an object"),
    ({"records.1": [1, 2]}, "records[1] is not an object"),
    ({"records": "abc"}, "records is not a list"),
    ({"records.3.send_time": float("nan")}, "records[3].send_time is not a number"),
    ({"records.3.send_time": "0.1"}, "records[3].send_time is not a number"),
    ({"records.3.end_time": float("inf")}, "records[3].end_time is infinite"),
    ({"records.2.chunk_times.4": None}, "records[2].chunk_times[4] is not a number"),
    ({"duration": -1.0}, "duration is negative"),
    ({"label": DELETE}, "label is missing"),
    ({"records.1.send_time": DELETE}, "records[1].send_time is missing"),
    ({"label": "x" * 5000}, "label is longer than"),
    ({"records.1.output_tokens": 10**30}, "records[1].output_tokens is out of range"),
    ({"records.1.output_tokens": 2.5}, "records[1].output_tokens is not a whole number"),
    ({"summary.mean_ttft_ms": float("nan")}, "summary.mean_ttft_ms is not a number"),
    ({"versions": 3}, "versions is not an object"),
    ({"id": {"a": 1}}, "id is not text"),
    ({"records.1.end_time": -100.0}, "records[1].end_time is before its send_time"),
])
def test_a_bad_file_is_refused_whole_with_one_sentence(store, changes, problem):
    good = [export_obj(), export_obj()]
    good[1]["serving_lab"]["id"] = "second"
    text = json.dumps(good + [export_obj(**changes)])
    with pytest.raises(ImportFailed) as e:
        store.import_text(text, source="import:bad.json")
    msg = str(e.value)
    assert msg.startswith("Run 3 of 3") and f": {problem}" in msg, msg
    assert msg.endswith("export it again from Serving Lab.") and "\n" not in msg
    assert len(store) == 0  # the two good runs before it are not imported either


def test_the_sentence_names_the_first_problem_exactly(store):
    bad = export_obj()
    bad["serving_lab"]["records"][4]["send_time"] = "soon"
    text = json.dumps([export_obj(), bad, export_obj()])
    with pytest.raises(ImportFailed) as e:
        store.import_text(text, source="import:bad.json")
    assert values(e.value) == {"where": {"i": 2, "n": 3}, "label": " ('my run')",
                               "why": {"what": {"where": "records[4].send_time"}, "maker": "Serving Lab"}}
    assert "is not a number" in str(e.value)


def test_markup_in_a_label_does_not_reach_the_sentence(store):
    bad = export_obj(label="[click](http://evil.example) <b>x</b>", duration=-1)
    with pytest.raises(ImportFailed) as e:
        store.import_text(json.dumps(bad), source="import:bad.json")
    assert not any(ch in str(e.value) for ch in "[]<>"), str(e.value)


def test_absurd_files_are_refused_without_a_traceback(store, tmp_path):
    with pytest.raises(ImportFailed, match="nested"):
        store.import_text("[" * 100_000 + "]" * 100_000, source="import:deep.json")
    deep = export_obj()
    deep["serving_lab"]["extra"]["x"] = json.loads("[" * 200 + "]" * 200)
    with pytest.raises(ImportFailed, match="extra is nested deeper"):
        store.import_text(json.dumps(deep), source="import:deep.json")
    with pytest.raises(ImportFailed, match="MB"):
        store.import_text(" " * (MAX_IMPORT_CHARS + 1), source="import:big.json")
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_IMPORT_CHARS + 1)
    with pytest.raises(ImportFailed, match="MB"):
        store.import_file(big)
    with pytest.raises(ImportFailed, match="not UTF-8"):
        (tmp_path / "bin.json").write_bytes(b"\xff\xfe[]")
        store.import_file(tmp_path / "bin.json")
    vb = {"model_id": "m", "completed": 1, "date": "20251130-101500", "ttfts": {"a": 1}}
    with pytest.raises(ImportFailed, match="ttfts is not a list"):
        store.import_text(json.dumps(vb), source="import:vb.json")
    vb = {"model_id": "m", "completed": 1, "date": "someday", "ttfts": [0.1]}
    with pytest.raises(ImportFailed, match="date"):
        store.import_text(json.dumps(vb), source="import:vb.json")
    assert len(store) == 0


def test_an_upload_is_never_read_as_a_path(store, tmp_path):
    f = tmp_path / "on-the-server.json"
    f.write_text(json.dumps([export_obj()]))
    with pytest.raises(ImportFailed, match="not valid JSON"):
        store.import_text(str(f), source="import:upload.json")
    assert len(store) == 0


def test_a_run_without_an_id_imports_once(store):
    obj = export_obj(id=DELETE)
    ids = store.import_text(json.dumps(obj), source="import:a.json")
    assert store.import_text(json.dumps(obj), source="import:a.json") == ids and len(store) == 1


def test_cli_import_reads_files_and_says_what_is_wrong(tmp_path, monkeypatch, capsys):
    from engine.cli import main

    monkeypatch.setenv("SERVING_LAB_DB", str(tmp_path / "cli.sqlite"))
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps([export_obj()]))
    bad.write_text(json.dumps([export_obj(duration="long")]))
    assert main(["import", str(good)]) == 0
    assert main(["import", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "duration is not a number" in err and "Traceback" not in err
    assert main(["import", str(tmp_path / "nope.json")]) == 2
    assert "There is no file" in capsys.readouterr().err
    assert len(RunStore(tmp_path / "cli.sqlite")) == 1


# -- stored rows that are odd anyway -----------------------------------------------------------------

def test_odd_stored_rows_list_and_can_be_deleted(store):
    with sqlite3.connect(store.path) as c:
        insert_raw(c, make_run(label="far future"), id="future", started_at=1e20)
        insert_raw(c, make_run(label="bad json"), id="badjson", summary="{oops", config="[1, 2]")
        insert_raw(c, make_run(label="text numbers"), id="textnum", duration="long", n_requests="many",
                   label=12345)
        insert_raw(c, make_run(label="bad records"), id="badrec", started_at=1_764_500_001.0)
        c.execute("UPDATE requests SET chunk_times='nope', send_time='x' WHERE run_id='badrec'")
    store.save(make_run(label="fine"))
    rows = {r.id: r for r in store.list()}
    assert len(rows) == 5
    odd = {k: r for k, r in rows.items() if r.problem}
    assert set(odd) == {"future", "badjson", "textnum"}
    assert odd["future"].started == "unknown" and "start time" in odd["future"].problem
    assert odd["badjson"].summary.empty and odd["badjson"].config == {}
    assert odd["textnum"].duration == 0.0 and odd["textnum"].n_requests == 0 and odd["textnum"].label == "12345"
    for rid in ("future", "badjson", "badrec"):
        with pytest.raises(RunDamaged) as e:
            store.load(rid)
        assert "delete it" in str(e.value)
    # the exports leave damaged runs out instead of failing
    assert {o["serving_lab"]["label"] for o in json.loads(store.export_json())} >= {"fine"}
    assert store.delete(list(odd) + ["badrec"]) == 4 and [r.label for r in store.list()] == ["fine"]


def test_failed_runs_are_marked(store):
    run = make_run(label="all failed")
    for r in run.records:
        r.error, r.end_time, r.first_token_time, r.chunk_times = "HTTP 400: max_tokens too large", None, None, []
    store.save(run)
    store.save(make_run(label="one failed", started_at=2.0))
    rows = {r.label: r for r in store.list()}
    assert rows["all failed"].failed and not rows["one failed"].failed
    assert rows["all failed"].n_failed == rows["all failed"].n_requests == 5


# -- what a viewer costs -----------------------------------------------------------------------------

def test_change_token_moves_with_every_write_and_only_then(store):
    t0 = store.change_token()
    assert store.change_token() == t0
    rows = store.list_cached()
    assert store.list_cached() is rows and rows == []
    run = make_run()
    store.save(run)
    t1 = store.change_token()
    assert t1 != t0
    rows = store.list_cached()
    assert [r.id for r in rows] == [run.id] and store.list_cached() is rows
    assert store.load_cached(run.id) is store.load_cached(run.id)
    # another RunStore on the same file in this process
    RunStore(store.path).rename(run.id, "renamed")
    assert store.change_token() != t1 and store.list_cached()[0].label == "renamed"
    t2 = store.change_token()
    # another process (the CLI) writing to the same file
    code = "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute(\"UPDATE runs SET label='cli'\"); c.commit()"
    subprocess.run([sys.executable, "-c", code, str(store.path)], check=True)
    assert store.change_token() != t2 and store.list_cached()[0].label == "cli"
    assert store.load_cached(run.id).label == "cli"
