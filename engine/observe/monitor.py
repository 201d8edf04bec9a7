"""The Monitor page's reading of the telemetry: the newest sample, who holds each GPU, the charts' rows."""
from __future__ import annotations

from collections.abc import Callable

import psutil

from engine.messages import mark
from engine.observe.telemetry import (Sample, Telemetry, downsample, event_rows, memory_rows, metric_rows,
                                      power_rows)


class Monitor:
    """Read-only, over the sampler and what it cannot know itself: the server's pid and events now
    (`server`: a () -> engine.serving.server.Snapshot) and the naive worker's pids ({name: pid})."""

    def __init__(self, telemetry: Telemetry, server: Callable, worker_pids: Callable[[], dict[str, int]]) -> None:
        self._telemetry, self._server, self._worker_pids = telemetry, server, worker_pids

    def latest_sample(self) -> Sample | None:
        """The newest telemetry sample, None before the first."""
        return self._telemetry.latest()

    def gpu_workers(self) -> list[dict]:
        """Who holds memory on each GPU now, from the newest sample: [{gpu, pid, process, owner, used_gb}].
        With tensor, pipeline or data parallelism the server runs one worker per GPU: this shows each."""
        newest = self._telemetry.latest()
        owners = {pid: name for name, pid in self._worker_pids().items()}
        if pid := self._server().pid:
            try:
                server = psutil.Process(pid)
                owners.update({q.pid: mark("vLLM server") for q in [server, *server.children(recursive=True)]})
            except psutil.Error:
                pass
        rows = []
        for gpu in newest.memory if newest else ():
            for p in gpu.get("processes", ()):
                try:
                    name = psutil.Process(p["pid"]).name()
                except psutil.Error:
                    name = "?"
                rows.append({"gpu": gpu["series"], "pid": p["pid"], "process": name,
                             "owner": owners.get(p["pid"], mark("another program")), "used_gb": p["used_gb"]})
        return rows

    def rows(self, seconds: float, max_points: int) -> tuple[list[dict], list[dict], list[dict]]:
        """For the Monitor's charts, over the `seconds` up to the newest sample: memory rows and /metrics
        rows, at most `max_points` a series (peaks kept), and the server's events."""
        newest = self._telemetry.latest()
        since = (newest.t if newest else 0.0) - seconds
        samples = downsample(self._telemetry.samples(since=since), max_points)
        return memory_rows(samples), metric_rows(samples), event_rows(self._server().events, since=since)

    def power_rows(self, seconds: float, max_points: int) -> list[dict]:
        """The GPUs' summed power draw over the same window as rows(); [] without a GPU."""
        newest = self._telemetry.latest()
        since = (newest.t if newest else 0.0) - seconds
        return power_rows(downsample(self._telemetry.samples(since=since), max_points))
