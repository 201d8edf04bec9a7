"""A server this app did not start, found by its URL: what it serves, discovered, or why not.
See docs/internals.md#endpoint."""
from __future__ import annotations

import ipaddress
import re
import ssl
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import httpx

from engine.errors import ConfigError, LabError
from engine.messages import say
from engine.metrics import PROMETHEUS_PREFIX
from engine.observe.telemetry import EndlessAnswer, capacity, get_within, process_start

TIMEOUT_S = 5.0


class EndpointError(LabError):
    """The URL does not lead to an OpenAI-compatible server this app can measure (one sentence why)."""


def root_url(url: str) -> str:
    """The server's root from what a person pastes: `http://host:8000`, `http://host:8000/v1/`, or a
    router's path prefix `https://gw/team-a/v1` (-> `https://gw/team-a`). ConfigError for an address
    that is not http(s), or that carries a password or a query (the key has its own field)."""
    text = (url or "").strip()
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number in range
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(say("'{url}' is not a server address: give one like http://127.0.0.1:8000 (http or "
                              "https).", url=text))
    if parts.username or parts.password or parts.query or parts.fragment:
        host = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")  # a hostname: `ok` above
        raise ConfigError(say("Give the address without a user name, password or ?query (for example "
                              "{plain}): a key goes in the API key field, which is never saved.",
                              plain=urlunsplit((parts.scheme, host, parts.path, "", ""))))
    path = parts.path.rstrip("/").removesuffix("/v1").rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def v1(base_url: str) -> str:
    """The OpenAI API's base (`…/v1`) of a server's root (tolerates a root already ending in /v1)."""
    return base_url.rstrip("/").removesuffix("/v1") + "/v1"


@dataclass(frozen=True)
class Endpoint:
    """What a server at a URL says about itself."""

    base_url: str  # its root: no /v1, no secrets
    models: dict[str, int | None]  # model id -> max_model_len (None when the card does not say)
    vllm: bool  # its model cards or /metrics are vLLM's
    metrics: bool  # vLLM's counters are readable at base_url/metrics
    metrics_said: str = field(default="")  # why not, when they are not (a Message)
    version: str | None = None  # GET /version's, when it answers
    # The KV cache's capacity as vLLM's /metrics states it (cache_config_info): what the pages' defaults
    # follow, since this machine's cores or GPUs say nothing about that server's
    kv_capacity_tokens: int | None = None

    @property
    def on_this_machine(self) -> bool:
        """A loopback address: the server shares this machine, so its hardware is this one's."""
        host = (urlsplit(self.base_url).hostname or "").lower()
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _why(e: httpx.HTTPError) -> str:
    """The error's own words, without the errno ("[Errno 111] Connection refused" -> "Connection refused")."""
    return re.sub(r"^\[Errno -?\d+\]\s*", "", str(e)) or type(e).__name__


def _unreachable(url: str, e: httpx.HTTPError) -> EndpointError:
    """A connection that failed, said by what a person checks first."""
    cause = e.__cause__ or e.__context__
    if isinstance(e, EndlessAnswer):
        return EndpointError(say("{url} kept sending its answer to GET {path} for {s:g} s without finishing it, so the "
                                 "app stopped waiting: check that this is the server's address and that the server "
                                 "is not stuck.", url=url, path=urlsplit(e.url).path, s=e.seconds))
    if isinstance(cause, ssl.SSLError) or "SSL" in _why(e) or "CERTIFICATE" in _why(e).upper():
        return EndpointError(say("The TLS handshake with {url} failed ({why}): check http versus https and that the "
                                 "server's certificate is trusted here.", url=url, why=_why(e)))
    if isinstance(e, httpx.TimeoutException) and not isinstance(e, httpx.ConnectTimeout):
        return EndpointError(say("{url} accepted the connection but sent no answer within {s:g} s: check that it is "
                                 "the server's address, and that the server is not stuck.", url=url, s=TIMEOUT_S))
    return EndpointError(say("Nothing answers at {url} ({why}): check the address and port, and that the server "
                             "is running and reachable from this machine.", url=url, why=_why(e)))


