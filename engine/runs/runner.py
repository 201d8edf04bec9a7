"""How each kind of run is carried out (`Runner`): a load test, a sweep, repeats, the SLO search, a tuning
comparison, side by side, the naive baseline; each reported to one `Progress`, stamped, saved as it ends."""
from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

from engine.errors import ConfigError, LabError, ServerBusy
from engine.measure.baseline import naive
from engine.measure.load import loadgen
from engine.observe.kvwatch import KvWatch
from engine.measure.progress import Progress
from engine.measure.load.request import clock
from engine.measure.judge.slo import Slo, judge, record_goodput
from engine.measure.load.spec import MAX_IN_FLIGHT, MAX_RATE, MAX_REQUESTS, LoadSpec, check_max_tokens
from engine.measure.judge.stats import peak_in_flight
from engine.runs.ledger import WarmthLedger
from engine.measure.judge import failures
from engine.measure.workloads import seeds
from engine.messages import Message, mark, say, say_n
from engine.observe import disturbance, hardware
from engine.observe.energy import EnergyMeter
from engine.observe.telemetry import read_requests_served, requests_served
from engine.results.records import Disturbance, Notes, Repeat, RunResult, SloNotes
from engine.serving import endpoint
from engine.serving.config import ServerConfig
from engine.serving.server import READY, VLLMServer
from engine.runs.counts import ServerCount
from engine.runs.search import SloSearch, SaturationWatch
from engine.runs.target import Target


def tuning_label(cfg: ServerConfig) -> str:
    """How a tuning comparison names a configuration, in the app, the CLI and History alike."""
    memory = f"KV {cfg.cpu_kvcache_gib:g} GiB" if cfg.device == "cpu" else f"{cfg.gpu_memory_utilization:g}"
    extra = [str(a) for a in cfg.extra_args]
    if "--kv-cache-memory-bytes" in extra[:-1]:  # a GPU's cache set in bytes outranks the memory fraction
        memory = f"KV {int(extra[extra.index('--kv-cache-memory-bytes') + 1]) / 2**20:,.0f} MiB"
    return f"max-model-len {cfg.max_model_len} / {memory}"


def side_label(side: str, target: Target) -> str:
    """How a side-by-side run names its server: the side, then its flags (one this app started) or its
    address (one at a URL), so a legend and History tell the two apart."""
    if target.config is not None:
        return f"{side}: {tuning_label(target.config)}"
    where = target.base_url.split("://", 1)[-1]
    return f"{side}: {where}" + (f" (max-model-len {target.max_model_len})" if target.max_model_len else "")


def check_tuning(configs: list[ServerConfig], spec: LoadSpec, model_max_len: int | None = None,
                 known_flags: set[str] | None = None) -> None:
    """Every configuration checked before the first restart: a ConfigError says which one is wrong."""
    if not configs:
        raise ServerBusy(say("Pick at least one configuration to compare."))
    for cfg in configs:
        cfg.validate(model_max_len=model_max_len, known_flags=known_flags)
        if spec.max_tokens is not None:
            check_max_tokens(spec.max_tokens, cfg.max_model_len or model_max_len,
                             of=mark("the max-model-len the server starts with"), fix="")
        limit = cfg.max_model_len or model_max_len
        longest = ((spec.workload or {}).get("input_tokens") or {}).get("max")
        if limit and longest and longest + (spec.max_tokens or 0) > limit:
            raise ConfigError(say("The workload's longest prompt ({prompt:.0f} tokens) and its answers (up to "
                                  "{tokens}) do not fit in max-model-len {limit}: raise that row's max-model-len or "
                                  "pick another workload.", prompt=longest, tokens=spec.max_tokens or 0, limit=limit))


def check_sweep(spec: LoadSpec) -> None:
    """A sweep sets the requests in flight itself, level by level: a trace's clock or a multi-turn chat's
    conversations would not be what it measures (ConfigError, one sentence; the CLI refuses --trace and
    --turns for the sweep alike)."""
    if spec.offsets is not None or spec.conversations is not None:
        raise ConfigError(say("The sweep sets the requests in flight itself, level by level, and a {kind} workload "
                              "brings its own pace: pick a dataset or a length distribution for the sweep, or run "
                              "this one as a load test.",
                              kind=say("trace") if spec.offsets is not None else say("multi-turn")))


