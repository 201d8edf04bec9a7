"""ServerConfig: the vLLM flags the lab uses and the ones users reach for next, validated before
launch and rendered to an argv list, an environment, and the exact shell command a user can paste."""
from __future__ import annotations

import shlex
import sys
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import psutil

from engine.errors import ConfigError, ServerBusy
from engine.messages import Message, mark, say, say_n
from engine.observe import nvml

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
MAX_NUM_SEQS = 4096  # beyond this a typo would make vLLM allocate for millions of sequences
DTYPES = ("auto", "float16", "bfloat16", "float32")
LOAD_FORMATS = ("auto", "safetensors", "pt", "dummy")


def cpu_kv_flag(gib: float) -> str:
    """How the CPU build is told its KV cache's size, as a command line writes it: whole GiB as the variable
    VLLM_CPU_KVCACHE_SPACE (an integer), a fraction (a squeezed cache) as --kv-cache-memory-bytes."""
    gib = float(gib)
    return f"VLLM_CPU_KVCACHE_SPACE={int(gib)}" if gib.is_integer() else f"--kv-cache-memory-bytes {int(gib * 1024**3)}"


@dataclass(frozen=True)
class ServerConfig:
    model: str  # folder or hub id
    served_model_name: str | None = None  # defaults to `model`, as vLLM does
    dtype: str = "auto"
    max_model_len: int | None = 2048
    gpu_memory_utilization: float = 0.85  # GPU only: the fraction of GPU memory vLLM may take
    # CPU only: the KV cache's size, the CPU's stand-in for the fraction. Whole GiB reach vLLM as
    # VLLM_CPU_KVCACHE_SPACE (an integer); a fraction (0.01: a squeezed cache) as --kv-cache-memory-bytes.
    cpu_kvcache_gib: float = 2
    port: int = 9000
    host: str = "127.0.0.1"
    max_num_seqs: int | None = None
    enforce_eager: bool = False
    tensor_parallel_size: int = 1  # GPUs one copy of the model is split over, layer by layer (each GPU a slice)
    pipeline_parallel_size: int = 1  # ... split over, by groups of layers (vLLM's way across machines)
    data_parallel_size: int = 1  # whole copies, each taking its share of the requests
    gpus: tuple[int, ...] = ()  # which GPUs (CUDA_VISIBLE_DEVICES); () = all of them
    enable_prefix_caching: bool | None = None  # None: vLLM's default
    enable_prompt_tokens_details: bool = False  # usage.prompt_tokens_details.cached_tokens in every answer
    load_format: str = "auto"
    api_key: str | None = field(default=None, repr=False)  # reaches vLLM as VLLM_API_KEY, never argv or records
    extra_args: tuple[str, ...] = ()
    device: str = "cpu"  # "cuda" | "cpu": decides which memory knob applies

    @property
    def model_name(self) -> str:
        """The name clients put in requests."""
        return self.served_model_name or self.model

    @property
    def gpus_needed(self) -> int:
        """GPUs vLLM takes: each of the data-parallel copies is split tensor x pipeline ways."""
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    @classmethod
    def for_model(cls, spec: Any, device: str, **kw: Any) -> "ServerConfig":
        """The lab's defaults for a models.ModelSpec on a device (fp16 on CUDA as the lab, context capped
        at 2048), with `kw` (ServerConfig fields) on top; None values in kw keep the default."""
        base = dict(model=spec.path, served_model_name=spec.served_name, load_format=spec.load_format or "auto",
                    device=device, dtype="float16" if device == "cuda" else "auto",
                    max_model_len=min(2048, spec.max_len or 2048))
        return cls(**{**base, **{k: v for k, v in kw.items() if v is not None}})

    def with_changes(self, **kw: Any) -> "ServerConfig":
        return replace(self, **kw)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["extra_args"] = list(self.extra_args)
        d["gpus"] = list(self.gpus)
        if d.get("api_key"):
            d["api_key"] = "***"
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "ServerConfig":
        d = {k: v for k, v in d.items() if k in ServerConfig.__dataclass_fields__}
        d["extra_args"] = tuple(d.get("extra_args") or ())
        d["gpus"] = tuple(d.get("gpus") or ())
        return ServerConfig(**d)

    # -- rendering -------------------------------------------------------------------------
    def argv(self, python: str | None = None) -> list[str]:
        a = [python or sys.executable, "-m", API_SERVER_MODULE, "--model", self.model]
        if self.served_model_name:
            a += ["--served-model-name", self.served_model_name]
        if self.dtype != "auto":
            a += ["--dtype", self.dtype]
        if self.max_model_len:
            a += ["--max-model-len", str(self.max_model_len)]
        if self.device == "cuda":
            a += ["--gpu-memory-utilization", f"{self.gpu_memory_utilization:g}"]
        if self.max_num_seqs:
            a += ["--max-num-seqs", str(self.max_num_seqs)]
        if self.device == "cpu" and not self._whole_gib:
            a += cpu_kv_flag(self.cpu_kvcache_gib).split()
        if self.enforce_eager:
            a.append("--enforce-eager")
        if self.tensor_parallel_size != 1:
            a += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        if self.pipeline_parallel_size != 1:
            a += ["--pipeline-parallel-size", str(self.pipeline_parallel_size)]
        if self.data_parallel_size != 1:
            a += ["--data-parallel-size", str(self.data_parallel_size)]
        if self.enable_prefix_caching is True:
            a.append("--enable-prefix-caching")
        elif self.enable_prefix_caching is False:
            a.append("--no-enable-prefix-caching")
        if self.enable_prompt_tokens_details:
            a.append("--enable-prompt-tokens-details")
        if self.load_format != "auto":
            a += ["--load-format", self.load_format]
        a += ["--host", self.host, "--port", str(self.port)]
        return a + list(self.extra_args)

    def env(self) -> dict[str, str]:
        """Environment additions for the server process. The API key travels here (vLLM reads
        VLLM_API_KEY), never on the command line, which every user of the machine can read."""
        # the variable would override the flag (vLLM's CPU platform reads it last): only for whole GiB
        env = dict([cpu_kv_flag(self.cpu_kvcache_gib).split("=")]) if self.device == "cpu" and self._whole_gib else {}
        if self.device == "cuda" and self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in self.gpus)
        if self.api_key:
            env["VLLM_API_KEY"] = self.api_key
        return env

    @property
    def _whole_gib(self) -> bool:
        return float(self.cpu_kvcache_gib).is_integer()

    def shell_command(self) -> str:
        """What a user could paste into a terminal (with `python` as the interpreter, like the lab); the API
        key, if any, is shown as the variable it is read from."""
        env = " ".join(f"{k}={shlex.quote(v)}" if k != "VLLM_API_KEY" else f'{k}="$VLLM_API_KEY"'
                       for k, v in self.env().items())
        parts = [shlex.quote(x) for x in self.argv(python="python")]
        # One flag per line, the way the lab notebook writes it.
        lines, cur = [], parts[:3]
        for p in parts[3:]:
            if p.startswith("--"):
                lines.append(" ".join(cur))
                cur = [p]
            else:
                cur.append(p)
        lines.append(" ".join(cur))
        cmd = " \\\n    ".join(lines)
        return f"{env} {cmd}" if env else cmd

    # -- validation ------------------------------------------------------------------------
    def validate(self, model_max_len: int | None = None, known_flags: set[str] | None = None) -> None:
        """Raise ConfigError with one sentence for the first problem found; nothing is started."""
        if not self.model.strip():
            raise ConfigError(say("No model is selected: pick the embedded default, a local folder or a hub id."))
        check_port(self.port)
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(say(
                "GPU memory utilization {value:g} is outside (0, 1]: it is the fraction of GPU memory vLLM may use, "
                "e.g. 0.85.", value=self.gpu_memory_utilization))
        if self.device == "cpu" and not 0.001 <= self.cpu_kvcache_gib <= 512:
            raise ConfigError(say("CPU KV cache of {gib:g} GiB is not usable: give between 0.001 and 512 GiB, e.g. 2 "
                                  "(a fraction such as 0.01 squeezes the cache on purpose).", gib=self.cpu_kvcache_gib))
        if self.dtype not in DTYPES:
            raise ConfigError(say("dtype '{dtype}' is not one of {choices}.", dtype=self.dtype,
                                  choices=", ".join(DTYPES)))
        if self.load_format not in LOAD_FORMATS:
            raise ConfigError(say("load format '{load_format}' is not one of {choices}.", load_format=self.load_format,
                                  choices=", ".join(LOAD_FORMATS)))
        if self.max_model_len is not None:
            if self.max_model_len < 16:
                raise ConfigError(say("max-model-len {max_model_len} is too small: use at least a few hundred tokens.",
                                      max_model_len=self.max_model_len))
            if model_max_len and self.max_model_len > model_max_len:
                raise ConfigError(say(
                    "max-model-len {max_model_len} is above this model's limit of {limit} tokens: lower it to {limit} "
                    "or less.", max_model_len=self.max_model_len, limit=model_max_len))
        if self.max_num_seqs is not None and not 1 <= self.max_num_seqs <= MAX_NUM_SEQS:
            raise ConfigError(say("max-num-seqs {max_num_seqs} is outside 1 to {limit:,}: it is how many requests are "
                                  "decoded together (vLLM's default is 256 on a GPU).",
                                  max_num_seqs=self.max_num_seqs, limit=MAX_NUM_SEQS))
        self._check_parallel()
        refuse_extra_flags(self.extra_args)
        if known_flags is not None:
            for arg in self.extra_args:
                flag = arg.split("=", 1)[0]
                if flag.startswith("-") and flag not in known_flags:
                    raise ConfigError(say("vLLM has no flag '{flag}': check the spelling (see `--help` of the API "
                                          "server) or remove it.", flag=flag))

    def _check_parallel(self) -> None:
        sizes = (("tensor-parallel-size", self.tensor_parallel_size),
                 ("pipeline-parallel-size", self.pipeline_parallel_size),
                 ("data-parallel-size", self.data_parallel_size))
        for flag, size in sizes:
            if size < 1:
                raise ConfigError(say("{flag} must be at least 1.", flag=flag))
        if self.device != "cuda":
            if self.gpus_needed > 1 or self.gpus:
                raise ConfigError(say("vLLM runs on this machine's CPU: the parallel sizes and the GPU choice apply "
                                      "to GPUs, so leave them at 1 and all."))
            return
        present = [d["index"] for d in nvml.devices()]
        if not present:
            return  # nothing to check against (NVML unreadable): vLLM will say what it cannot find
        if missing := [g for g in self.gpus if g not in present]:
            raise ConfigError(say("GPU {gpu} is not on this machine (it has {gpus}): pick among those.",
                                  gpu=missing[0], gpus=", ".join(map(str, present))))
        if len(set(self.gpus)) != len(self.gpus):
            raise ConfigError(say("A GPU is picked twice: pick each one once."))
        have = len(self.gpus) or len(present)
        if self.gpus_needed > have:
            raise ConfigError(say_n(
                "tensor {tp} x pipeline {pp} x data {dp} needs {need} GPUs, and {have} is picked: pick more GPUs or "
                "lower a size.",
                "tensor {tp} x pipeline {pp} x data {dp} needs {need} GPUs, and {have} are picked: pick more GPUs "
                "or lower a size.", have, tp=self.tensor_parallel_size, pp=self.pipeline_parallel_size,
                dp=self.data_parallel_size, need=self.gpus_needed, have=have))


