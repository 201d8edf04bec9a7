"""The room as the load: on the presenter's cue a round opens, each attendee presses one button (or
types a short question) on their own device, and their requests go to the server as they come, timed on one clock;
once the round has closed and its answers are in, the same requests go again one at a time, for contrast. Both are
saved as runs, paired by `Notes.room.round`. One `Room` per Lab (`Lab.room`), shared by every viewer.

What one attendee sees of another: the name and the timings, never the text. A typed question is its writer's own:
the big screen shows it to people who did not ask to read it, and an open text box on a projector invites pranks.
So each attendee's page shows only their own question and answer, and the saved runs keep a typed question (and its
answer, which may quote it) as a fixed phrase; the lab's own prompts, which the button sends, are kept as they are."""
from __future__ import annotations

import asyncio
import copy
import random
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from engine.access import presenter_only
from engine.errors import ConfigError, LabError, NotPresenter
from engine.figures.room import room_timeline
from engine.measure.judge import stats
from engine.measure.judge.joins import Join, Sharing, first_joins, sharing
from engine.measure.load import loadgen
from engine.measure.load.drive import run_loop, shift
from engine.measure.progress import Progress, RunPlan, notify
from engine.measure.load.request import Requester, clock
from engine.measure.load.spec import LoadSpec, check_max_tokens
from engine.measure.load.sse import StreamParser
from engine.measure.workloads.prompts import LAB_CONCURRENT
from engine.messages import mark, say
from engine.results.records import Load, LoadClient, Notes, RequestRecord, RoomRound, RunResult

if TYPE_CHECKING:  # the Room is handed its Lab; engine.lab imports this module, not the other way round
    from engine.jobs import Job
    from engine.lab import Lab
    from engine.runs import Runner, Target

ROUND_S = (10, 600)  # how long a round may stay open
VIEW_S = 0.25  # how long one reading of the round serves every viewer: a room of pages redraws it each second
# The big screen's timeline is built once for every viewer (a language each), again only once the round changed
# and its pace has passed: five times what the last build took, so that building it takes at most a fifth of a
# core, within 1-10 s. A busy machine redraws less often instead of falling behind its screens.
PACE_S, PACE_SHARE = (1.0, 10.0), 0.2
DEFAULT_ROUND_S = 60
ERROR_FOR_S = 600  # how long a failed round's sentence stays on the page after its job ended
DEFAULT_TOKENS = 128
MAX_QUESTION_CHARS = 200  # a short question, well within a viewer's chat message (ChatLimits.max_prompt_chars)
MAX_NAME_CHARS = 24
MAX_ATTENDEES = 100  # requests per round: a room of 30 with room to spare, not a script's thousand sessions
# What the server's max-model-len keeps for the prompt, beside the answer: a typed question's 200 characters (a
# Korean syllable may take two tokens) and the chat template; the rest is the answer's at most
PROMPT_TOKENS = 448
TYPED = mark("(a question an attendee typed)")  # what the saved runs keep of a typed question and its answer

# A round's stages, as a page says them
OPENING, OPEN, ANSWERING, ONE_AT_A_TIME, DONE, CANCELLED, FAILED = (
    mark("opening"), mark("open"), mark("answering"), mark("one at a time"), mark("done"), mark("cancelled"),
    mark("failed"))

# Generated names, for attendees who type none (a number keeps two of one animal apart)
ANIMALS = {"en": ("Otter", "Heron", "Lynx", "Panda", "Falcon", "Badger", "Koala", "Dolphin", "Fox", "Owl", "Tiger",
                  "Crane", "Seal", "Beaver", "Hedgehog", "Magpie"),
           "ko": ("수달", "왜가리", "스라소니", "판다", "매", "오소리", "코알라", "돌고래", "여우", "부엉이", "호랑이",
                  "두루미", "물범", "비버", "고슴도치", "까치")}


class RoomRefused(LabError):
    """An attendee's press was not sent (no round open, already sent, too long, ...): one sentence why."""


def suggest_name(lang: str = "en", rng: random.Random | None = None) -> str:
    """A short name for an attendee who types none, e.g. 'Otter 17' ('수달 17')."""
    rng = rng or random.Random()
    return f"{rng.choice(ANIMALS.get(lang, ANIMALS['en']))} {rng.randint(10, 99)}"


