"""Which server a run aims at (`Target`: the app's own, or one at a URL), what it would refuse, and how a
run is stamped with what it ran on."""
from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

import psutil

from engine.errors import ConfigError, ServerBusy
from engine.measure.judge import ceiling
from engine.measure.load.spec import LoadSpec
from engine.messages import say
from engine.observe import hardware
from engine.observe.telemetry import read_process_start
from engine.results.records import RunResult
from engine.serving import endpoint, proctree
from engine.serving.config import ServerConfig
from engine.serving.endpoint import Endpoint
from engine.serving.server import READY, VLLMServer


@dataclass(frozen=True)
class Target:
    """The server a load goes to: one this app started (`config` set) or one at a URL it did not
    (`endpoint` set by `at`: what it said about itself). The key is sent with each request and never
    stored with a run nor shown (repr leaves it out)."""

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    max_model_len: int | None = None  # longest prompt + answer it accepts; None when it does not say
    config: ServerConfig | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None  # vLLM's own "maximum concurrency" at startup
    # Which start of the server this is (engine.measure.judge.warmth): its host, pid and start time for one this
    # app started, its URL and process start time (from /metrics) for one at a URL; None: it does not say
    instance: str | None = None
    endpoint: Endpoint | None = None
    started: float | None = None  # a server at a URL: its process start (epoch s, /metrics), if it says
    # its process on this machine, whose tree's CPU is the run's own (engine.observe.disturbance); None: elsewhere
    pid: int | None = None

    @property
    def on_this_machine(self) -> bool:
        """A server this app started, or one at a loopback address: it shares this machine's CPU and GPUs."""
        return self.config is not None or (self.endpoint is not None and self.endpoint.on_this_machine)

    def same_server(self, other: "Target") -> bool:
        """Two addresses of one server (localhost and 127.0.0.1 are the same machine)."""
        if self.base_url.rstrip("/") == other.base_url.rstrip("/"):
            return True
        a, b = urlsplit(self.base_url), urlsplit(other.base_url)
        return (self.on_this_machine and other.on_this_machine and a.port == b.port
                and a.path.rstrip("/") == b.path.rstrip("/"))

    @property
    def model_name(self) -> str:
        """The name requests carry (as ServerConfig calls it)."""
        return self.model

    @classmethod
    def of(cls, server: VLLMServer) -> "Target":
        """The ready server this app started; ServerBusy when there is none."""
        snap = server.snapshot()
        cfg = snap.config
        if snap.state != READY or cfg is None:
            raise ServerBusy(say("The vLLM server is not running: start it on the Server page first."))
        return cls(cfg.base_url, cfg.model_name, cfg.api_key, cfg.max_model_len, cfg, snap.kv_cache_tokens,
                   snap.max_concurrency, instance=_instance_of(snap.pid), pid=snap.pid)

    @classmethod
    def at(cls, url: str, model: str | None = None, api_key: str | None = None) -> "Target":
        """A running OpenAI-compatible server at `url` (its root, /v1 or a router's path prefix), serving
        `model` (default: the first it lists); an EndpointError says why it cannot be measured."""
        found = endpoint.discover(url, api_key)
        names = list(found.models)
        model = model or names[0]
        if model not in names and len(names) > 1:
            raise ConfigError(say("The server at {url} serves no model named '{model}': pass --model-name {first} "
                                  "(it serves {names}).", url=found.base_url, model=model, first=names[0],
                                  names=", ".join(names)))
        if model not in names:
            raise ConfigError(say("The server at {url} serves no model named '{model}': pass --model-name {first}.",
                                  url=found.base_url, model=model, first=names[0]))
        started = read_process_start(found.base_url, api_key)
        return cls(found.base_url, model, api_key, found.models[model], endpoint=found,
                   kv_cache_tokens=found.kv_capacity_tokens, started=started,
                   pid=_listener(urlsplit(found.base_url).port) if found.on_this_machine else None,
                   instance=None if started is None else f"{found.base_url.rstrip('/')} started {started:.2f}")

    def again(self, since: float | None) -> tuple["Target", str]:
        """A server at a URL that answers again after it stopped at `since` (None: it answered throughout, as a
        new process): discovered anew, since it may have restarted with another model or max-model-len, and
        the sentence that says what changed. Its model when it still serves it, else the first it lists; an
        EndpointError or ConfigError when it cannot be measured."""
        try:
            new = Target.at(self.base_url, self.model, self.api_key)
        except ConfigError:  # it serves other models now
            new = Target.at(self.base_url, None, self.api_key)
        url = self.base_url
        if since is None:
            return new, say("The server at {url} restarted at {start} (serving {model}): the first batch of each "
                            "size is cold again.", url=url, start=endpoint.clock(new.started or time.time()),
                            model=new.model)
        at = endpoint.clock(since)
        if new.model != self.model:
            return new, say("The server at {url} answers again (it stopped at {time}), now serving {model} instead "
                            "of {old}: every page measures {model} from now on.", url=url, time=at, model=new.model,
                            old=self.model)
        if new.started is None or self.started is None:
            return new, say("The server at {url} answers again (it stopped at {time}); whether it restarted is "
                            "unknown, since its /metrics do not say when its process started.", url=url, time=at)
        if new.started != self.started:
            return new, say("The server at {url} answers again: it restarted at {start} (it stopped answering at "
                            "{time}), so the first batch of each size is cold again.", url=url,
                            start=endpoint.clock(new.started), time=at)
        return new, say("The server at {url} answers again, as the same process: it was out of reach from {time}, "
                        "not restarted.", url=url, time=at)

    def aim(self, spec: LoadSpec) -> LoadSpec:
        """`spec` sent here, checked against what this server accepts (ConfigError)."""
        spec = replace(spec, base_url=self.base_url, model=self.model, api_key=self.api_key)
        spec.validate(self.max_model_len)
        served = (set(self.endpoint.models) if self.endpoint is not None else
                  {self.model, *(_lora_names(self.config.extra_args) if self.config is not None else ())})
        if unknown := [m for m in spec.lora_modules if m not in served]:
            raise ConfigError(say("The server at {url} serves no model '{name}' (it serves {served}): start it with "
                                  "--enable-lora --lora-modules {name}=PATH, or name an adapter it serves.",
                                  url=self.base_url, name=unknown[0], served=", ".join(sorted(served))))
        return spec

    def stamp(self, result: RunResult) -> RunResult:
        """Mark a run with what it ran on, so a saved run explains itself anywhere."""
        result.model = self.model
        if self.config is None:  # a server at a URL: its address (no secrets in it, see endpoint.root_url)
            result.extra.server.endpoint, result.extra.server.keyed = self.base_url, bool(self.api_key)
        # A server at a URL on another machine: only what it says of itself (a loopback one shares this
        # machine, whose hardware is then its own: what the ceiling and the report need)
        elsewhere = not self.on_this_machine
        if self.endpoint is not None:
            version = self.endpoint.version
            result.versions = result.versions or ({"vllm": version} if version else {})
        result.hardware = result.hardware or ({} if elsewhere else hardware.describe())
        result.versions = result.versions or ({} if elsewhere else hardware.versions())
        if self.config is not None:
            result.config = self.config.to_dict()
            result.command = self.config.shell_command()
            result.extra.server.kv_cache_tokens = self.kv_cache_tokens
            result.extra.server.max_concurrency = self.max_concurrency
            result.extra.server.placeholder_text = self.config.load_format == "dummy"
            if size := ceiling.server_model_bytes(result.config):  # what each decode step reads: its ceiling
                result.extra.model_size.weights, result.extra.model_size.kv_per_token = size.weights, size.kv_per_token
        return result