# Flags the free-text box refuses: what they do and where that setting lives instead. A dashboard a room
# can reach must not let a flag move the server off the port the app watches, expose it, put a secret on
# a command line every user of the machine can read, or load code and files named by whoever typed it.
_LISTEN = mark("where vLLM listens is set by the app (127.0.0.1, port SERVING_LAB_VLLM_PORT), so the app can "
               "watch the server and nobody else reaches it")
_CODE = mark("it loads Python code named on the command line, which a shared dashboard does not allow")
_TRUST = mark("it trusts code from the model folder or from requests; start vLLM yourself in a terminal if you "
              "trust that model")
_TLS = mark("the app talks to its server over plain HTTP on this machine; put TLS in front of the app instead")
_CORS = mark("which web pages may call the server is not for a shared dashboard to widen")
_REMOTE = mark("it sends data to or takes it from other machines")


def _own(field: str, option: str | None) -> Message:
    """Why a setting with a control of its own is refused among the extra flags: where that control is (the
    Server page's field, and `python -m engine serve`'s option where it has one)."""
    if option is None:
        return say("that setting has its own control, {field} on the Server page: set it there", field=mark(field))
    return say("that setting has its own control, {field} on the Server page or {option} of `python -m engine "
               "serve`: set it there", field=mark(field), option=option)