def answer_cap(server_max_len: int | None) -> int | None:
    """The longest answer the server takes beside an attendee's longest question (None: its length unknown)."""
    return None if not server_max_len else max(1, server_max_len - PROMPT_TOKENS)


def check_round(seconds, max_tokens, viewer_max_tokens: int, server_max_len: int | None = None) -> None:
    """A round's length and answer length, checked before it opens (ConfigError, one sentence)."""
    lo, hi = ROUND_S
    if not isinstance(seconds, int) or isinstance(seconds, bool) or not lo <= seconds <= hi:
        raise ConfigError(say("A round stays open from {lo} to {hi} s, not {v}.", lo=lo, hi=hi, v=seconds))
    check_max_tokens(max_tokens, answer_cap(server_max_len),
                     of=mark("what the running server's max-model-len leaves beside an attendee's question"))
    if max_tokens > viewer_max_tokens:
        raise ConfigError(say("The room's answers are viewers' requests, up to {limit} tokens each: ask for {limit} "
                              "or fewer.", limit=viewer_max_tokens))


@dataclass
class Entry:
    """One attendee's request in a round: the text sent (their own, or the lab's prompt) and its record, filled
    as the answer streams (`parser` holds what has come so far)."""

    attendee: str  # the browser session's id: one request per attendee per round
    name: str
    text: str
    typed: bool
    record: RequestRecord  # times in s on the round's clock (from its opening)
    t0: float  # that clock's origin (perf_counter), for the chunks of an answer still streaming
    parser: StreamParser = field(default_factory=lambda: StreamParser(chat=True))

    def live(self) -> RequestRecord:
        """The record as it stands on the round's clock: finished, or with what has streamed so far."""
        r = self.record
        if r.end_time is not None:
            out = copy.copy(r)
            out.chunk_times = list(r.chunk_times)
            return out
        times = [t - self.t0 for t in list(self.parser.times)]  # perf_counter stamps of the chunks so far
        return RequestRecord(index=r.index, prompt=r.prompt, send_time=r.send_time, chunk_times=times,
                             first_token_time=times[0] if times else None, output_tokens=len(times))


@dataclass
class Round:
    """One round: the presenter's settings, when it opened and closes, and the attendees' entries in the order
    they pressed (an entry's index is its record's)."""

    id: str
    seconds: int
    max_tokens: int
    full_length: bool
    status: str = OPENING
    opened_at: float | None = None  # epoch s
    closes_at: float | None = None
    entries: list[Entry] = field(default_factory=list)
    futures: list[Future] = field(default_factory=list)
    closing: threading.Event = field(default_factory=threading.Event)
    job_id: str = ""
    runs: dict[str, str] = field(default_factory=dict)  # "together" | "alone" -> the saved run's id

    def admit(self, attendee: str, name: str, text: str, now: float, t0: float) -> Entry:
        """An attendee's press as an entry (its record not yet sent; `t0` the round's clock), or RoomRefused with
        the sentence they read."""
        name = " ".join(name.split())
        question = " ".join(text.split())
        if self.status != OPEN or (self.closes_at is not None and now >= self.closes_at):
            if self.status == OPENING:
                raise RoomRefused(say("The round is opening: press again in a moment."))
            raise RoomRefused(say("This round has closed: wait for the presenter to open the next one."))
        if any(e.attendee == attendee for e in self.entries):
            raise RoomRefused(say("You already sent your request in this round: one per person; watch it on the "
                                  "big screen."))
        if not name:
            raise RoomRefused(say("Type a name (or keep the one suggested), then press again."))
        if len(name) > MAX_NAME_CHARS:
            raise RoomRefused(say("Your name is {n} characters; the room shows up to {limit}: shorten it.",
                                  n=len(name), limit=MAX_NAME_CHARS))
        if any(e.name.casefold() == name.casefold() for e in self.entries):
            raise RoomRefused(say("Someone in this round is already called {name}: pick another name.", name=name))
        if len(question) > MAX_QUESTION_CHARS:
            raise RoomRefused(say("Your question is {n} characters; the room takes up to {limit}: shorten it.",
                                  n=len(question), limit=MAX_QUESTION_CHARS))
        if len(self.entries) >= MAX_ATTENDEES:
            raise RoomRefused(say("This round is full ({limit} requests): wait for the next one.",
                                  limit=MAX_ATTENDEES))
        i = len(self.entries)
        sent = question or LAB_CONCURRENT[i % len(LAB_CONCURRENT)]
        # sent at the press until the request is on its way (Requester.run stamps it then, a moment later)
        entry = Entry(attendee, name, sent, bool(question),
                      RequestRecord(index=i, prompt=sent, send_time=clock() - t0), t0)
        self.entries.append(entry)
        return entry

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.entries]

    def kept(self, records: list[RequestRecord]) -> list[RequestRecord]:
        """Copies of `records` as a saved run keeps them: a typed question and its answer as TYPED."""
        out = []
        for r in records:
            r = copy.copy(r)
            if r.index < len(self.entries) and self.entries[r.index].typed:
                r.prompt, r.output_text = str(TYPED), ""
            out.append(r)
        return out


