"""Who may act: every state-changing action is checked here against the presenter token.
See docs/internals.md#access."""
from __future__ import annotations

import functools
import hmac
import threading
import time
from collections import defaultdict, deque

from engine.errors import NotPresenter, Throttled
from engine.messages import Message, say

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})

# Wrong tokens: per caller (an IP address or a browser session), and all callers together.
CALLER_FAILURES, CALLER_WINDOW_S = 5, 60.0
ROOM_FAILURES, ROOM_WINDOW_S = 20, 60.0


def presenter_only(fn=None, *, who: bool = False):
    """Make a method of an object holding `access` (the Lab, the Guide) an action: `token=` and `caller=` (an IP
    or session id, for throttling wrong tokens) are checked before it runs, here in the engine, whatever a page
    drew; with `who`, the method is given them as `who=(token, caller)` (to act on the presenter's behalf)."""
    if fn is None:
        return functools.partial(presenter_only, who=who)

    @functools.wraps(fn)
    def action(self, *args, token: str | None = None, caller: str | None = None, **kw):
        self.access.check(token, caller)
        return fn(self, *args, **kw, **({"who": (token, caller)} if who else {}))

    action.presenter_only = True  # type: ignore[attr-defined]  # a mark on the function, read by test_access
    return action


class Access:
    def __init__(self, token: str | None, listen_host: str = "127.0.0.1", clock=time.monotonic):
        self.token = token or None
        self.listen_host = listen_host or "127.0.0.1"
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: dict[str, deque[float]] = defaultdict(deque)
        self._room: deque[float] = deque()

    @property
    def exposed(self) -> bool:
        """The app listens beyond this machine (e.g. `make run HOST=0.0.0.0`)."""
        return self.listen_host not in LOOPBACK_HOSTS

    @property
    def locked(self) -> bool:
        """No presenter token on an exposed app: nobody may act."""
        return self.token is None and self.exposed

    def why_not(self) -> Message:
        """The sentence a viewer reads next to a greyed button."""
        if self.locked:
            return say("This app is reachable from the network ({host}) and no presenter token is set, so nobody can "
                       "start servers or run benchmarks: restart it with SERVING_LAB_PRESENTER_TOKEN set.",
                       host=self.listen_host)
        return say("Only the presenter can do this: enter the presenter token in the sidebar.")

    def may_act(self, token: str | None) -> bool:
        """A quiet check for drawing buttons (no throttling, nothing counted)."""
        if self.token is None:
            return not self.exposed
        return token is not None and token != "" and hmac.compare_digest(token.encode(), self.token.encode())

    def check(self, token: str | None, caller: str | None = None) -> None:
        """Raise NotPresenter (or Throttled) unless `token` lets this caller act. A wrong token counts
        against its caller and the room. A caller over its limit is refused without a comparison, the
        right token included, so guessing gains nothing; while the room is over its limit, so is every
        caller that guessed wrong lately (a presenter who never mistyped is not locked out)."""
        if self.token is None:
            if self.exposed:
                raise NotPresenter(self.why_not())
            return
        caller = caller or "anonymous"
        now = self._clock()
        with self._lock:
            mine = _trim(self._failures[caller], now, CALLER_WINDOW_S)
            room = _trim(self._room, now, ROOM_WINDOW_S)
            if len(mine) >= CALLER_FAILURES or (mine and len(room) >= ROOM_FAILURES):
                until = mine[0] + CALLER_WINDOW_S if len(mine) >= CALLER_FAILURES else room[0] + ROOM_WINDOW_S
                raise Throttled(say("Too many wrong presenter tokens were tried: wait {seconds} s, then enter the "
                                    "token again.", seconds=max(1, round(until - now))))
            if token and hmac.compare_digest(token.encode(), self.token.encode()):
                return
            if token:  # no token at all is a viewer, not a guess
                mine.append(now)
                room.append(now)
        raise NotPresenter(say("That presenter token is not right: check it with the presenter.") if token
                           else self.why_not())


def _trim(q: deque[float], now: float, window: float) -> deque[float]:
    while q and now - q[0] > window:
        q.popleft()
    return q
