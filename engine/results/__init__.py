"""Keeping results: the typed records of a run and the history they are saved in. (docs/architecture.md)

records.py (RequestRecord, RunResult, RunRow) <- credentials.py (scrubbing) <- validation.py (what a run
must be) <- vllm_bench.py (`vllm bench serve`'s result file) <- exchange.py (JSON/CSV export, import
files) <- database.py (the SQLite file) <- store.py (RunStore, the API the app and the CLI use).
"""