MAX_REPEATS = 10  # the Load test page's limit; the CLI asks for a flag beyond it
RATE_LEVEL_S = 15.0  # a rate's level sends this many seconds of arrivals at least: enough for a queue to show


def rate_requests(spec: LoadSpec, rate: float, seconds: float = RATE_LEVEL_S) -> int:
    """The requests one level at `rate` sends: the spec's, or `seconds` of arrivals when more (a few requests at a
    rate the server cannot keep up with end before its queue has grown)."""
    return min(MAX_REQUESTS, max(spec.n, math.ceil(rate * seconds)))


def check_repeats(n, most: int | None = MAX_REPEATS) -> int:
    """`n` repeats of a load test, checked before the first is sent (a ConfigError says what is wrong); `most`
    None: no limit (the CLI's, once confirmed)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ConfigError(say("Repeats must be a whole number of at least 1, not {n}.", n=n))
    if most is not None and n > most:
        raise ConfigError(say("Repeats run one after another, up to {most}, not {n}: give {most} or fewer.", most=most,
                              n=n))
    return n


class Repeats(list):
    """The runs of Runner.repeat, in order, and why the rest were not run (None: all ran, or it was cancelled)."""

    stopped: Message | None = None


def check_search(low, high, tolerance, by: str = "concurrency") -> None:
    """An SLO search's range and tolerance, checked before its first level runs (a ConfigError says which)."""
    if by not in ("concurrency", "rate"):
        raise ConfigError(say("The search runs over concurrency or rate, not '{by}'.", by=by))
    whole = by == "concurrency"
    for name, v in (("low", low), ("high", high), ("tolerance", tolerance)):
        bad_type = isinstance(v, bool) or not isinstance(v, (int, float)) or (whole and not isinstance(v, int))
        if bad_type or not math.isfinite(v) or v <= 0 or (whole and v < 1):
            if whole:
                raise ConfigError(say("The search's {name} must be a whole number of at least 1, not {value}.",
                                      name=name, value=v))
            raise ConfigError(say("The search's {name} must be a number of requests per second above 0, not "
                                  "{value}.", name=name, value=v))
    if high < low:
        raise ConfigError(say("The search's highest level ({high}) is below its lowest ({low}).", high=high,
                              low=low))


def already_running(server: VLLMServer, cfg: ServerConfig) -> bool:
    """Whether `server` is ready with exactly the command line and environment `cfg` would start it with."""
    snap = server.snapshot()
    if snap.state != READY or snap.config is None:
        return False
    cfg = cfg.with_changes(port=server.port)
    return snap.config.argv() == cfg.argv() and snap.config.env() == cfg.env()