def discover(url: str, api_key: str | None = None) -> Endpoint:
    """The server at `url` (see root_url) as it describes itself; EndpointError (one sentence) when it
    is not there, refuses the key, or is not an OpenAI-compatible server."""
    base = root_url(url)
    models_url = v1(base) + "/models"
    with httpx.Client(timeout=TIMEOUT_S, trust_env=False, headers=_headers(api_key)) as client:
        try:
            resp = get_within(client, models_url)
        except httpx.HTTPError as e:
            raise _unreachable(base, e) from None
        if resp.status_code in (401, 403):
            raise EndpointError(
                say("The server at {url} refused the API key (HTTP {code}): enter the key it was started with "
                    "(vLLM's --api-key).", url=base, code=resp.status_code) if api_key else
                say("The server at {url} asks for an API key (HTTP {code}): enter it in the API key field.",
                    url=base, code=resp.status_code))
        cards = _model_cards(resp)
        if cards is None:
            got = say("HTTP {code}", code=resp.status_code) if resp.status_code != 200 else \
                say("a {kind} page", kind=resp.headers.get("content-type", "").split(";")[0] or "non-JSON")
            raise EndpointError(say("{url} answers, but not as an OpenAI-compatible server (GET {models} gave {got}): "
                                    "give the address of the vLLM server or of its router, like http://host:8000 or "
                                    "https://gateway/prefix/v1.", url=base, models=models_url, got=got))
        if not cards:
            raise EndpointError(say("The server at {url} serves no model yet: wait until it has loaded one, then "
                                    "connect again.", url=base))
        models = {str(c["id"]): c.get("max_model_len") if isinstance(c.get("max_model_len"), int) else None
                  for c in cards}
        metrics, metrics_said, text = _metrics(client, base)
        version = _version(client, base)
    vllm = metrics or any(c.get("owned_by") == "vllm" for c in cards)
    tokens = capacity(text).get("kv_capacity_tokens") if text else None
    return Endpoint(base, models, vllm, metrics, metrics_said, version, round(tokens) if tokens else None)


def _model_cards(resp: httpx.Response) -> list[dict] | None:
    """The model cards of an OpenAI-style GET /v1/models answer; None when it is not one."""
    if resp.status_code != 200:
        return None
    try:
        data = resp.json()["data"]
    except (KeyError, TypeError, ValueError):
        return None
    if not isinstance(data, list) or not all(isinstance(c, dict) and "id" in c for c in data):
        return None
    return data


def _metrics(client: httpx.Client, base: str) -> tuple[bool, str, str]:
    """(readable, why not, the text when readable) for base/metrics. A router (vLLM production-stack, llm-d) or
    a gateway often publishes its own metrics or none: the runs still work, without vLLM's counters."""
    url = base + "/metrics"
    try:
        resp = get_within(client, url)
    except EndlessAnswer as e:
        return False, say("{url} kept sending for {s:g} s without finishing its answer: the charts of vLLM's counters "
                          "and the server's token count are left out.", url=url, s=e.seconds), ""
    except httpx.HTTPError as e:
        return False, say("{url} did not answer ({why}): the charts of vLLM's counters and the server's token count "
                          "are left out.", url=url, why=_why(e)), ""
    if resp.status_code in (401, 403):
        return False, say("{url} refuses this key (HTTP {code}): the charts of vLLM's counters and the server's token "
                          "count are left out.", url=url, code=resp.status_code), ""
    if resp.status_code != 200:
        return False, say("{url} answers HTTP {code} (a router or gateway often hides vLLM's /metrics): the charts "
                          "of vLLM's counters and the server's token count are left out.",
                          url=url, code=resp.status_code), ""
    if PROMETHEUS_PREFIX not in resp.text:
        return False, say("{url} holds none of vLLM's counters (likely a router's or gateway's own metrics): the "
                          "charts of vLLM's counters and the server's token count are left out.", url=url), ""
    return True, "", resp.text


def _version(client: httpx.Client, base: str) -> str | None:
    """vLLM's GET /version ({"version": "0.11.0"}); None when it does not answer so."""
    try:
        resp = get_within(client, base + "/version")
        v = resp.json().get("version") if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return str(v) if v else None


def masked(api_key: str | None) -> str:
    """How a key is shown: its presence and length class, never a character of it."""
    return "••••••••" if api_key else ""


# -- is it still there -------------------------------------------------------------------------------
CHECK_S = 3.0  # a server without readable /metrics: GET /v1/models at most this often, for every viewer
DOWN_AFTER_S = 3.0  # refused, reset or an error page for this long: it stopped answering
SILENT_AFTER_S = 20.0  # no answer in time: a busy server can be slow to answer /metrics, so only this long


def clock(t: float) -> str:
    """A moment as people read it off a wall clock (HH:MM:SS, this machine's time zone)."""
    return time.strftime("%H:%M:%S", time.localtime(t))