# The Server page's field and the CLI's option of each setting the app sets itself
OWN_CONTROLS: dict[str, tuple[str, str | None]] = {
    "--model": ("Model", "--model"), "--served-model-name": ("Served model name", None),
    "--max-model-len": ("Max model length (tokens)", "--max-model-len"),
    "--gpu-memory-utilization": ("GPU memory utilization", "--gpu-memory-utilization"),
    "--dtype": ("Data type", "--dtype"), "--max-num-seqs": ("Max requests in a batch (max-num-seqs)", "--max-num-seqs"),
    "--enforce-eager": ("Enforce eager (no graphs)", "--enforce-eager"),
    **dict.fromkeys(("--tensor-parallel-size", "-tp"), ("Tensor parallel size", "--tensor-parallel-size")),
    **dict.fromkeys(("--pipeline-parallel-size", "-pp"), ("Pipeline parallel size", "--pipeline-parallel-size")),
    **dict.fromkeys(("--data-parallel-size", "-dp"), ("Data parallel size", "--data-parallel-size")),
    "--enable-prefix-caching": ("Prefix caching", "--enable-prefix-caching"),
    "--no-enable-prefix-caching": ("Prefix caching", "--no-enable-prefix-caching"),
    "--load-format": ("Model", "--model"),  # the model picked sets it (the shape-only model: random weights)
}
REFUSED_EXTRA_FLAGS: dict[str, str] = {
    **dict.fromkeys(("--host", "--port", "--uds", "--root-path", "--grpc-port", "--headless", "--master-port",
                     "--data-parallel-address", "--data-parallel-rpc-port", "--data-parallel-supervisor-port"),
                    _LISTEN),
    "--api-key": mark("a key on the command line is visible to every user of this machine: use the API key "
                      "field, which reaches vLLM as VLLM_API_KEY"),
    "--hf-token": mark("a token on the command line is visible to every user of this machine: set HF_TOKEN in the "
                       "app's environment instead"),
    **dict.fromkeys(("--trust-remote-code", "--trust-request-chat-template", "--trust-request-mm-kwargs"), _TRUST),
    **dict.fromkeys(("--ssl-keyfile", "--ssl-certfile", "--ssl-ca-certs", "--ssl-cert-reqs", "--ssl-ciphers",
                     "--enable-ssl-refresh"), _TLS),
    **dict.fromkeys(("--allowed-origins", "--allowed-methods", "--allowed-headers", "--allow-credentials"), _CORS),
    "--allowed-local-media-path": mark("it lets requests read files on this machine"),
    **dict.fromkeys(("--middleware", "--tool-parser-plugin", "--reasoning-parser-plugin", "--io-processor-plugin",
                     "--worker-cls", "--worker-extension-cls", "--scheduler-cls", "--logits-processors"), _CODE),
    **dict.fromkeys(("--config", "--log-config-file"), mark("it reads settings from a file on this machine")),
    **dict.fromkeys(("--otlp-traces-endpoint", "--kv-transfer-config", "--kv-events-config", "--ec-transfer-config",
                     "--weight-transfer-config"), _REMOTE),
    **{flag: _own(*control) for flag, control in OWN_CONTROLS.items()},
}