@dataclass(frozen=True)
class RoundView:
    """What a page shows of the newest round: its stage, settings and clock, the attendees' names (by request
    index), its requests as they stand (times from the first press; `now`: where unfinished bars end), who joined
    whom and how many generated together then, and the ids of its saved runs. `job_id`: the job running it (the
    one-at-a-time part's live view)."""

    id: str
    status: str
    seconds: int
    max_tokens: int
    full_length: bool
    closes_in: float | None
    names: list[str]
    run: RunResult
    now: float
    runs: dict[str, str]
    job_id: str
    joins: dict[int, Join]
    sharing: Sharing
    alone: tuple[int, int] = (0, 0)  # the one-at-a-time part: requests answered, of how many

    @property
    def share(self) -> float | None:
        """How far the round has come, for a progress bar: the open round's time gone, the answers in while they
        finish, then the one-at-a-time part's (None: opening, nothing to count yet)."""
        if self.status == OPEN and self.closes_in is not None:
            return 1 - self.closes_in / self.seconds
        if self.status == ANSWERING and self.names:
            return self.answered / len(self.names)
        if self.status == ONE_AT_A_TIME and self.alone[1]:
            return self.alone[0] / self.alone[1]
        return None

    @property
    def accepting(self) -> bool:
        return self.status == OPEN and (self.closes_in or 0) > 0

    @property
    def answered(self) -> int:
        """The requests whose answer has ended."""
        return sum(1 for r in self.run.records if r.end_time is not None)

    @property
    def over(self) -> bool:
        """Its job has ended (done, cancelled or failed): its runs are what the history keeps."""
        return self.status in (DONE, CANCELLED, FAILED)


@dataclass(frozen=True)
class Screen:
    """What the big screen draws of a live round, from one reading: the view and its timeline; what it shows
    (`signature`), when it was built and how long until it may be built again (`pace`)."""

    view: RoundView
    timeline: Any
    signature: tuple = ()
    built_at: float = 0.0
    pace: float = PACE_S[0]


def _signature(view: RoundView) -> tuple:
    """What the timeline shows of a reading: each request's tokens, end and error, and the clock while any is still
    under way (a round where nothing moves draws the same figure, and a browser keeps the chart it drew)."""
    recs = view.run.records
    moving = any(r.end_time is None for r in recs)
    return (view.id, view.status, tuple((r.index, len(r.chunk_times), r.end_time, r.error) for r in recs),
            round(view.now, 1) if moving else None)


@dataclass(frozen=True)
class Mine:
    """One attendee's own request in the newest round: their text and the answer so far, and where it joined."""

    name: str
    text: str
    typed: bool
    record: RequestRecord  # times from the round's first press
    join: Join | None  # the request it joined furthest into its answer
    joined_name: str
    sharing: int  # requests generating together when its first token came