class Watch:
    """Whether a server at a URL still answers, judged once for every viewer: from the telemetry's /metrics
    scrape that already runs each tick (`heard`), or, for a server without readable /metrics, from a
    GET /v1/models at most every CHECK_S (`probe`). A failure must last DOWN_AFTER_S (SILENT_AFTER_S for a
    timeout) before the server counts as down, so one slow scrape under load is not an outage; an action
    that finds it refusing connections (`refused`) says so at once. `started` follows /metrics'
    process_start_time_seconds: a new value means the server restarted. Thread-safe."""

    def __init__(self, base_url: str, api_key: str | None, started: float | None):
        self.base_url = base_url
        self._key = api_key  # sent with each check, never shown
        self.started = started
        self.down_since: float | None = None  # when it stopped answering (the first failed check)
        self.why = ""  # what the failed checks saw
        self._whole: str | None = None  # or a whole sentence that says it better (see failed)
        self._failing: tuple[float, bool] | None = None  # (first failure, all of them timeouts)
        self._last_probe = 0.0
        self._tried = 0.0  # the last discovery tried while it was down
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never the key
        return f"Watch({self.base_url!r}, down_since={self.down_since})"

    @property
    def answering(self) -> bool:
        return self.down_since is None

    def said(self) -> str:
        """The one sentence while it does not answer ("" while it does)."""
        if self.down_since is None:
            return ""
        if self._whole is not None:  # its own sentence says what happened and what to do
            return self._whole
        return say("The server at {url} stopped answering at {time} ({why}): check that it still runs, or "
                   "disconnect on the Server page.", url=self.base_url, time=clock(self.down_since), why=self.why)

    def heard(self, t: float, resp: httpx.Response | None, error: httpx.HTTPError | None) -> str | None:
        """One check's outcome at epoch `t`: "down" when the server has just stopped answering; "back" when it
        answers while down (at most every CHECK_S: the caller discovers it anew, then calls `recovered` or
        `failed`); "restarted" when it answers as a new process without a pause seen; else None."""
        with self._lock:
            if resp is not None and resp.status_code == 200:
                self._failing = None
                if self.down_since is not None:
                    if t - self._tried < CHECK_S:
                        return None
                    self._tried = t
                    return "back"
                new = process_start(resp.text) if resp.url.path.endswith("/metrics") else None
                restarted = new is not None and self.started is not None and new != self.started
                self.started = new if new is not None else self.started
                return "restarted" if restarted else None
            silent = error is not None and isinstance(error, httpx.TimeoutException) and not isinstance(
                error, httpx.ConnectTimeout)
            why = say("HTTP {code}", code=resp.status_code) if resp is not None else _why(error) if error else ""
            if self._failing is None:
                self._failing = (t, silent)
            first, all_silent = self._failing[0], self._failing[1] and silent
            self._failing = (first, all_silent)
            if self.down_since is None and t - first >= (SILENT_AFTER_S if all_silent else DOWN_AFTER_S):
                self.down_since, self.why = first, why
                return "down"
            if self.down_since is not None:  # no answer at all again: said as such, not as a failed discovery
                self.why, self._whole = why, None
            return None

    def recovered(self, started: float | None) -> None:
        """It answers again and was discovered anew (its process start, when it says): up from now."""
        with self._lock:
            self.down_since, self.why, self._whole = None, "", None
            self.started = started if started is not None else self.started

    def failed(self, why: str) -> None:
        """It answers, but cannot be measured (no model loaded yet, the key refused now): down still, said so."""
        with self._lock:
            self.down_since, self.why, self._whole = self.down_since or time.time(), str(why), why
            self._failing = (self.down_since, False)

    def refused(self, error: httpx.HTTPError) -> bool:
        """An action just failed to connect: nothing listens there, so it is down from now (True) without
        waiting out DOWN_AFTER_S; a timeout proves less, and changes nothing (False)."""
        if not isinstance(error, (httpx.ConnectError, httpx.RemoteProtocolError)):
            return False
        with self._lock:
            if self.down_since is None:
                self.down_since, self.why = time.time(), _why(error)
                self._failing = (self.down_since, False)
            return True

    def probe(self, now: float, metrics: bool, force: bool = False) -> str | None:
        """Check it ourselves (the scrape does not): GET /metrics or /v1/models, at most every CHECK_S
        unless `force`; what `heard` returns."""
        if not force and now - self._last_probe < CHECK_S:
            return None
        self._last_probe = now
        url = self.base_url + "/metrics" if metrics else v1(self.base_url) + "/models"
        try:
            with httpx.Client(timeout=TIMEOUT_S, trust_env=False, headers=_headers(self._key)) as client:
                resp = get_within(client, url)
        except httpx.HTTPError as e:
            if force and self.refused(e):
                return "down"
            return self.heard(now, None, e)
        return self.heard(now, resp, None)


def reset_prefix_cache(base_url: str, api_key: str | None = None) -> bool:
    """Empty the server's prefix cache (POST /reset_prefix_cache, so repeats each start from a cold cache):
    True when it did. vLLM serves that route only with VLLM_SERVER_DEV_MODE=1 (0.32.0's
    entrypoints/serve/dev): elsewhere it is a 404, and False says the cache was left as it was."""
    url = base_url.rstrip("/").removesuffix("/v1") + "/reset_prefix_cache"
    try:
        with httpx.Client(timeout=TIMEOUT_S, trust_env=False, headers=_headers(api_key)) as client:
            return client.post(url).status_code == 200
    except httpx.HTTPError:
        return False