def refuse_extra_flags(args: tuple[str, ...] | list[str]) -> None:
    """ConfigError for the first extra flag the policy above refuses. `--chat-template` is refused only
    with a file path (an inline Jinja template is fine)."""
    for i, arg in enumerate(args):
        flag, _, value = arg.partition("=")
        if flag in REFUSED_EXTRA_FLAGS:
            raise ConfigError(say("The extra flag {flag} is not accepted here: {why}.", flag=flag,
                                  why=REFUSED_EXTRA_FLAGS[flag]))
        if flag == "--chat-template":
            value = value or (args[i + 1] if i + 1 < len(args) else "")
            if "{" not in value:
                raise ConfigError(say("The extra flag --chat-template is accepted only as an inline template: a "
                                      "file path would let the server read files on this machine."))


def parse_extra_args(text: str) -> tuple[str, ...]:
    """Split a user's free-text extra flags the way a shell would, with a clear error on bad quoting."""
    try:
        return tuple(shlex.split(text or ""))
    except ValueError as e:
        raise ConfigError(say("The extra flags could not be read ({error}): check the quotes.", error=str(e))) from e


def check_port(port: int) -> None:
    """A port a server can listen on (the Server page's, the CLI's --port, a cluster's serve port), or its sentence."""
    if not 1 <= port <= 65535:
        raise ConfigError(say("Port {port} is not a valid port: pick a number between 1024 and 65535.", port=port))


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    changes: dict[str, Any] = field(default_factory=dict)


