"""Lab: the facade the pages and the CLI hold: the actions (each `@presenter_only`) and the live state of the
server, the jobs and the telemetry. Reading a finished run lives with its concept (docs/architecture.md)."""
from __future__ import annotations

import functools
import threading
from typing import Callable, Iterator

from engine.access import Access, presenter_only
from engine.errors import LabError, NotPresenter, ServerBusy
from engine.guide import Guide, preflight
from engine.guide.rehearsal import Rehearsal, machine, read_sheet, sheet_path
from engine.guide.sheet import TALK_S, differences
from engine.jobs import Job, JobManager
from engine.measure.snippets import load as snippets
from engine.chat_desk import ChatDesk
from engine.runs.ledger import WarmthLedger
from engine.messages import Message, mark, say
from engine.measure.load.spec import check_rate
from engine.observe import hardware
from engine.observe.monitor import Monitor
from engine.observe.telemetry import Telemetry
from engine.results.history import History
from engine.results.records import Notes, RequestRecord, RunResult
from engine.results.store import RunStore
from engine.room import Room
from engine.runs import Runner, Target, check_repeats, check_search, check_sweep, check_tuning
from engine.serving import leftovers as orphans
from engine.serving import cluster, models, prepare
from engine.serving import server as server_mod
from engine.serving.config import ServerConfig
from engine.serving.flags import known_flags
from engine.serving.remote import Attached, Remote
from engine.serving.server import READY, STARTING, VLLMServer
from engine.settings import Settings