class Room:
    # what the page reads, so that it touches only `lab.room`
    round_s, default_s, default_tokens, error_for_s = ROUND_S, DEFAULT_ROUND_S, DEFAULT_TOKENS, ERROR_FOR_S
    max_name, max_question = MAX_NAME_CHARS, MAX_QUESTION_CHARS
    suggest_name = staticmethod(suggest_name)

    def __init__(self, lab: "Lab"):
        self.lab = lab
        self.access = lab.access  # the Lab's: who may open and close rounds
        self._lock = threading.Lock()
        self._round: Round | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._requester: Requester | None = None
        self._progress: Progress | None = None
        self._view: tuple[float, RoundView] | None = None  # the last reading (its clock), shared by every viewer
        self._screens: dict[str, Screen] = {}  # the big screen's figures by language, shared by every viewer
        self._building: set[str] = set()

    # -- the presenter's actions -------------------------------------------------------------------
    def max_tokens(self) -> int:
        """The longest answer a round may ask for now: a viewer's chat limit, within what the running server's
        max-model-len leaves beside an attendee's question."""
        viewer = self.lab.chat_limits.max_tokens
        cap = answer_cap(self.lab.serving_max_len())
        return viewer if cap is None else min(viewer, cap)

    @presenter_only(who=True)
    def open(self, seconds: int = DEFAULT_ROUND_S, max_tokens: int = DEFAULT_TOKENS, full_length: bool = True, *,
             who) -> "Job":
        """Open a round for `seconds`: attendees' presses are sent the moment they come, each answer up to
        `max_tokens` (all of it with `full_length`: ignore_eos, so that the one-at-a-time contrast does the same
        work). It runs as a job (a benchmark: other runs wait, viewers' chats wait); when it closes and the answers
        are in, the same requests go one at a time."""
        check_round(seconds, max_tokens, self.lab.chat_limits.max_tokens, self.lab.serving_max_len())
        rnd = Round(uuid.uuid4().hex[:12], seconds, max_tokens, full_length)
        spec = LoadSpec(base_url="", model="", prompts=list(LAB_CONCURRENT), max_tokens=max_tokens,
                        ignore_eos=full_length, scenario="room", label=say("The room's round"))
        job = self.lab.run_measured("room", say("The room's round"), spec,
                                    lambda runner, spec, target: self._run(rnd, runner, spec, target),
                                    token=who[0], caller=who[1])
        with self._lock:
            rnd.job_id = job.id
            self._round = rnd
        return job

    @presenter_only
    def close(self) -> None:
        """Close the open round now: no more presses; the answers under way finish, then the contrast runs."""
        with self._lock:
            rnd = self._round
            if rnd is None or rnd.status not in (OPENING, OPEN):
                raise RoomRefused(say("No round is open: there is nothing to close."))
            rnd.closing.set()

    # -- an attendee's press (anyone's) ----------------------------------------------------------------
    def send(self, attendee: str, name: str, text: str = "") -> Entry:
        """Send this attendee's request in the open round (one per attendee per round, within the room's limits);
        RoomRefused (or NotPresenter while the lab is locked) with the sentence they read."""
        if self.access.locked:
            raise NotPresenter(self.access.why_not())
        with self._lock:
            rnd, loop, req, progress = self._round, self._loop, self._requester, self._progress
            if rnd is None:
                raise RoomRefused(say("No round is open: wait for the presenter's cue, then press."))
            entry = rnd.admit(attendee, name, text, time.time(), req.t0 if req is not None else clock())
            assert loop is not None and req is not None  # admitted: the round is open, and they are set with it
            rnd.futures.append(asyncio.run_coroutine_threadsafe(self._ask(entry, req, progress, rnd.max_tokens), loop))
        return entry

    @staticmethod
    async def _ask(entry: Entry, req: Requester, progress, max_tokens: int) -> None:
        await req.run(entry.record, max_tokens, on_sent=lambda r: notify(progress.on_request_sent, r),
                      parser=entry.parser)
        notify(progress.on_request_done, entry.record)

    # -- the round's job ---------------------------------------------------------------------------
    def _run(self, rnd: Round, runner: "Runner", spec: LoadSpec, target: "Target") -> list[RunResult]:
        """The round, then its contrast: each saved the moment it ends (Runner.gathered), paired by the round's id."""
        try:
            together = runner.gathered(spec, target, lambda on_measure: self._gather(rnd, spec, runner, on_measure))
            out = [together]
            if together.measured:
                rnd.runs["together"] = together.id
            if not together.measured or runner.cancel.is_set():
                return out
            rnd.status = ONE_AT_A_TIME
            alone = replace(spec, shape="sequential", concurrency=1, prompts=[e.text for e in rnd.entries],
                            num_requests=len(rnd.entries), scenario="room-one-at-a-time",
                            label=say("The room's {n} requests, one at a time", n=len(rnd.entries)))
            runner.progress.on_stage(say("the same requests, one at a time"))

            def one_by_one(on_measure) -> RunResult:
                result = loadgen.run_load(alone, observer=runner.progress, cancel=runner.cancel, on_measure=on_measure)
                result.records = rnd.kept(result.records)
                result.load.prompts = [str(TYPED) if e.typed else e.text for e in rnd.entries]
                return result

            out.append(runner.gathered(alone, target, one_by_one,
                                       Notes(room=RoomRound(round=rnd.id, attendees=rnd.names))))
            if out[-1].measured:
                rnd.runs["alone"] = out[-1].id
            return out
        except BaseException:
            rnd.status = FAILED
            raise
        finally:
            if rnd.status != FAILED:
                rnd.status = CANCELLED if runner.cancel.is_set() else DONE
            with self._lock:
                self._loop = self._requester = self._progress = None

    def _gather(self, rnd: Round, spec: LoadSpec, runner: "Runner", on_measure) -> RunResult:
        """Open the round on a loop of its own and send each press as it comes; when it closes (its time, the
        presenter's word or a cancel), wait for the answers under way; the run, its clock from the first press."""
        progress, cancel = runner.progress, runner.cancel
        notify(progress.on_start, RunPlan(label=spec.label, shape="room", num_requests=0, warmup=0,
                                          concurrency=MAX_ATTENDEES, workers=1, url=spec.url, model=spec.model))

        async def main() -> None:
            async with Requester(spec) as req:
                await asyncio.to_thread(on_measure)
                with self._lock:
                    self._round = rnd
                    req.t0 = clock()
                    rnd.opened_at = time.time()
                    rnd.closes_at = rnd.opened_at + rnd.seconds
                    self._loop, self._requester, self._progress = asyncio.get_running_loop(), req, progress
                    rnd.status = OPEN
                notify(progress.on_clock, rnd.opened_at)
                notify(progress.on_stage, OPEN)  # the job's stage as the round's: not "queued" while it is open
                while not (rnd.closing.is_set() or cancel.is_set() or time.time() >= rnd.closes_at):
                    await asyncio.sleep(0.1)
                with self._lock:
                    rnd.status = ANSWERING
                    rnd.closes_at = min(rnd.closes_at, time.time())
                    pending = [asyncio.wrap_future(f) for f in rnd.futures]
                notify(progress.on_stage, ANSWERING)
                while pending:
                    _done, still = await asyncio.wait(pending, timeout=0.2)
                    if cancel.is_set():
                        for f in still:
                            f.cancel()
                    pending = list(still)

        run_loop(main)
        records = [e.live() for e in rnd.entries]
        first = min((r.send_time for r in records), default=0.0)
        shift(records, -first)
        duration = max((r.end_time for r in records if r.end_time is not None), default=0.0)
        load = spec.as_dict() | {"shape": "room", "num_requests": len(records), "concurrency": None,
                                 "prompts": [str(TYPED) if e.typed else e.text for e in rnd.entries]}
        result = RunResult(
            kind="vllm", scenario="room", label=say("The room: {n} requests as the attendees pressed", n=len(records)),
            records=rnd.kept(records), duration=duration, started_at=(rnd.opened_at or time.time()) + first,
            model=spec.model, load=Load.from_dict(load),
            extra=Notes(cancelled=cancel.is_set(), load_client=LoadClient(name=loadgen.client_name(), workers=1),
                        room=RoomRound(round=rnd.id, attendees=rnd.names)))
        result.summary = stats.summarize(result.records, duration)
        notify(progress.on_complete, result)
        return result

    # -- reading (open to every viewer) ------------------------------------------------------------------
    def view(self, fresh: bool = False) -> RoundView | None:
        """The newest round as it stands (None: none since the app started; `saved()` has the last one kept), read
        at most every VIEW_S and shared by every viewer in between (`fresh`: read now)."""
        with self._lock:
            rnd = self._round
            if rnd is None:
                return None
            entries = list(rnd.entries)
            cached = self._view
        if not fresh and cached is not None and cached[1].id == rnd.id and cached[1].status == rnd.status and \
                len(cached[1].names) == len(entries) and clock() - cached[0] < VIEW_S:
            return cached[1]
        live = [e.live() for e in entries]
        first = min((r.send_time for r in live), default=0.0)
        shift(live, -first)
        t0 = entries[0].t0 if entries else 0.0
        now = clock() - t0 - first if entries else 0.0
        names = [e.name for e in entries]
        run = RunResult(kind="vllm", scenario="room", label=say("The room's round"), records=live,
                        duration=max((r.end_time or 0.0 for r in live), default=0.0),
                        started_at=(rnd.opened_at or 0.0) + first, extra=Notes(room=RoomRound(attendees=names)))
        closes_in = None if rnd.closes_at is None else max(0.0, rnd.closes_at - time.time())
        job = self.lab.job(rnd.job_id) if rnd.status == ONE_AT_A_TIME else None
        view = RoundView(rnd.id, rnd.status, rnd.seconds, rnd.max_tokens, rnd.full_length, closes_in, names, run,
                         now, dict(rnd.runs), rnd.job_id, first_joins(live), sharing(live),
                         (job.done, job.total) if job is not None else (0, 0))
        with self._lock:
            self._view = (clock(), view)
        return view

    def seen(self) -> tuple | None:
        """What a still room page shows changes with (it watches this between rounds): the newest round, its stage,
        its job's end and whether that job's error is still shown, since the error's window ends while nothing else
        moves."""
        view = self.view()
        if view is None:
            return None
        job = self.lab.job(view.job_id)
        return view.id, view.status, job and (job.seen, job.error_shown(ERROR_FOR_S))

    def screen(self, lang: str = "en") -> Screen | None:
        """The big screen of the newest round while it runs (None: no round): one reading and its timeline, shared
        by every viewer in `lang`, rebuilt at the screens' pace (PACE_S) and only when what it shows changed; in
        between every viewer gets the same figure, so each browser keeps the chart it drew instead of drawing it
        anew each second."""
        with self._lock:
            kept = self._screens.get(lang)
            fresh_enough = kept is not None and clock() - kept.built_at < kept.pace
            if kept is not None and (fresh_enough or lang in self._building) and \
                    self._round is not None and kept.view.id == self._round.id:
                return kept
            self._building.add(lang)
        try:
            view = self.view()
            if view is None:
                return None
            signature = _signature(view)
            t0 = clock()
            if kept is not None and kept.signature == signature:  # nothing moved: the same figure, a new reading
                timeline = kept.timeline
            else:
                moving = signature[-1] is not None
                timeline = room_timeline(view.run, now=view.now if moving else None, lang=lang)
            pace = min(PACE_S[1], max(PACE_S[0], (clock() - t0) / PACE_SHARE))
            screen = Screen(view, timeline, signature, clock(), pace)
            with self._lock:
                self._screens[lang] = screen
            return screen
        finally:
            with self._lock:
                self._building.discard(lang)

    def mine(self, attendee: str) -> Mine | None:
        """This attendee's own request in the newest round (None: they have not pressed in it)."""
        view = self.view()
        with self._lock:
            entry = next((e for e in self._round.entries if e.attendee == attendee), None) if self._round else None
        if view is None or entry is None:
            return None
        if entry.record.index >= len(view.names):  # pressed a moment after the shared reading was taken
            view = self.view(fresh=True)
            if view is None:
                return None
        record = copy.copy(next(r for r in view.run.records if r.index == entry.record.index))
        record.output_text = "".join(entry.parser.texts)
        join = view.joins.get(record.index)
        share = view.sharing
        at_first = next((c for t, c in zip(share.times, share.counts)
                         if record.first_token_time is not None and t >= record.first_token_time), 0)
        return Mine(entry.name, entry.text, entry.typed, record, join, view.names[join.early] if join else "",
                    at_first)

    def results(self, view: RoundView) -> tuple[RunResult | None, RunResult | None]:
        """A finished round's saved runs, the attendees' and the one-at-a-time contrast, read as History's export
        reads runs: one deleted there meanwhile is None, not an error."""
        ids = [i for i in (view.runs.get("together"), view.runs.get("alone")) if i]
        kept = {r.id: r for r in self.lab.history.readable(ids)[0]}
        together = kept.get(view.runs.get("together", ""))
        return (together, kept.get(view.runs.get("alone", ""))) if together is not None else (None, None)

    def saved(self) -> tuple[RunResult | None, RunResult | None]:
        """The newest round kept in the history: its attendees' run and the same requests one at a time (None where
        it was not kept: nobody pressed, or the contrast was cancelled)."""
        rows = [r for r in self.lab.history.runs(limit=100) if r.scenario in ("room", "room-one-at-a-time")
                and not r.problem]
        newest = next((r for r in rows if r.scenario == "room"), None)
        if newest is None:
            return None, None
        alone = next((r for r in rows if r.scenario == "room-one-at-a-time"
                      and r.extra.room.round == newest.extra.room.round), None)
        history = self.lab.history
        try:
            return history.run(newest.id), history.run(alone.id) if alone else None
        except LabError:
            return None, None