class Runner:
    """Carries out runs: each reported to `progress`, stamped, passed to `save` (which returns what to
    keep), with `mark` noting when it began and ended (the Monitor's markers). Setting `cancel` stops
    the current run, keeping what finished, and the runs after it. Given an `slo`, each load run keeps
    its goodput under it (vllm bench serve's --goodput; the app's pages judge by each viewer's own).
    `warmth` remembers the batch sizes each server instance has run, to mark a run cold or warm; the
    app's jobs share one (a Runner of its own starts with an empty memory). `energy` makes the meter that
    reads the energy of each run's measured part when its server runs on this machine."""

    rate_level_s = RATE_LEVEL_S  # the least arrivals, in seconds, of one level at a rate

    def __init__(self, save: Callable[[RunResult], RunResult], progress: Progress | None = None,
                 cancel: threading.Event | None = None, mark: Callable[[str], None] = lambda text: None,
                 slo: Slo | None = None, warmth: WarmthLedger | None = None,
                 energy: Callable[[], EnergyMeter] = EnergyMeter, models_dir: Path | None = None):
        self.save = save
        self.models_dir = models_dir  # the embedded model's tokenizer, for prompts made again (seeds.reseed)
        self.energy = energy  # a fresh meter per run (engine.observe.energy): NVML, else RAPL, else none
        self.progress = progress or Progress()
        self.cancel = cancel or threading.Event()
        self.mark = mark
        self.slo = slo
        self.warmth = warmth or WarmthLedger()

    def _keep(self, result: RunResult, target: Target, served_before: int | None = None,
              beside: Disturbance | None = None, page_after: str | None = None) -> RunResult:
        """A load run finished: stamped with its server, cold or warm, what disturbed it, its goodput under the
        SLO, saved. `served_before`: the server's served count read before the run began (served()); `beside`: its
        disturbance.Watch's reading over the measured part; `page_after`: the /metrics page ServerCount read after it
        (its served count then, without another read)."""
        if self.slo is not None:
            record_goodput(result, self.slo)
        result = self._judge_warmth(target.stamp(result), target, served_before, page_after)
        notes = result.extra
        notes.beside.disturbance = disturbance.record(beside, notes.warmth.served_before, notes.warmth.served_after,
                                                      len(result.records))
        return self.save(result)

    @staticmethod
    def served(target: Target) -> int | None:
        """The requests the server says it served since it started (/metrics), read before a run's warm-up:
        traffic this app did not send warms it too (engine.measure.judge.warmth). None: it does not say."""
        return None if target.instance is None else read_requests_served(target.base_url, target.model,
                                                                           target.api_key)

    def _before(self, target: Target) -> int | None:
        """Before a run's warm-up: the server's served count (served()), and what the history recalls of its
        instance (WarmthLedger.recall), read now rather than after the run's last answer."""
        if target.instance is not None:
            self.warmth.recall(target.instance)
        return self.served(target)

    def _judge_warmth(self, result: RunResult, target: Target, served_before: int | None = None,
                      page_after: str | None = None) -> RunResult:
        """Mark the run cold when its measured batch was the first of its size on this server instance
        and the server had not served as many requests elsewhere (engine.measure.judge.warmth); unknown when the
        server does not say which start it is."""
        notes = result.extra.warmth
        notes.batch_size = peak_in_flight(result.records) or None
        notes.warmup_batch_size = peak_in_flight(result.records, warmup=True) or None
        if target.instance is not None:
            notes.instance = target.instance
            notes.served_before = served_before
            notes.served_after = None if served_before is None else (
                requests_served(page_after, target.model) if page_after is not None else self.served(target))
            if (w := self.warmth.judge(target.instance, notes.batch_size or 0, notes.warmup_batch_size or 0,
                                       served_before, notes.served_after)):
                notes.cold, notes.why, notes.served_elsewhere = w.cold, w.why, w.elsewhere
        return result

    def _meter(self, target: Target) -> EnergyMeter | None:
        """A meter for a run on `target`, its idle power read now (before the warm-up); None for a server on
        another machine, whose energy this machine cannot see."""
        host = (urlsplit(target.base_url).hostname or "").lower()
        loopback = host == "localhost" or host.startswith("127.") or host == "::1"  # a bare Target too
        if not (target.on_this_machine or loopback):
            return None
        meter = self.energy()
        meter.idle()
        return meter

    @staticmethod
    def _energy(result: RunResult, meter: EnergyMeter | None) -> RunResult:
        """The measured part's energy in the run's notes, or why there is none."""
        reading = meter.stop() if meter is not None else None
        result.extra.energy.reading = reading
        if reading is None:
            result.extra.energy.missing = "elsewhere" if meter is None else "no-meter"
        return result

    def load(self, spec: LoadSpec, target: Target, notes: Notes | None = None) -> RunResult:
        """One load test; the fields `notes` was made with are set on the run before it is saved (Notes.add)."""
        spec = target.aim(spec)
        self.progress.on_stage(say("sending requests"))
        return self.gathered(spec, target, lambda on_measure: loadgen.run_load(
            spec, observer=self.progress, cancel=self.cancel, on_measure=on_measure), notes)

    def gathered(self, spec: LoadSpec, target: Target, send: Callable[[Callable[[], None]], RunResult],
                 notes: Notes | None = None) -> RunResult:
        """A run whose requests `send(on_measure)` sends and returns as a RunResult, calling on_measure right
        before its measured part (a load test's loadgen.run_load; the room's attendees as they press): the
        server's own counts, its KV cache and the energy around it, cold or warm, `notes` set, saved."""
        # the run's own label (a Message: said in each viewer's language), never its scenario's id
        self.mark(say("{run}: start", run=spec.label or spec.scenario))
        count = ServerCount(target)
        kv = KvWatch(target.base_url, target.api_key)  # preemptions, peak waiting and KV use while it measures
        served = self._before(target)
        meter = self._meter(target)
        watch = disturbance.Watch([target.pid])  # the CPU and GPUs used beside the measured part

        def measuring() -> None:
            count.start()
            kv.start()
            if meter is not None:
                meter.start()
            watch.start()

        try:
            result = send(measuring)
        finally:
            kv.stop()
            self.mark(say("{run}: end", run=spec.label or spec.scenario))
        beside = watch.stop()
        result = self._energy(kv.finish(count.finish(result), count.page_after), meter)
        result.extra.add(notes)
        if result.extra.repeat.group:  # a repeat that did not answer all it planned is left out of their statistics
            c = failures.counts(result)
            result.extra.repeat.failed = c.answered < c.planned
        return self._keep(result, target, served, beside, count.page_after)

    # the measured parts of a side-by-side pair start this far after both warm-ups end, on one clock
    PAIR_LEAD_S = 0.05

    def side_by_side(self, a: Target, b: Target, spec: LoadSpec) -> list[RunResult]:
        """The same load against two servers at once: each side warms up on its own
        (not counted), then both measured parts start together on ONE clock (the same perf_counter origin,
        the same started_at), each side in its own thread through run_load, reported to
        `progress.side("A" | "B")` and saved the moment it ends, both marked with one `Notes.side_by_side.pair` id. A
        side that fails does not stop the other: its measured requests are saved, then the failure is
        raised (a LabError naming the side). A spec without a warm-up gets one batch of it: a cold server
        beside a warm one would be compared on its start-up work. Returns [A's run, B's run]."""
        sides = [("A", a), ("B", b)]
        spec = replace(spec, warmup=spec.warmup or min(spec.in_flight(), spec.n))
        specs = {name: t.aim(replace(spec, label=side_label(name, t))) for name, t in sides}
        pair = uuid.uuid4().hex[:12]
        origin: dict[str, float] = {}

        def start_together() -> None:  # the barrier's action: once, the moment both have warmed up
            origin["clock"] = clock() + self.PAIR_LEAD_S
            origin["epoch"] = time.time() + self.PAIR_LEAD_S
            self.progress.on_stage(say("measuring both servers"))

        barrier = threading.Barrier(len(sides), action=start_together)
        results: dict[str, RunResult] = {}
        failures: dict[str, BaseException] = {}

        def one(name: str, target: Target) -> None:
            count = ServerCount(target)
            kv = KvWatch(target.base_url, target.api_key)
            served = self._before(target)
            watch = disturbance.Watch([a.pid, b.pid])  # both servers' trees are the pair's own

            def on_measure() -> float:
                count.start()
                kv.start()
                barrier.wait()  # BrokenBarrierError when the other side failed before measuring
                watch.start()
                return origin["clock"]

            try:
                try:
                    result = loadgen.run_load(specs[name], observer=self.progress.side(name), cancel=self.cancel,
                                              on_measure=on_measure)
                finally:
                    kv.stop()
                beside = watch.stop()
                result.started_at = origin.get("epoch", result.started_at)
                result.extra.side_by_side.pair, result.extra.side_by_side.side = pair, name
                results[name] = self._keep(kv.finish(count.finish(result), count.page_after), target, served, beside,
                                           count.page_after)
            except BaseException as e:  # noqa: BLE001 - raised below, once the other side is saved
                barrier.abort()
                failures[name] = e

        self.progress.on_stage(say("warming up both servers"))
        self.mark(say("side by side start"))
        threads = [threading.Thread(target=one, args=side, name=f"side-{side[0]}", daemon=True) for side in sides]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            self.mark(say("side by side end"))
        real = {n: e for n, e in failures.items() if not isinstance(e, threading.BrokenBarrierError)}
        if real:
            name, e = next(iter(real.items()))
            url, why = dict(sides)[name].base_url, (str(e) or type(e).__name__).rstrip(".")
            raise LabError(say("Server {side} ({url}) failed: {why}. The other server's run is saved.", side=name,
                               url=url, why=why) if results else
                           say("Server {side} ({url}) failed: {why}.", side=name, url=url, why=why)) from e
        return [results[name] for name, _ in sides]

    def sweep(self, spec: LoadSpec, levels: list[int], target: Target, rounds: int = 2) -> list[RunResult]:
        """loadgen.run_level at each level, in order; each level saved the moment it completes, its synthetic
        prompts its own (seeds.nth: no level finds an earlier one's in the prefix cache)."""
        return self._sweep(spec, target, [(say("concurrency {level}", level=level), dict(level=level, rounds=rounds))
                                          for level in levels])

    def rate_sweep(self, spec: LoadSpec, rates: list[float], target: Target) -> list[RunResult]:
        """The same workload arriving at each of `rates` requests per second (the spec's arrivals: Poisson, gamma or
        constant, its cap), in order; each level RATE_LEVEL_S seconds of arrivals at least, saved as it ends."""
        return self._sweep(spec, target, [(say("{rate:g} requests/s", rate=rate), dict(level=0, rounds=1, rate=rate))
                                          for rate in rates])

    def _sweep(self, spec: LoadSpec, target: Target, steps: list[tuple[Message, dict]]) -> list[RunResult]:
        """The steps of a sweep in order (each `_level`'s arguments, with what the progress says of it), stopped
        between steps by Cancel; each level's synthetic prompts its own (seeds.nth)."""
        check_sweep(spec)
        spec = target.aim(replace(spec, scenario="sweep"))
        out: list[RunResult] = []
        self.mark(say("sweep start"))
        try:
            for said, args in steps:
                if self.cancel.is_set():
                    break
                self.progress.on_step(len(out), len(steps), said)
                out.append(self._level(seeds.nth(spec, len(out), self.models_dir), target=target,
                                       progress=self.progress, cancel=self.cancel, **args))
            self.progress.on_step(len(out), len(steps), mark("done"))
        finally:
            self.mark(say("sweep end"))
        return out

    def _level(self, spec: LoadSpec, level: int, target: Target, rounds: int, progress: Progress,
               cancel: threading.Event, rate: float | None = None, notes: Notes | None = None) -> RunResult:
        """One level of a sweep or a search (loadgen.run_level; given a `rate`, the spec's requests arriving
        at that many per second instead) with the server's view and energy, saved."""
        count, served, meter = ServerCount(target), self._before(target), self._meter(target)
        watch = disturbance.Watch([target.pid])

        def hooks() -> None:
            count.start()
            if meter is not None:
                meter.start()
            watch.start()

        if rate is not None:  # arrivals at a rate (the spec's: Poisson, gamma, constant, a cap), not a number in flight
            n = rate_requests(spec, rate, self.rate_level_s)
            result = loadgen.run_load(replace(spec, shape="poisson", rate=rate, num_requests=n,
                                              label=say("{rate:g} requests/s", rate=rate)),
                                      observer=progress, cancel=cancel, on_measure=hooks)
        else:
            result = loadgen.run_level(spec, level, observer=progress, cancel=cancel, rounds=rounds,
                                       on_measure=hooks)
        beside = watch.stop()
        result = self._energy(count.finish(result), meter)
        result.extra.add(notes)
        return self._keep(result, target, served, beside, count.page_after)

    def repeat(self, spec: LoadSpec, target: Target, n: int, fixed_seed: bool = False) -> list[RunResult]:
        """The same load `n` times, each run saved as it ends and marked as one of the group
        (Notes.repeat: its group, index and total): engine.measure.judge.repeats gives their median and
        interval. Before each repeat after the first the server's prefix cache is emptied where it allows it
        (vLLM's POST /reset_prefix_cache, served only with VLLM_SERVER_DEV_MODE=1; Notes.repeat.prefix_cache_reset
        False says it refused, so later repeats may have found earlier prompts cached). Synthetic prompts are made
        again from a new seed for each repeat after the first unless `fixed_seed` (workloads.seeds: each run records
        its own)."""
        check_repeats(n, most=None)
        group, out = uuid.uuid4().hex[:12], Repeats()
        for i in range(n):
            if self.cancel.is_set():
                break
            self.progress.on_step(i, n, say("repeat {i} of {n}", i=i + 1, n=n))
            reset = endpoint.reset_prefix_cache(target.base_url, target.api_key) if i else None
            sent = seeds.reseed(spec, seeds.fresh(), models_dir=self.models_dir) if i and not fixed_seed else spec
            run = self.load(sent, target, Notes(repeat=Repeat(group=group, index=i + 1, total=n,
                                                              prefix_cache_reset=reset)))
            out.append(run)
            if run.extra.repeat.failed and i + 1 < n and not self.cancel.is_set():
                out.stopped = self._repeats_stop(run, target, i + 1, n)
                if out.stopped is not None:
                    self.progress.on_stage(out.stopped)
                    break
        self.progress.on_step(len(out), n, mark("done"))
        return out

    @staticmethod
    def _repeats_stop(run: RunResult, target: Target, i: int, n: int) -> Message | None:
        """Why the repeats after repeat `i` (which failed) cannot run: its server no longer answers, or not one of
        its requests was answered (the next would fare the same); None: go on."""
        c = failures.counts(run)
        try:
            endpoint.discover(target.base_url, target.api_key)
        except LabError:
            return say_n("Repeat {i} of {total} failed ({counts}) and the server at {url} no longer answers, so the "
                         "{n} repeat left was not run: the finished repeats are kept, and only those that answered "
                         "every request count in the statistics.",
                         "Repeat {i} of {total} failed ({counts}) and the server at {url} no longer answers, so the "
                         "{n} repeats left were not run: the finished repeats are kept, and only those that answered "
                         "every request count in the statistics.", n - i, i=i, total=n, counts=c.said,
                         url=target.base_url)
        if c.answered == 0:
            return say("Repeat {i} of {n} answered none of its requests ({counts}), and the next would fare the same, "
                       "so the rest were not run: see why its requests failed.", i=i, n=n, counts=c.said)
        return None

    def slo_search(self, spec: LoadSpec, target: Target, slo: Slo, low: float = 1, high: float | None = 64,
                   tolerance: float = 1, time_cap_s: float = 600.0, rounds: int = 2,
                   by: str = "concurrency") -> "SloSearch":
        """The largest load at which `slo` holds: requests in flight (`by` "concurrency",
        whole numbers, each level through run_level) or requests per second (`by` "rate": the spec's
        num_requests arriving as Poisson at that rate). Bisection between `low` and `high` (each level saved as
        it ends, marked Notes.slo.search), until the last level that held and the first that did not are
        `tolerance` apart or `time_cap_s` has passed (then the best found so far, said as not settled). A level
        is stopped early, and counts as missed, once the server is past saturation
        (engine.measure.judge.saturation: in flight and TTFT both still growing, which only arrivals at a rate
        can show). `high` None: no top given, so the level doubles from `low` until the SLO misses (at most
        MAX_IN_FLIGHT in flight or MAX_RATE requests/s), then bisects: the range follows the server, not a guess."""
        doubling = high is None
        top = (MAX_IN_FLIGHT if by == "concurrency" else MAX_RATE) if high is None else high
        check_search(low, top, tolerance, by)
        whole = by == "concurrency"
        spec = target.aim(replace(spec, scenario="slo-search"))
        search = SloSearch(slo, low, top, tolerance, time_cap_s, uuid.uuid4().hex[:12], by=by, doubled=doubling)
        began = time.monotonic()
        expected = 2 + math.ceil(math.log2(max(1.0, (top - low) / tolerance)))  # low, high, then halvings
        self.mark(say("SLO search start"))
        try:
            # the highest level that held and the lowest that did not
            ok: float | None = None
            bad: float | None = None
            level: float | None = low
            while level is not None and not self.cancel.is_set():
                if search.tried and time.monotonic() - began > time_cap_s:
                    search.capped = True
                    break
                self.progress.on_step(len(search.tried), max(len(search.tried) + 1, expected),
                                      say("concurrency {level}", level=level) if whole else
                                      say("{rate:g} requests/s", rate=level))
                run, holds = self._search_level(seeds.nth(spec, len(search.tried), self.models_dir), level, target,
                                                rounds, search.id, slo, whole)
                search.tried.append((level, holds, run))
                if holds:
                    ok = level
                else:
                    bad = level
                if ok is None and bad == low:
                    break  # not even the lowest level held
                if bad is None and doubling:  # no top given: twice as much, until the SLO misses
                    level = min(top, level * 2) if level < top else None
                elif bad is None:
                    level = top if level < top else None  # the top first: the answer may lie at or beyond it
                else:  # ok < bad: halve the gap between them
                    assert ok is not None  # the lowest level held, else the search has stopped
                    mid = (ok + bad) // 2 if whole else (ok + bad) / 2
                    level = mid if bad - ok > tolerance else None
            search.best, search.above, search.cancelled = ok, bad, self.cancel.is_set()
            if doubling:  # the highest level it reached is the top it searched
                search.high = max(search.levels, default=low)
            self.progress.on_step(len(search.tried), len(search.tried), mark("done"))
        finally:
            self.mark(say("SLO search end"))
        return search

    def _search_level(self, spec: LoadSpec, level: float, target: Target, rounds: int, search_id: str,
                      slo: Slo, whole: bool = True) -> tuple[RunResult, bool]:
        """One level of the search, stopped early once past saturation; whether the SLO held there."""
        stop = threading.Event()
        watch = SaturationWatch(self.progress, stop, int(level) if whole else spec.n)
        relay_done = threading.Event()

        def relay() -> None:  # the whole search's cancel also ends this level
            while not relay_done.wait(0.1):
                if self.cancel.is_set():
                    stop.set()
                    return

        relay_thread = threading.Thread(target=relay, daemon=True, name="search-cancel")
        relay_thread.start()
        try:
            run = self._level(spec, int(level) if whole else 0, target, rounds, watch, stop,
                              rate=None if whole else level, notes=Notes(slo=SloNotes(search=search_id)))
        finally:
            relay_done.set()
        if watch.saturated:
            run.extra.slo.oversaturated = True
        verdict = judge(run, slo)
        return run, bool(verdict is not None and verdict.meets and not watch.saturated)

    def tuning(self, server: VLLMServer, configs: list[ServerConfig], spec: LoadSpec,
               model_max_len: int | None = None, labels: list[str] | None = None,
               repeats: int = 1) -> list[RunResult]:
        """Restart `server` with each configuration and run the same load on it (notebook step 4), `repeats` times
        (more than 1: each configuration's runs one repeat group, so engine.measure.judge.verdict can tell a
        difference from noise); the server is left running with the last one. `labels` names the configurations
        (default: tuning_label); the runs keep the spec's scenario ("tuning" when it has none)."""
        check_repeats(repeats)
        out: list[RunResult] = []
        for i, cfg in enumerate(configs):
            if self.cancel.is_set():
                break
            label = labels[i] if labels else tuning_label(cfg)
            kept = already_running(server, cfg)
            if kept:  # a restart would only cost a minute and change nothing
                self.progress.on_step(i, len(configs), say("{label}: the server already runs these "
                                                           "settings, not restarted", label=label))
            else:
                self.progress.on_step(i, len(configs), say("{label}: restarting vLLM", label=label))
                server.restart(cfg, model_max_len=model_max_len)
                server.wait_ready(on_stage=lambda s, label=label: self.progress.on_stage(  # type: ignore[misc]
                    say("{label}: {stage}", label=label, stage=s.stage)))
            target, group = Target.of(server), uuid.uuid4().hex[:12]
            for k in range(repeats):
                if self.cancel.is_set():
                    break
                self.progress.on_stage(say("{label}: measuring", label=label) if repeats == 1 else
                                       say("{label}: measuring, repeat {i} of {n}", label=label, i=k + 1, n=repeats))
                notes = Notes(not_restarted=kept)
                if repeats > 1:  # as Runner.repeat marks its runs
                    notes.repeat = Repeat(group=group, index=k + 1, total=repeats, prefix_cache_reset=(
                        endpoint.reset_prefix_cache(target.base_url, target.api_key) if k else None))
                out.append(self.load(replace(spec, scenario=spec.scenario or "tuning", label=label), target, notes))
        self.progress.on_step(len(configs), len(configs), mark("done"))
        return out

    def naive(self, spec) -> RunResult:
        """The transformers baseline (spec: engine.measure.baseline.protocol.NaiveSpec) in its own worker process."""
        static = spec.mode == "static-batch"  # one padded generate() over all prompts, not naive one by one
        self.mark(say("static batch start") if static else say("naive start"))
        watch = disturbance.Watch()  # its worker is this process's child: its own
        watch.start()
        try:
            result = naive.run_naive(spec, observer=self.progress, cancel=self.cancel)
        finally:
            self.mark(say("static batch end (memory returned)") if static else say("naive end (memory returned)"))
        # the worker has exited by now, so no GPU lists it at either end: its pid and device say which GPU was the
        # run's, for the other processes there (as a vLLM run's GPU watch reads them)
        worker = [pid] if (pid := result.extra.naive.worker_pid) else []
        result.extra.beside.disturbance = disturbance.record(watch.stop(worker, naive.worker_gpu(result)), None,
                                                             None, 0)
        result.hardware = result.hardware or hardware.describe()
        result.versions = result.versions or hardware.versions()
        if self.slo is not None:
            record_goodput(result, self.slo)
        return self.save(result)
