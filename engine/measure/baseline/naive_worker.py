"""The naive baseline's worker process (`python -m engine.measure.baseline.naive_worker`): the only one that
imports torch; it never outlives its run. See docs/measuring.md#naive-baseline."""
from __future__ import annotations

import gc
import json
import os
import select
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from engine.measure.load.lifeline import die_with_parent
from engine.measure.baseline.protocol import Fail, wire
from engine.measure.baseline.torch_device import (describe_device, is_oom, memory_snapshot, oom_sentence,
                                                  resolve_device, resolve_dtype)
from engine.messages import say
from engine.results.records import RequestRecord

ORPHAN_EXIT_CODE = 70


class Emitter:
    """JSON lines on the real stdout; fd 1 itself now points at stderr, so stray prints can't corrupt it."""

    def __init__(self) -> None:
        sys.stdout.flush()
        self._out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self._lock = threading.Lock()
        self._last_stage = 0.0

    def __call__(self, ev: str, **data: Any) -> None:
        line = json.dumps({"ev": ev, **data}, default=str)
        with self._lock:
            try:
                self._out.write(line + "\n")
                self._out.flush()
            except (BrokenPipeError, OSError):  # the parent is gone
                os._exit(ORPHAN_EXIT_CODE)

    def stage(self, text: str, throttle_s: float = 0.0) -> None:
        now = time.monotonic()
        if throttle_s and now - self._last_stage < throttle_s:
            return
        self._last_stage = now
        self("stage", text=text, said=wire(text))


def _watch_parent(ppid: int) -> None:
    """Exit when stdin hits EOF (the parent closed it or died) or the parent pid changes (re-parented)."""

    def loop() -> None:
        fd = sys.stdin.fileno()
        while True:
            try:
                ready, _, _ = select.select([fd], [], [], 1.0)
                if ready and not os.read(fd, 4096):
                    os._exit(ORPHAN_EXIT_CODE)
            except OSError:
                os._exit(ORPHAN_EXIT_CODE)
            if os.getppid() != ppid:
                os._exit(ORPHAN_EXIT_CODE)

    threading.Thread(target=loop, daemon=True, name="parent-watch").start()


def _read_spec() -> dict:
    buf = b""
    fd = sys.stdin.fileno()
    while not buf.endswith(b"\n"):
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
    if not buf.strip():
        sys.exit(ORPHAN_EXIT_CODE)
    return json.loads(buf)


def make_clock(torch: Any, t0: float, batch: int, eos: set[int], on_step: Callable[[int], None] | None):
    """A generate() streamer that timestamps every decoding step per sequence.

    generate() calls put() first with the prompt ids, then once per step with the new token of each
    row ((batch,) on the CPU). A row's token times stop after it emits an EOS token; later puts for
    that row are padding and are not counted."""
    from transformers.generation.streamers import BaseStreamer

    class Clock(BaseStreamer):
        def __init__(self) -> None:
            self.prompt_seen = False
            self.times: list[list[float]] = [[] for _ in range(batch)]
            self.finished = [False] * batch
            self.steps = 0

        def put(self, value: Any) -> None:
            now = time.perf_counter() - t0
            if not self.prompt_seen:
                self.prompt_seen = True
                return
            toks = value.reshape(-1).tolist()
            self.steps += 1
            for i, tok in enumerate(toks[:batch]):
                if self.finished[i]:
                    continue
                self.times[i].append(now)
                if tok in eos:
                    self.finished[i] = True
            if on_step:
                on_step(self.steps)

        def end(self) -> None:
            pass

    return Clock()


def warmup_plan(lengths: list[int], max_new: int, max_len: int, mode: str) -> list[tuple[list[int], int]]:
    """The warm-up generate() calls, as (prompt indices, tokens): together they meet every shape the
    measured run will. The first call at a new sequence length is slow on CUDA (cuDNN attention builds
    a plan per length; on an H200 the first 200-token request took 13.6 s after a 2-token warm-up and
    5.2 s once every length had been seen), so anything shorter bills that cost to request 1.

    Static batch: the same padded batch, full length. Sequential: one token at each prompt length (the
    prefill shapes), then the shortest prompt long enough to reach the longest prompt's last token."""
    if mode == "static-batch":
        return [(list(range(len(lengths))), max_new)]
    plan: list[tuple[list[int], int]] = []
    seen: set[int] = set()
    for i, L in enumerate(lengths):
        if L not in seen:
            seen.add(L)
            plan.append(([i], 1))
    short = min(range(len(lengths)), key=lengths.__getitem__)
    n = max_new + max(lengths) - lengths[short]
    if max_len:
        n = min(n, max_len - lengths[short])
    plan.append(([short], n))
    return plan