class Lab:
    def __init__(self, settings: Settings, port: int | None = None, store: RunStore | None = None,
                 telemetry_interval_s: float = 1.0, listen_host: str = "127.0.0.1", presenter_token: str | None = None):
        # what the environment said when the process started (ui.get_lab, a CLI command); arguments given win
        self.settings = settings
        self.server = VLLMServer(port=port or self.settings.vllm_port, settings=self.settings)
        self.jobs = JobManager()
        # a server at a URL, measured instead of our own (attach), and whether it still answers
        self.connection = Remote(self.server, self.jobs, self.measuring, Target.at)
        self.store = store if store is not None else RunStore(self.settings.db)  # an empty store is falsy (__len__)
        self.history = History(self.store)  # what the pages read of it
        self.telemetry = Telemetry(
            server_pid=lambda: self.server.snapshot().pid,
            metrics_url=self.connection.metrics_url,
            metrics_headers=self.connection.metrics_headers,
            extra_pids=self._worker_pids,
            interval_s=telemetry_interval_s,
            on_scrape=self.connection.scraped,
        )
        self.device = self.telemetry.device
        self.monitor = Monitor(self.telemetry, self.server.snapshot, self._worker_pids)  # what the pages read of it
        self.access = Access(presenter_token or self.settings.presenter_token, listen_host)
        self._flags: set[str] | None = None
        self.chat_desk = ChatDesk(self.measuring)  # who may chat how much and when; the chats beside each run
        # The batch sizes each server instance has run, shared by every job (cold or warm runs); an
        # instance first met here (an adopted server) is recalled from the history
        self.warmth = WarmthLedger.of_history(lambda: (r.extra for r in self.store.list(kind="vllm")))
        # what the Server page names for every viewer, looked up at most every few seconds
        runtime = self.server.runtime
        self.foreign_holders = orphans.Every(lambda: orphans.foreign_holders(runtime))
        self.servers_on_other_ports = orphans.Every(lambda: orphans.on_other_ports(runtime, self.server.port))
        threading.Thread(target=self._warm_up, daemon=True, name="lab-warm-up").start()
        self.telemetry.start()

    @functools.cached_property
    def guide(self):
        """The guided lab's shared session (engine.guide.Guide): the presenter's step and each step's runs."""
        return Guide(self)

    @functools.cached_property
    def room(self):
        """The room as the load (engine.room.Room): the presenter's rounds and the attendees' requests in them."""
        return Room(self)

    # -- the guided lab's rehearsal and the room's pre-flight (engine.guide.rehearsal, engine.guide.preflight) --
    @presenter_only(who=True)
    def rehearse(self, scale: float, model: str | None = None, talk_s: float | None = None, *, who) -> Job:
        """The whole guided lab run unattended at `scale` with `model` (a catalogue path; None: the room's),
        through the guide's own steps on a session of its own; its sheet is written beside the history."""
        if busy := self.measuring():
            raise ServerBusy(say("'{label}' is still running: wait for it to finish or cancel it, then rehearse.",
                                 label=busy.label))
        rehearsal = Rehearsal(self, scale, model, who=who, talk_s=TALK_S if talk_s is None else talk_s)  # checked now

        def work(job: Job):
            rehearsal.cancel, rehearsal.on_step = job.cancel, job.on_step
            return rehearsal.run()

        return self.jobs.submit("rehearsal", say("rehearsal of the guided lab"), work, lane="rehearsal")

    def rehearsal(self):
        """The last rehearsal's sheet (engine.guide.sheet.Sheet), None before the first."""
        return read_sheet(sheet_path(self.store.path))

    def rehearsal_differs(self, sheet) -> list:
        """How today's machine and the room's model and budget differ from `sheet`'s, a phrase each."""
        return differences(sheet.machine, machine(self.guide.model_spec().path, self.guide.state().scale))

    def preflight(self, host: str | None, port: int, base: str | None = "") -> list:
        """The room's pre-flight for this app at `host`:`port` under `base` (engine.guide.preflight.Check each)."""
        return preflight.checks(self, host, port, base)

    # -- who may act --------------------------------------------------------------------------
    def may_act(self, token: str | None) -> bool:
        """For drawing buttons; the actions themselves check again (access.Access.check)."""
        return self.access.may_act(token)

    # -- models and settings ------------------------------------------------------------------
    @presenter_only
    def prepare_model(self, kind: str) -> Job:
        """Fetch and convert one of the app's own models ("embedded" | "shape-only") in the background:
        a download, so only on the presenter's request, never as a side effect of drawing a page."""
        folder = self.settings.models
        work = {"embedded": lambda job: prepare.prepare_embedded(folder, log=job.on_stage),
                "shape-only": lambda job: prepare.prepare_shape_only(folder)}[kind]
        return self.jobs.submit("prepare", say("preparing the {kind} model", kind=kind), work, lane="prepare")

    def default_config(self, spec: models.ModelSpec, port: int | None = None) -> ServerConfig:
        return ServerConfig.for_model(spec, self.device, port=port or self.server.port)

    # -- server -------------------------------------------------------------------------------
    @presenter_only
    def start_server(self, cfg: ServerConfig, spec: models.ModelSpec | None = None) -> None:
        self._start(cfg, spec)

    @presenter_only
    def stop_server(self) -> None:
        self.server.stop()

    @presenter_only
    def restart_server(self, cfg: ServerConfig, spec: models.ModelSpec | None = None) -> None:
        self.server.stop()
        self._start(cfg, spec)

    def _start(self, cfg: ServerConfig, spec: models.ModelSpec | None) -> None:
        if self.remote is not None:
            raise ServerBusy(say("The app is connected to {url}: disconnect on the Server page first, then start a "
                                 "server here.", url=self.remote.base_url))
        if self.device == "cuda" and self._worker_pids():
            raise ServerBusy(say("The naive baseline still holds the GPU: wait for it to finish or cancel it, then "
                                 "start vLLM."))
        # a server another process of this app started on the port meanwhile is followed, not doubled
        self.server.start(cfg, model_max_len=spec.max_len if spec else None, known_flags=self._flags, adopt=True)

    # -- a server this app did not start (engine.serving.remote.Remote) ---------------------------
    @presenter_only
    def attach(self, url: str, api_key: str | None = None, model: str | None = None) -> Attached:
        """Measure the OpenAI-compatible server at `url` instead of our own, for every page and viewer,
        until detach(); an EndpointError (one sentence) when it cannot be measured."""
        attached = self.connection.attach(url, api_key, model)
        assert attached is not None  # given no cancel, it never gives up
        return attached

    @presenter_only
    def connect(self, url: str, api_key: str | None = None, model: str | None = None) -> Job:
        """attach() as a job, off the page's thread: a page shows it running and may give up (cancel_job);
        each answer discovery waits for has its deadline (endpoint.discover). Attached when it ends, unless
        given up meanwhile."""
        self.connection.may_attach()
        return self.jobs.submit("connect", say("Connecting to {url}", url=url),
                                lambda job: self.connection.attach(url, api_key, model, cancel=job.cancel),
                                lane="connect")

    @presenter_only
    def detach(self) -> None:
        """Forget the attached server (and its key); the app's own server can be started again."""
        self.connection.detach()

    @property
    def remote(self) -> Target | None:
        """The server at a URL measured instead of our own; None: our own."""
        return self.connection.target

    def attached(self) -> Attached | None:
        """The server at a URL the app measures now, as the pages show it (its key masked); None: our own."""
        return self.connection.attached()

    def _target(self) -> Target:
        """What runs and chat aim at: the attached server, else our own ready one (ServerBusy)."""
        return self.remote or Target.of(self.server)

    def _aim(self) -> Target:
        """What a run aims at, checked to answer when it is a server at a URL (ServerBusy: the sentence)."""
        self.connection.answering()
        return self._target()

    # -- this app's leftovers and others' memory holders (engine.serving.leftovers) -------------------
    def leftovers(self) -> Message | None:
        return orphans.leftovers_said(self.server.runtime)

    @presenter_only
    def clear_leftovers(self) -> Message | None:
        return orphans.clear_leftovers(self.server.runtime)

    # -- measurements -------------------------------------------------------------------------
    # Each is a job running an engine.runs.Runner: the orchestration the CLI shares. The spec is
    # checked against the server before the job is queued, so a page hears a ConfigError at once.
    def _runner(self, job: Job, notes: Notes | None = None) -> Runner:
        """A Runner for `job`, each run it saves carrying the fields `notes` was made with (a rehearsal's sheet id)."""
        return Runner(lambda result: self._save(result, notes), progress=job, cancel=job.cancel,
                      mark=self.server.mark, warmth=self.warmth, models_dir=self.settings.models)

    def _measure(self, kind: str, label: str, spec, work: Callable, notes: Notes | None = None, **submit) -> Job:
        """Submit work(runner, spec, target) against the server the app measures, `spec` aimed at it first."""
        target = self._aim()
        spec = target.aim(spec)
        return self.jobs.submit(kind, label, self.connection.watched(
            lambda job: work(self._runner(job, notes), spec, target)), **submit)

    @presenter_only
    def run_measured(self, kind: str, label: str, spec, work: Callable) -> Job:
        """Measured work of another engine concept (the room's round, engine.room) as a job: work(runner, spec,
        target) against the server the app measures, `spec` aimed at it first; its runs saved as every run is."""
        return self._measure(kind, label, spec, work)

    @presenter_only
    def run_load(self, spec, label: str | None = None, repeats: int = 1, fixed_seed: bool = False,
                 notes: Notes | None = None) -> Job:
        """A load test against the running server (spec: a LoadSpec); `repeats` > 1: Runner.repeat's list of runs,
        each with synthetic prompts of a new seed unless `fixed_seed`; `notes`: what each run carries (Notes.add)."""
        n = check_repeats(repeats)
        return self._measure("load", label or spec.label or spec.scenario, spec,
                             lambda r, spec, t: r.load(spec, t) if n == 1 else r.repeat(spec, t, n, fixed_seed),
                             notes, scenario=spec.scenario)

    @presenter_only
    def run_sweep(self, spec, levels: list, by: str = "concurrency") -> Job:
        """The same workload at each of `levels` requests in flight (Runner.sweep), or arriving at each of `levels`
        requests per second (`by` "rate": Runner.rate_sweep, the spec's arrivals); a spec whose workload brings
        its own pace (a trace, a multi-turn chat) is refused in one sentence (check_sweep)."""
        check_sweep(spec)
        if by == "rate":
            for rate in levels:
                check_rate(rate, mark("Each rate of the sweep"))
            return self._measure("sweep", say("sweep {first:g}…{last:g} requests/s", first=levels[0], last=levels[-1]),
                                 spec, lambda r, spec, t: r.rate_sweep(spec, levels, t))
        return self._measure("sweep", say("sweep {first}…{last}", first=levels[0], last=levels[-1]), spec,
                             lambda r, spec, t: r.sweep(spec, levels, t))

    @presenter_only
    def run_slo_search(self, spec, slo, low, high, tolerance=1, by: str = "concurrency") -> Job:
        """The most load between `low` and `high` that meets `slo` (Runner.slo_search; the job's result a SloSearch)."""
        check_sweep(spec)  # its levels are numbers in flight, as a sweep's: a workload with its own pace cannot
        check_search(low, high, tolerance, by)
        return self._measure("slo-search", say("SLO search {low}…{high}", low=low, high=high), spec,
                             lambda r, spec, t: r.slo_search(spec, t, slo, low, high, tolerance, by=by))

    @presenter_only
    def run_tuning(self, configs: list[ServerConfig], spec, labels: list | None = None, repeats: int = 1,
                   notes: Notes | None = None) -> Job:
        """Restart vLLM with each config, run the same workload `repeats` times, keep each run (notebook step 4);
        `labels` names the configurations (a scenario's config_labels; default: their flags). The KV-squeeze and
        prefix-cache comparisons send their scenario's configs_after() and spec."""
        n = check_repeats(repeats)
        if self.remote is not None:
            raise ServerBusy(say("Tuning restarts a server this app started, and {url} is not one: disconnect on "
                                 "the Server page to tune a server here.", url=self.remote.base_url))
        check_tuning(configs, spec, known_flags=self._flags)
        # Its own kind per scenario: the Tuning page shows each section's job (progress, results) in that section.
        kind = spec.scenario if spec.scenario in ("kv-squeeze", "prefix-cache") else "tuning"
        label = say("prefix caching on vs off") if kind == "prefix-cache" else say("tuning comparison")
        return self.jobs.submit(kind, label,
                                lambda job: self._runner(job, notes).tuning(self.server, configs, spec,
                                                                            labels=labels, repeats=n))

    @presenter_only
    def run_side_by_side(self, url_b: str, spec, api_key_b: str | None = None, shared_ok: bool = False) -> Job:
        """The same load against the server the app measures (A: its own or the attached one) and the one at
        `url_b` (B) at once, on one clock (Runner.side_by_side). B is discovered first: a
        dead address, an answer that is not an OpenAI-style server or a refused key is one sentence and
        nothing runs. Two servers sharing this machine's CPU or its one GPU are refused with
        side_by_side_here()'s sentence unless `shared_ok` (the numbers then show the sharing too)."""
        a = self._aim()  # an attached server that stopped answering: its sentence, before B is asked
        b = Target.at(url_b, None, api_key_b or None)
        cluster.check_pair(a, b, self.device, shared_ok)
        a.aim(spec)
        b.aim(spec)
        return self.jobs.submit("side-by-side", say("two servers side by side"),
                                lambda job: self._runner(job).side_by_side(a, b, spec))

    @presenter_only
    def run_naive(self, spec, notes: Notes | None = None) -> Job:
        """Submit the transformers baseline (spec: a baseline.protocol.NaiveSpec) in its own worker process."""
        if self.device == "cuda" and self.server.snapshot().state in (READY, STARTING):
            raise ServerBusy(say("vLLM holds most of the GPU memory: stop the server first, run the naive baseline, "
                                 "then start vLLM again (the lab's order)."))

        def work(job: Job) -> RunResult:
            try:
                return self._runner(job, notes).naive(spec)
            finally:
                job.worker_pid = None

        return self.jobs.submit("naive", spec.label or spec.scenario, work)

    @presenter_only
    def cancel_job(self, job_id: str) -> None:
        self.jobs.cancel(job_id)

    # -- history ------------------------------------------------------------------------------
    @presenter_only
    def import_runs(self, data: bytes, name: str) -> list[str]:
        """Runs from an uploaded export: its bytes are parsed, never taken as a path on this machine."""
        return self.store.import_upload(data, name)

    @presenter_only
    def delete_runs(self, ids: list[str]) -> int:
        return self.store.delete(ids)

    @presenter_only
    def import_examples(self) -> list[str]:
        return self.store.import_examples()

    # -- chat (engine.chat_desk.ChatDesk: who may chat how much, and when) --------------------
    def chat(self, messages: list[dict], record: RequestRecord, *, max_tokens: int = 300, temperature: float = 0.7,
             stop: threading.Event | None = None, on_wait: Callable[[str], None] | None = None,
             token: str | None = None, caller: str | None = None) -> Iterator[str]:
        """Stream an answer from the server the app measures into `record`. The presenter may always chat; a
        viewer within the desk's limits, waiting while a benchmark measures (on_wait says why) unless the
        presenter allowed chat under load; nobody but the presenter while the lab is locked."""
        presenter = self.access.may_act(token)
        if not presenter:
            if self.access.locked:
                raise NotPresenter(self.access.why_not())
            self.chat_desk.admit(caller, messages, max_tokens)
        target = self._target()
        self.connection.answering(check=False)
        try:
            yield from self.chat_desk.send(target, messages, record, wait=not presenter, max_tokens=max_tokens,
                                           temperature=temperature, stop=stop, on_wait=on_wait)
        except LabError:
            self.connection.answering()  # a server at a URL that went away says so in the one sentence
            raise

    @presenter_only
    def allow_chat_under_load(self, allow: bool) -> None:
        """Chatting during a load test is a fair demo of TTFT under load; the presenter decides."""
        self.chat_desk.under_load = allow

    # what the Chat page reads
    chat_limits = property(lambda self: self.chat_desk.limits)  # ChatLimits: per_minute, max_tokens, ...
    chat_under_load = property(lambda self: self.chat_desk.under_load)
    chat_example = ChatDesk.example
    chat_record = staticmethod(ChatDesk.record)

    def measuring(self) -> Job | None:
        """The benchmark running now, if any."""
        return next((j for j in self.jobs.active() if j.kind != "connect"), None)  # connecting measures nothing

    # -- saving -------------------------------------------------------------------------------
    def _save(self, result: RunResult, notes: Notes | None = None) -> RunResult:
        """Keep a run that measured anything, marked when chat traffic ran beside it; `notes`: the action's own
        Notes fields (a rehearsal's sheet id), set on the run alone, never on others saved meanwhile."""
        if n := self.chat_desk.beside(result.started_at, result.started_at + result.duration):
            result.extra.beside.chats = n
        result.extra.add(notes)
        if result.measured:
            self.store.save(result)
        return result

    # -- internals ----------------------------------------------------------------------------
    def _worker_pids(self) -> dict[str, int]:
        """The naive baseline's worker while it lives, for the memory charts (and the GPU's owner)."""
        return {mark("naive worker"): j.worker_pid for j in self.jobs.active() if j.worker_pid}

    def _warm_up(self) -> None:
        """While the app starts: the machine's description, whose CPU memory bandwidth (a second of copying, once per
        boot) is best measured before a run competes for it, then the flags this vLLM knows. In this order because
        reading the flags may take minutes (`vllm --help`, first start): a run ending before would ask for the
        bandwidth with no folder to keep it in."""
        hardware.describe(self.server.runtime)
        self._flags = known_flags(self.settings.models)

    def shutdown(self) -> None:
        self.telemetry.stop()

    # -- for the pages ------------------------------------------------------------------------
    # Live state only: what the server, the jobs and the attached server are doing now. Reading a finished
    # run lives with its concept (engine.measure.judge, results.history via `history`, observe.monitor via
    # `monitor`, serving.config, measure.workloads); tests/test_layering.py names what pages may import.

    # server
    def server_snapshot(self) -> server_mod.Snapshot:
        """The server's state, stage, config, events and log tail, read at once (a copy)."""
        return self.server.snapshot()

    @property
    def server_port(self) -> int:
        return self.server.port

    def serving_max_len(self) -> int | None:
        """The ready server's max-model-len (it refuses longer answers); None while none is ready, or
        when the attached server does not say."""
        if self.remote is not None:
            return self.remote.max_model_len
        snap = self.server.snapshot()
        return snap.config.max_model_len if snap.state == READY and snap.config else None

    def ready(self) -> bool:
        """A server to measure and chat with: an attached one, or our own once ready."""
        return self.remote is not None or self.server.snapshot().state == READY

    def busy(self) -> bool:
        """Anything moving: the server starting or stopping, a job running, or requests inside vLLM."""
        newest = self.telemetry.latest()
        return (self.server.snapshot().state in (STARTING, server_mod.STOPPING) or self.measuring() is not None
                or bool(newest and (newest.metrics.get("running") or newest.metrics.get("waiting"))))

    # jobs
    def job(self, job_id: str) -> Job | None:
        return self.jobs.get(job_id)

    def latest_job(self, kind: str, scenario: str | tuple[str, ...] = "") -> Job | None:
        """The newest job of `kind` ("load", "sweep", "naive", "tuning", "kv-squeeze", "prefix-cache", "prepare"),
        running or ended, whose run's scenario starts with `scenario` (a page shows only the load tests it made)."""
        return self.jobs.latest(kind, scenario)

    def code_for_chat(self, prompt: str, *, max_tokens: int, temperature: float, earlier_turns: bool = False,
                      lang: str = "en") -> str | None:
        """The short Python that streams `prompt`'s answer from the ready server as the Chat page does;
        None while no server is ready."""
        try:
            target = self._target()
        except ServerBusy:
            return None
        return snippets.chat_code(target.config or target, prompt, max_tokens=max_tokens, temperature=temperature,
                                  earlier_turns=earlier_turns, lang=lang)

