"""engine.jobs.JobManager lets finished jobs go: a long-lived app does not hold every result it ever ran, while
running jobs and what a page asks for (each kind's newest) stay."""
from __future__ import annotations

import threading
import time

from engine.errors import LabError
from engine.jobs import JobManager


def _until(cond, limit_s: float = 60.0) -> None:
    """A liveness bound, not a timing."""
    deadline = time.monotonic() + limit_s
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cond()


def test_finished_jobs_are_pruned_running_ones_and_each_kinds_newest_kept():
    jobs = JobManager()
    release = threading.Event()
    running = jobs.submit("sweep", "a long one", lambda job: release.wait(60), lane="other")
    tuning = jobs.submit("tuning", "the one tuning run", lambda job: "tuned", lane="tuning")
    _until(lambda: not tuning.active)
    loads = []
    for i in range(JobManager.KEEP_FINISHED + 20):
        loads.append(jobs.submit("load", f"run {i}", lambda job: 1))
        _until(lambda: not loads[-1].active)
    try:
        kept = [j for j in [running, tuning, *loads] if jobs.get(j.id) is j]
        assert jobs.get(loads[0].id) is None  # the oldest results are let go...
        assert len(kept) <= JobManager.KEEP_FINISHED + 3  # ...so the jobs held stay bounded
        assert jobs.get(running.id) is running and running in jobs.active()
        assert jobs.latest("tuning") is tuning and jobs.latest("tuning").result == "tuned"  # each kind's newest
        assert jobs.latest("load") is loads[-1] and jobs.get(loads[-2].id) is loads[-2]
    finally:
        release.set()


def test_a_jobs_fingerprint_stands_while_it_runs_and_changes_when_it_ends():
    """What a page watches once a job's view stands still (ui.live_job): the same until the job ends."""
    jobs = JobManager()
    release = threading.Event()
    job = jobs.submit("load", "one run", lambda job: release.wait(60))
    before = job.seen
    assert job.seen == before
    release.set()
    _until(lambda: not job.active and job.ended_at is not None)
    assert job.seen != before
    assert job.seen[1] == "done"


def test_a_failed_jobs_error_is_shown_until_its_time_is_up_then_not():
    """What a still page watches beside Job.seen, so that an error shown for a while leaves when its time is up."""
    jobs = JobManager()

    def fail(job):
        raise LabError("the server went away")

    job = jobs.submit("load", "one run", fail)
    _until(lambda: not job.active and job.ended_at is not None)
    assert job.error and job.error_shown() and job.error_shown(120)
    job.ended_at -= 121  # ended 121 s ago, by its own clock
    assert job.error_shown() and not job.error_shown(120)
    done = jobs.submit("load", "another", lambda job: None)
    _until(lambda: not done.active)
    assert not done.error_shown() and not done.error_shown(120)
