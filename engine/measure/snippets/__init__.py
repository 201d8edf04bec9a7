"""The Python behind a run, for an attendee to copy: a chat's or a load test's short code (`load.py`), a workload
run's (`workload.py`), written the lab's way (`python.py`). See docs/internals.md#snippets."""