def count_generated(ids: list[int], eos: set[int]) -> int:
    """Generated tokens up to and including the first EOS (what vLLM's usage counts); padding after it isn't."""
    for i, t in enumerate(ids):
        if t in eos:
            return i + 1
    return len(ids)


# -- the run -----------------------------------------------------------------------------------
def run(spec: dict, emit: Emitter) -> None:
    """The whole run in the lab's order: the stack, the device, the prompts, the model, a warm-up, the measured
    requests (one at a time, or one padded batch), then the lab's cleanup cell. A Fail is the user's sentence."""
    torch, transformers = _import_stack(emit)
    device, dtype, dtype_reason, spec = _device(torch, spec, emit)
    prompts = _Prompts.read(spec, emit)
    t_load = time.perf_counter()
    model = _load_model(torch, device, dtype, spec, prompts.config, emit)
    gen = _Generator(torch, device, spec, prompts, model, emit)
    del model  # the generator holds it: the cleanup below lets go of the one reference
    emit("loaded", load_s=time.perf_counter() - t_load, params=sum(p.numel() for p in gen.model.parameters()),
         dtype=spec["dtype"], dtype_reason=dtype_reason, device=describe_device(torch, device),
         sampling=gen.sampling, versions={"torch": torch.__version__, "transformers": transformers.__version__})
    emit("memory", point="after_load", value=memory_snapshot(torch, device))
    if spec["mode"] == "static-batch":
        prompts.tok.padding_side = "left"  # decoder-only: pad on the left so every row continues from its last token
    if spec.get("warmup", True):
        gen.warm_up()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    failure = gen.sequential() if spec["mode"] == "sequential" else gen.static_batch()
    emit("memory", point="after_run", value=memory_snapshot(torch, device))

    # The lab's cleanup cell, inside the worker: what is left after del + gc + empty_cache. The real
    # return of the memory is the process exit, which the parent measures from outside.
    emit.stage(say("cleaning up"))
    del gen
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.synchronize(device)
    emit("memory", point="after_cleanup", value=memory_snapshot(torch, device))
    if failure:
        raise failure


def _import_stack(emit: Emitter) -> tuple[Any, Any]:
    emit.stage(say("importing torch and transformers"))
    try:
        import torch
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: F401 (lazy: fail here)
    except Exception as e:  # the interpreter lacks the stack
        raise Fail("setup", say("This Python cannot import torch/transformers ({kind}: {why}): run `make setup` "
                                "or point the lab at the environment that has them.", kind=type(e).__name__,
                                why=str(e))) from e
    return torch, transformers


def _device(torch: Any, spec: dict, emit: Emitter) -> tuple[Any, Any, str | None, dict]:
    """The device and dtype the run uses (the spec then names the dtype chosen), said before anything can fail on
    them; the seed set."""
    device = resolve_device(torch, spec["device"])
    dtype, dtype_reason = resolve_dtype(torch, spec["dtype"], device)
    spec = {**spec, "dtype": str(dtype).removeprefix("torch.")}
    emit("device", device=describe_device(torch, device), dtype=spec["dtype"])
    torch.manual_seed(int(spec["seed"]))
    if device.type == "cuda":
        torch.cuda.manual_seed_all(int(spec["seed"]))
    return device, dtype, dtype_reason, spec


@dataclass
class _Prompts:
    """The tokenizer and the prompts as the chat template renders them, with their lengths checked against the
    model's context before any weight is loaded."""

    tok: Any
    config: Any
    prompts: list[str]
    texts: list[str]
    lengths: list[int]
    max_len: int

    @staticmethod
    def read(spec: dict, emit: Emitter) -> "_Prompts":
        from transformers import AutoConfig, AutoTokenizer

        path, max_new = spec["model_path"], int(spec["max_new_tokens"])
        emit.stage(say("loading tokenizer"))
        try:
            tok = AutoTokenizer.from_pretrained(path)
            config = AutoConfig.from_pretrained(path)
        except (OSError, ValueError) as e:
            raise Fail("model", say("transformers could not read the model folder {path} ({why}): check that it is "
                                    "a complete Hugging Face model folder.", path=path,
                                    why=str(e).splitlines()[0][:200])) from e
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token  # as the lab does
        if getattr(tok, "chat_template", None) is None:
            raise Fail("model", say("The tokenizer in {path} has no chat template: use an instruct/chat model, "
                                    "or add chat_template.jinja to the folder.", path=path))
        prompts: list[str] = spec["prompts"]
        # untokenized, the template's text: str() only says so (transformers types every form it can return)
        texts = [str(tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                             add_generation_prompt=True)) for p in prompts]
        lengths = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
        max_len = int(getattr(config, "max_position_embeddings", 0) or 0)
        for i, L in enumerate(lengths):
            if max_len and L + max_new > max_len:
                raise Fail("too_long", say("Prompt {i} is {length} tokens and with {new} new tokens needs "
                                           "{needs}, but the model allows {max_len}: shorten the prompt or "
                                           "lower max new tokens.", i=i + 1, length=L, new=max_new,
                                           needs=L + max_new, max_len=max_len))
        return _Prompts(tok, config, prompts, texts, lengths, max_len)