# The lab's settings, in the order the notebook meets them. (The share of GPU memory is a value, not a
# "%" in the template: gettext tools would take "85% of" for a printf placeholder.)
PRESETS: tuple[Preset, ...] = (
    Preset(mark("Lab default"),
           say("max-model-len 2048, {share:.0%} of GPU memory (the lab's first command)", share=0.85),
           {"max_model_len": 2048, "gpu_memory_utilization": 0.85}),
    Preset(mark("24 GB GPU"),
           say("max-model-len 1024, {share:.0%} of GPU memory (the lab's fallback for a 24 GB card)", share=0.75),
           {"max_model_len": 1024, "gpu_memory_utilization": 0.75}),
    Preset(mark("8 GB GPU"),
           say("max-model-len 1024, {share:.0%} of GPU memory (the lab's 8 GiB workaround)", share=0.34),
           {"max_model_len": 1024, "gpu_memory_utilization": 0.34}),
    Preset(mark("Tuning"),
           say("max-model-len 512, {share:.0%} of GPU memory (the lab's step 4)", share=0.90),
           {"max_model_len": 512, "gpu_memory_utilization": 0.90}),
)


def checked(base: ServerConfig, extra_flags: str = "", model_max_len: int | None = None,
            **settings: Any) -> ServerConfig:
    """`base` (a model's defaults: Lab.default_config) with a page's `settings` and the extra flags as
    typed, checked: a ConfigError says what is wrong."""
    cfg = base.with_changes(extra_args=parse_extra_args(extra_flags), **settings)
    cfg.validate(model_max_len=model_max_len)
    return cfg


def tuning_base(started: ServerConfig | None) -> ServerConfig:
    """The last started server's settings, which tuning changes (ServerBusy before any server started)."""
    if started is None:
        raise ServerBusy(say("Start the server once on the Server page: tuning reuses its model and other "
                             "settings."))
    return started


def tuning_configs(started: ServerConfig | None, device: str, rows: list[tuple[int, float]]) -> list[ServerConfig]:
    """The Tuning table's rows, (max-model-len, GPU memory fraction; on CPU the KV cache GiB), as the last
    started server's settings with those changes."""
    base = tuning_base(started)
    cpu = device == "cpu"
    return [base.with_changes(max_model_len=int(n), **({"cpu_kvcache_gib": float(mem)} if cpu else
                                                       {"gpu_memory_utilization": mem})) for n, mem in rows]


def gpu_choices() -> dict[int, str]:
    """{index: "0 · NVIDIA H200, 141 GB"} for the GPU picker; {} without an NVIDIA GPU."""
    return {g["index"]: f"{g['index']} · {g['name']}, {g['total'] / 1e9:,.0f} GB" for g in nvml.devices()}