def _lora_names(args: tuple[str, ...]) -> list[str]:
    """The adapters' names a server this app starts serves from its extra flags: `--lora-modules a=PATH b=PATH`
    (or vLLM's JSON form, '{"name": "a", "path": ...}')."""
    names: list[str] = []
    words = [w for a in args for w in (a.split("=", 1) if a.startswith("--lora-modules=") else [a])]
    for i, w in enumerate(words):
        if w != "--lora-modules":
            continue
        for item in words[i + 1:]:
            if item.startswith("--"):
                break
            try:
                obj = json.loads(item)
                names.append(str(obj["name"]) if isinstance(obj, dict) and "name" in obj else item.split("=")[0])
            except ValueError:
                names.append(item.split("=", 1)[0])
    return names


def _instance_of(pid: int | None) -> str | None:
    """A process this app started, told from a later one with its pid recycled (as proctree does)."""
    if pid is None:
        return None
    try:
        return f"{socket.gethostname()} pid {pid} started {proctree.since_boot(psutil.Process(pid)):.2f} s after boot"
    except psutil.Error:
        return None


def _listener(port: int | None) -> int | None:
    """The process listening on `port` of this machine (a server at a loopback URL), if it may be seen."""
    try:
        return next((c.pid for c in psutil.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN
                     and c.laddr and c.laddr.port == port and c.pid), None) if port else None
    except psutil.Error:
        return None


def check_url(url: str) -> str:
    """The URL of a server to measure, or ConfigError with one sentence."""
    endpoint.root_url(url)
    return url
