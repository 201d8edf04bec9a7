"""The server at a URL the app measures instead of its own, and its watch: attached, checked each tick,
discovered anew when it answers again, detached. See docs/architecture.md."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from engine.errors import LabError, ServerBusy
from engine.messages import say
from engine.serving.endpoint import Watch, masked
from engine.serving.server import READY, STARTING, VLLMServer

if TYPE_CHECKING:  # engine.lab hands these in; engine.runs and engine.jobs import engine.serving, not the other way
    from engine.jobs import Job, JobManager
    from engine.runs.target import Target


@dataclass(frozen=True)
class Attached:
    """The server at a URL the app measures instead of its own, as the pages show it: never its key."""

    url: str  # its root (no /v1, no secrets)
    model: str
    models: tuple[str, ...]  # every model it serves
    max_model_len: int | None
    vllm: bool  # it says it is vLLM (model cards or /metrics)
    metrics: bool  # vLLM's /metrics readable: the Monitor's counters and each run's server token count
    metrics_said: str  # why not, when not (a Message)
    version: str | None
    key: str  # masked: "" without one
    kv_capacity_tokens: int | None = None  # its KV cache, as its /metrics state it
    answering: bool = True  # it answered the last checks (engine.serving.endpoint.Watch)
    said: str = ""  # the sentence about it: why it stopped answering, or (for a while) that it answers again


class Remote:
    """The server at a URL every page and viewer measures until detach (`target`: an engine.runs.Target; None:
    the app's own server). The key stays in this process's memory: sent with each request, never stored,
    logged or shown. Whether it still answers is judged once for everyone: the telemetry's /metrics scrape
    (or, without /metrics, a GET /v1/models every few seconds) tells the Watch each tick (`scraped`), and an
    action checks once more before it starts (`answering`)."""

    BACK_SHOWN_S = 120.0  # how long "it answers again" stays on the pages

    def __init__(self, server: VLLMServer, jobs: JobManager, measuring: Callable[[], Job | None],
                 discover: Callable[..., Target]):
        self.server = server  # the app's own: refused while it runs, and its event log says what happened here
        self._jobs = jobs  # the lab's JobManager: the runs a dead server would only fail are stopped
        self._measuring = measuring  # the benchmark running now, if any
        self._discover = discover  # engine.runs.Target.at(url, model, api_key)
        self.target: Target | None = None
        self._watch: Watch | None = None
        self._back: tuple[float, str] | None = None  # when it answered again, and the sentence that says so
        self._lock = threading.Lock()  # attach/detach against the watch's re-discovery

    def metrics_url(self) -> str | None:
        """What the telemetry scrapes: the attached server's /metrics (when it has one), else our own ready one's."""
        if (remote := self.target) is not None:
            return remote.base_url + "/metrics" if remote.endpoint and remote.endpoint.metrics else None
        snap = self.server.snapshot()
        return snap.config.base_url + "/metrics" if snap.state == READY and snap.config else None

    def metrics_headers(self) -> dict[str, str]:
        key = self.target.api_key if self.target is not None else None
        return {"Authorization": f"Bearer {key}"} if key else {}

    def may_attach(self) -> None:
        """ServerBusy with the sentence while the app measures a server of its own or runs a benchmark."""
        if self.server.snapshot().state in (READY, STARTING):
            raise ServerBusy(say("This app's own vLLM server is running: stop it first, then connect (the app "
                                 "measures one server at a time)."))
        if (job := self._measuring()) is not None:
            raise ServerBusy(say("'{label}' is measuring: wait for it to end or cancel it, then connect.",
                                 label=job.label))

    def attach(self, url: str, api_key: str | None = None, model: str | None = None,
               cancel: threading.Event | None = None) -> Attached | None:
        """Discover the server at `url` (an EndpointError, one sentence, when it cannot be measured) and measure
        it from now on; None when `cancel` was set meanwhile (a Connect given up)."""
        self.may_attach()
        target = self._discover(url, model or None, api_key or None)
        if cancel is not None and cancel.is_set():
            return None
        self.may_attach()  # discovery takes a while: the app's own server may have started meanwhile
        with self._lock:
            self.target, self._back = target, None
            self._watch = Watch(target.base_url, target.api_key, target.started)
        self.server.mark(say("connected to {url}", url=target.base_url))
        return self.attached()

    def detach(self) -> None:
        """Forget the attached server (and its key); the app's own server can be started again."""
        with self._lock:
            if self.target is not None:
                self.server.mark(say("disconnected from {url}", url=self.target.base_url))
            self.target, self._watch, self._back = None, None, None

    def attached(self) -> Attached | None:
        """The server at a URL the app measures now, as the pages show it (its key masked); None: our own."""
        t = self.target
        if t is None or t.endpoint is None:
            return None
        e, watch, back = t.endpoint, self._watch, self._back
        answering = watch is None or watch.answering
        said = (watch.said() if watch is not None and not answering
                else back[1] if back and time.time() - back[0] < self.BACK_SHOWN_S else "")
        return Attached(t.base_url, t.model, tuple(e.models), t.max_model_len, e.vllm, e.metrics, e.metrics_said,
                        e.version, masked(t.api_key), t.kv_cache_tokens, answering, said)

    def scraped(self, url: str | None, resp, error) -> None:
        """The telemetry's tick: what the attached server's /metrics answered, or a check of our own."""
        watch, target = self._watch, self.target
        if watch is None or target is None:
            return
        if url is not None and url.startswith(target.base_url + "/"):
            self._heard(watch, watch.heard(time.time(), resp, error))
        else:
            self._heard(watch, watch.probe(time.time(), metrics=False))

    def _heard(self, watch: Watch, event: str | None) -> None:
        """Act on what the watch saw: stop the runs a dead server would only fail, or discover the server
        anew once it answers again (it may have restarted with another model)."""
        if event == "down":
            self.server.mark(say("{url} stopped answering", url=watch.base_url))
            for job in self._jobs.active():
                if job.kind in ("load", "sweep"):  # what finished is kept; the rest could only fail
                    job.error = watch.said()
                    job.cancel.set()
        elif event in ("back", "restarted"):
            old = self.target
            if old is None:
                return
            try:
                new, said = old.again(watch.down_since if event == "back" else None)
            except LabError as e:  # it answers, but cannot be measured (yet): still down, in its words
                watch.failed(e.args[0] if e.args else str(e))
                return
            with self._lock:
                if self._watch is not watch:
                    return  # disconnected (or connected elsewhere) meanwhile
                self.target, self._back = new, (time.time(), said)
                watch.recovered(new.started)
            self.server.mark(say("{url} answers again", url=watch.base_url))

    def answering(self, check: bool = True) -> None:
        """Before an action aimed at the attached server: ServerBusy with the one sentence when it does not
        answer, checked now unless `check` is False (one request per action, never per page drawn)."""
        if (watch := self._watch) is None:
            return
        if check:
            self._heard(watch, watch.probe(time.time(), metrics=False, force=True))
        if not watch.answering:
            raise ServerBusy(watch.said())

    def watched(self, work: Callable) -> Callable:
        """A run at a server at a URL whose requests failed because it went away ends in the one sentence
        (what finished before is saved as ever), even before the watch's next tick has seen it go."""
        def run(job):
            result = work(job)
            runs = result if isinstance(result, list) else getattr(result, "runs", [result])  # a search's levels
            if self._watch is not None and job.error is None and any(
                    r.error for run in runs for r in run.measured):
                try:
                    self.answering()
                except ServerBusy as e:
                    job.error = e.args[0]
            return result
        return run
