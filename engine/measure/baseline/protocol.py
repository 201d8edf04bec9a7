"""What the naive baseline's two processes agree on: what to run (NaiveSpec), the dtype rule, the errors a user
can cause, and sentences carried across the pipe. See docs/measuring.md#naive-baseline."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.errors import ConfigError, LabError
from engine.messages import Message, say
from engine.results.records import RunResult
from engine.serving import models

MODES = ("sequential", "static-batch")
DTYPES = ("auto", "float16", "bfloat16", "float32")
# dtype "auto" on CPU (measured on the dev machine: 2-core AMD EPYC with avx512_bf16, no AMX, torch 2.13,
# SmolLM2-135M-Instruct, 32 greedy tokens after a warm-up, three alternating rounds on an idle machine):
#   one prompt:        bfloat16 24.4-25.7 tok/s  vs  float32 16.4-16.6 tok/s  (~1.5x)
#   batch of 3 prompts: bfloat16 62.6-63.9 tok/s vs  float32 22.5-23.6 tok/s  (~2.7x)
# float16 on CPU was no faster than bf16 and erratic. bf16 only pays where the CPU has native bf16
# (avx512_bf16 or AMX); elsewhere torch emulates it and float32 is the fast one. The worker applies this
# rule and records the reason in RunResult.extra.naive.dtype_reason.
CPU_DTYPE_BF16_REASON = ("bfloat16: this CPU has native bf16 (avx512_bf16/AMX), where bf16 measured ~1.5x "
                         "(1 prompt) to ~2.7x (batch of 3) faster than float32")
CPU_DTYPE_FP32_REASON = "float32: this CPU has no native bf16 (avx512_bf16/AMX), so bf16 would be emulated and slower"
CUDA_AUTO_DTYPE = "float16"  # the lab's choice (dtype=torch.float16)


# -- errors a user can cause -------------------------------------------------------------------
class NaiveError(LabError):
    """A naive-baseline run failed. ``result`` holds what completed before the failure (or None)."""

    result: RunResult | None = None


class ModelNotFound(NaiveError):
    """The model folder is missing or is not a Hugging Face model folder."""


class OutOfMemory(NaiveError):
    """The model or its KV cache did not fit in GPU memory (or RAM on CPU)."""


class PromptTooLong(NaiveError):
    """A prompt plus the token budget exceeds what the model allows."""


class WorkerFailed(NaiveError):
    """The worker process crashed or could not start (message carries the cause from its log)."""


ERROR_KINDS: dict[str, type[NaiveError]] = {
    "model": ModelNotFound,
    "oom": OutOfMemory,
    "too_long": PromptTooLong,
    "setup": WorkerFailed,
    "other": WorkerFailed,
}


class Fail(Exception):
    """What the worker raises and reports; the parent turns it into a NaiveError subclass by its kind (ERROR_KINDS)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind, self.message = kind, message


# -- sentences across the pipe ------------------------------------------------------------------
# The worker's stages and errors are Messages; JSON carries their English as text and, beside it, what
# `wire` makes of them, from which `heard` makes the same Message again in this process (so a page can
# say a stage or a failure in the viewer's language).
def wire(text: object) -> dict | None:
    """A Message as JSON-able data (template, plural, n, values; values that are Messages nested)."""
    if not isinstance(text, Message):
        return None
    values = {k: wire(v) if isinstance(v, Message) else v for k, v in text.values.items()}
    return {"say": [text.template, text.plural, text.n, values]}


def _unwire(data: dict) -> Message:
    template, plural, n, values = data["say"]
    return Message(template, plural, n, {k: _unwire(v) if isinstance(v, dict) and "say" in v else v
                                         for k, v in values.items()})


def heard(text: str | None, said: object) -> str | None:
    """`text` from the worker as the Message it was made as, when `said` rebuilds exactly that text."""
    if isinstance(said, dict) and text is not None:
        try:
            again = _unwire(said)
        except Exception:  # noqa: BLE001 - a garbled line is shown as the text it carried
            return text
        if again == text:
            return again
    return text


# -- what to run -------------------------------------------------------------------------------
@dataclass
class NaiveSpec:
    model_path: str
    prompts: list[str]
    max_new_tokens: int = 200  # the lab's value
    temperature: float = 0.7  # the lab's value; > 0 means do_sample=True, 0 means greedy
    mode: str = "sequential"  # "sequential" | "static-batch"
    device: str = "auto"  # "auto" (cuda if available, else cpu) | "cuda" | "cuda:1" | "cpu"
    # "auto" (float16 on CUDA; on CPU bfloat16 where the CPU has native bf16, else float32) | "float16" |
    # "bfloat16" | "float32"
    dtype: str = "auto"
    seed: int = 0
    random_weights: bool = False  # shape-only: from_config + random init on the device; tokenizer from the folder
    scenario: str = ""
    label: str = ""
    # generate() over every shape of the run first (not recorded; see warmup_plan); False = the lab as written
    warmup: bool = True
    model_name: str = ""  # what charts call the model; defaults to the folder's name

    @property
    def kind(self) -> str:
        return "naive" if self.mode == "sequential" else "static-batch"

    def validate(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(say("Unknown naive mode '{mode}': choose one of {modes}.", mode=self.mode,
                                  modes=", ".join(MODES)))
        if self.dtype not in DTYPES:
            raise ConfigError(say("Unknown dtype '{dtype}': choose one of {dtypes}.", dtype=self.dtype,
                                  dtypes=", ".join(DTYPES)))
        if not self.prompts or any(not isinstance(p, str) or not p.strip() for p in self.prompts):
            raise ConfigError(say("The naive baseline needs at least one prompt, and no empty ones: add a prompt."))
        if int(self.max_new_tokens) < 1:
            raise ConfigError(say("max_new_tokens must be at least 1 (got {n}): raise it.", n=self.max_new_tokens))
        if self.temperature < 0:
            raise ConfigError(say("temperature must be 0 or more (got {t}): 0 means greedy.", t=self.temperature))
        dev = self.device
        if not (dev in ("auto", "cpu", "cuda") or (dev.startswith("cuda:") and dev[5:].isdigit())):
            raise ConfigError(say("Unknown device '{device}': use auto, cpu, cuda or cuda:N.", device=dev))

    def display_name(self) -> str:
        return self.model_name or Path(self.model_path).name or self.model_path

    def default_scenario(self) -> str:
        n = len(self.prompts)
        return self.scenario or (f"naive-{n}-sequential" if self.mode == "sequential" else f"static-batch-{n}")

    def default_label(self) -> str:
        if self.label:
            return self.label
        return (say("Naive transformers (sequential)") if self.mode == "sequential"
                else say("Static batch (transformers, {n} at once)", n=len(self.prompts)))


# -- checks that need no torch -----------------------------------------------------------------
def check_model_folder(spec: NaiveSpec) -> Path:
    """Fail fast, before a process starts, when the folder cannot be what the worker needs."""
    try:
        return models.check_folder(spec.model_path, weights=not spec.random_weights, tokenizer=True)[0]
    except models.ModelFolderError as e:
        text = str(e)  # kept as the Message it was raised with, where it was one
        raise ModelNotFound(e.args[0] if len(e.args) == 1 and e.args[0] == text else text) from e