@dataclass
class FitReport:
    """Weights + KV cache at these settings against the memory there is."""

    level: str  # "ok" | "warn" | "error"
    message: Message
    weights_gb: float | None = None
    kv_gb: float | None = None
    available_gb: float | None = None


def fit_check(cfg: ServerConfig, spec: Any, device: str) -> FitReport:
    """Whether `spec`'s model (an engine.serving.models.ModelSpec) fits at `cfg`'s settings on `device`: its
    weights and one full sequence's KV cache against the GPU's (each GPU's) or the free RAM's room."""
    shape = spec.shape
    if shape is None:
        return FitReport("ok", say("The model's size is unknown here; vLLM will report what fits when it starts."))
    dtype_bytes = 4 if cfg.dtype == "float32" else 2
    weights = shape.weight_bytes(dtype_bytes) / 1024**3
    per_seq = shape.kv_bytes_per_token(dtype_bytes) * (cfg.max_model_len or shape.max_len) / 1024**3
    if device == "cuda":
        # Per GPU: a copy of the model is split tensor x pipeline ways (weights and KV cache alike), and
        # the smallest GPU picked sets the room every slice gets. Data-parallel copies each hold the lot.
        split = cfg.tensor_parallel_size * cfg.pipeline_parallel_size
        gpus = [g for g in nvml.devices() if not cfg.gpus or g["index"] in cfg.gpus]
        total = min(g["total"] for g in gpus) / 1024**3 if gpus else 0
        budget = total * cfg.gpu_memory_utilization
        weights, per_seq = weights / split, per_seq / split
        kv_room = budget - weights - 1.0  # ~1 GiB for activations and CUDA graphs
        where = say("{fraction:.0%} of {total:.0f} GiB GPU memory", fraction=cfg.gpu_memory_utilization,
                    total=total) if split * cfg.data_parallel_size == 1 else \
            say("{fraction:.0%} of {total:.0f} GiB on each of {gpus} GPUs", fraction=cfg.gpu_memory_utilization,
                total=total, gpus=cfg.gpus_needed)
    else:
        total = psutil.virtual_memory().available / 1024**3
        budget = total
        kv_room = cfg.cpu_kvcache_gib
        where = say("{kv:g} GiB CPU KV cache ({total:.0f} GiB RAM free)", kv=cfg.cpu_kvcache_gib, total=total)
        if weights + kv_room + 1 > total:
            return FitReport("error", say("Weights ({weights:.1f} GiB) plus the KV cache ({kv:g} GiB) exceed the "
                                          "{total:.0f} GiB of free RAM: lower the KV cache size or pick a smaller "
                                          "model.", weights=weights, kv=kv_room, total=total),
                             weights, per_seq, total)
    if kv_room <= 0:
        return FitReport("error", say("The weights alone ({weights:.1f} GiB) do not fit in {where}: raise "
                                      "gpu-memory-utilization, use more GPUs, or pick a smaller model.",
                                      weights=weights, where=where), weights, per_seq, budget)
    seqs = kv_room / per_seq * (cfg.data_parallel_size if device == "cuda" else 1) if per_seq else float("inf")
    if seqs < 1:
        return FitReport("error", say("One full {max_len}-token sequence needs {per_seq:.2f} GiB of KV cache "
                                      "but only {kv:.2f} GiB is left in {where}: lower max-model-len or give vLLM "
                                      "more memory.", max_len=cfg.max_model_len, per_seq=per_seq, kv=kv_room,
                                      where=where),
                         weights, per_seq, budget)
    level = "warn" if seqs < 4 else "ok"
    if device == "cuda" and cfg.gpus_needed > 1:
        return FitReport(level, say("Weights {weights:.1f} GiB per GPU; KV cache room for about {seqs:,.0f} full "
                                    "{max_len}-token sequences in all, in {where}.", weights=weights, seqs=seqs,
                                    max_len=cfg.max_model_len, where=where), weights, per_seq, budget)
    return FitReport(level, say("Weights {weights:.1f} GiB; KV cache room for about {seqs:,.0f} full "
                                "{max_len}-token sequences in {where}.", weights=weights, seqs=seqs,
                                max_len=cfg.max_model_len, where=where), weights, per_seq, budget)