def _load_model(torch: Any, device: Any, dtype: Any, spec: dict, config: Any, emit: Emitter) -> Any:
    """The model in eval mode on `device`: its weights from the folder, or random ones of its shape."""
    from transformers import AutoModelForCausalLM

    path = spec["model_path"]
    try:
        if spec["random_weights"]:
            emit.stage(say("building the model with random weights ({dtype} on {device})", dtype=spec["dtype"],
                           device=str(device)))
            with torch.device(device):
                model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        else:
            emit.stage(say("loading model ({dtype} on {device})", dtype=spec["dtype"], device=str(device)))
            kwargs: dict[str, Any] = {"dtype": dtype}
            if device.type == "cuda":
                kwargs["device_map"] = {"": str(device)}  # straight onto the GPU, no CPU copy
            model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
            if device.type != "cuda":
                model.to(device)
        model.eval()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except Fail:
        raise
    except Exception as e:
        if is_oom(torch, e):
            raise Fail("oom", oom_sentence(device, "load", spec)) from e
        if isinstance(e, (OSError, ValueError)):
            raise Fail("model", say("transformers could not load the weights in {path} ({why}): check that the "
                                    "folder is complete.", path=path, why=str(e).splitlines()[0][:200])) from e
        raise
    return model


class _Generator:
    """model.generate() as the lab calls it, over the run's prompts: the warm-up, then the measured requests one
    at a time or as one padded batch, each finished request sent to the parent as it ends."""

    def __init__(self, torch: Any, device: Any, spec: dict, prompts: _Prompts, model: Any, emit: Emitter) -> None:
        self.torch, self.device, self.spec, self.p, self.model, self.emit = torch, device, spec, prompts, model, emit
        self.max_new = int(spec["max_new_tokens"])
        self.eos: set[int] = set()
        for src in (model.generation_config.eos_token_id, prompts.tok.eos_token_id):
            if src is not None:
                self.eos.update(src if isinstance(src, (list, tuple)) else [src])
        self.kwargs: dict[str, Any] = {"max_new_tokens": self.max_new, "pad_token_id": prompts.tok.pad_token_id,
                                       "do_sample": float(spec["temperature"]) > 0}
        if self.kwargs["do_sample"]:
            self.kwargs["temperature"] = float(spec["temperature"])
        if spec["random_weights"]:
            self.kwargs["remove_invalid_values"] = True  # random fp16 weights may produce inf/nan logits
        config = model.generation_config
        self.sampling = {"do_sample": self.kwargs["do_sample"], "temperature": self.kwargs.get("temperature"),
                         "top_k": getattr(config, "top_k", None), "top_p": getattr(config, "top_p", None)}
        self.t0 = 0.0

    def _encode(self, texts: list[str]) -> Any:
        enc = self.p.tok(texts, return_tensors="pt", padding=len(texts) > 1, add_special_tokens=False)
        return {k: v.to(self.device) for k, v in enc.items()}

    def _generate(self, enc: Any, clock: Any, **overrides: Any) -> Any:
        with self.torch.no_grad():
            out = self.model.generate(**enc, **{**self.kwargs, **overrides}, streamer=clock)
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)
        return out

    def _oom(self) -> Fail:
        return Fail("oom", oom_sentence(self.device, "generate", self.spec))

    def warm_up(self) -> None:
        """Every shape the run will meet, generated once and not measured (warmup_plan)."""
        t_w = time.perf_counter()
        plan = warmup_plan(self.p.lengths, self.max_new, self.p.max_len, self.spec["mode"])
        self.emit.stage(say("warming up, not measured: every sequence length the run will meet"))
        try:
            # `steps`, not `n`: `n` is the number of prompts, which the run's progress says after this. The clock
            # lives for this step's generate() only, so its callback reads this step's `k` and `steps`.
            for k, (rows, steps) in enumerate(plan):
                clock = make_clock(self.torch, t_w, len(rows), set(), lambda s: self.emit.stage(
                    say("warming up, not measured ({k}/{of}): {s}/{n} tokens", k=k + 1, of=len(plan), s=s, n=steps),
                    throttle_s=0.5))
                self._generate(self._encode([self.p.texts[i] for i in rows]), clock, max_new_tokens=steps,
                               min_new_tokens=steps)
        except Exception as e:
            if is_oom(self.torch, e):
                raise self._oom() from e
            raise
        self.emit("warmup", seconds=time.perf_counter() - t_w)

    def _start(self) -> None:
        self.t0 = time.perf_counter()
        self.emit("started", started_at=time.time())

    def _send(self, rec: RequestRecord) -> None:
        self.emit("record", record=rec.__dict__, elapsed=time.perf_counter() - self.t0)

    def sequential(self) -> Fail | None:
        """One request at a time, as the lab's loop calls model.generate(); the first out of memory ends it."""
        self._start()
        n, tok = len(self.p.prompts), self.p.tok
        for i, (prompt, text) in enumerate(zip(self.p.prompts, self.p.texts)):
            self.emit.stage(say("request {i}/{n}", i=i + 1, n=n))
            rec = RequestRecord(index=i, prompt=prompt, send_time=time.perf_counter() - self.t0,
                                tokens_source="generated")
            try:
                enc = self._encode([text])
                plen = int(enc["input_ids"].shape[1])
                clock = make_clock(self.torch, self.t0, 1, self.eos, lambda s: self.emit.stage(
                    say("request {i}/{n}: {s}/{max_new} tokens", i=i + 1, n=n, s=s, max_new=self.max_new),
                    throttle_s=0.5))
                out = self._generate(enc, clock)
                rec.end_time = time.perf_counter() - self.t0
                gen_ids = out[0, plen:].tolist()
                k = count_generated(gen_ids, self.eos)
                rec.prompt_tokens, rec.output_tokens = plen, k
                rec.chunk_times = clock.times[0][:k]
                rec.first_token_time = rec.chunk_times[0] if rec.chunk_times else None
                rec.output_text = tok.decode(gen_ids[:k], skip_special_tokens=True)
                del out, enc
            except Exception as e:
                if not is_oom(self.torch, e):
                    raise
                failure = self._oom()
                rec.error, rec.prompt_tokens = failure.message, self.p.lengths[i]
                self._send(rec)
                return failure
            self._send(rec)
        return None

    def static_batch(self) -> Fail | None:
        """Every prompt in one padded generate(), as a static batch: all end together."""
        self._start()
        n, tok = len(self.p.prompts), self.p.tok
        self.emit.stage(say("static batch of {n}: padding and generating", n=n))
        try:
            enc = self._encode(self.p.texts)
            plen = int(enc["input_ids"].shape[1])
            clock = make_clock(self.torch, self.t0, n, self.eos, lambda s: self.emit.stage(
                say("static batch of {n}: step {s}/{max_new}", n=n, s=s, max_new=self.max_new), throttle_s=0.5))
            out = self._generate(enc, clock)
            end = time.perf_counter() - self.t0
            prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
            for i, prompt in enumerate(self.p.prompts):
                gen_ids = out[i, plen:].tolist()
                k = count_generated(gen_ids, self.eos)
                times = clock.times[i][:k]
                self._send(RequestRecord(
                    index=i, prompt=prompt, send_time=0.0, end_time=end,
                    first_token_time=times[0] if times else None, chunk_times=times,
                    prompt_tokens=int(prompt_lens[i]), output_tokens=k, tokens_source="generated",
                    output_text=tok.decode(gen_ids[:k], skip_special_tokens=True),
                ))
            del out, enc
        except Exception as e:
            if not is_oom(self.torch, e):
                raise
            failure = self._oom()
            for i, prompt in enumerate(self.p.prompts):
                self._send(RequestRecord(index=i, prompt=prompt, send_time=0.0, prompt_tokens=self.p.lengths[i],
                                         tokens_source="generated", error=failure.message))
            return failure
        return None


def main() -> int:
    emit = Emitter()
    ppid = os.getppid()
    die_with_parent(ppid)  # a SIGKILLed app takes its worker (and the GPU memory it holds) with it
    try:
        spec = _read_spec()
    except ValueError as e:
        why = say("The naive worker got an unreadable spec ({error}): this is a bug, report it.", error=str(e))
        emit("error", kind="setup", message=why, said=wire(why))
        return 2
    _watch_parent(ppid)
    try:
        run(spec, emit)
    except Fail as f:
        emit("error", kind=f.kind, message=f.message, said=wire(f.message))
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        traceback.print_exc()
        why = say("The naive worker failed: {kind}: {why}; see the log.", kind=type(e).__name__,
                  why=str(e).splitlines()[0][:300] if str(e) else "")
        emit("error", kind="other", message=why, said=wire(why))
        return 1
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
