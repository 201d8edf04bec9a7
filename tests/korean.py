"""The rule of the Korean checks (tests/test_e2e_korean.py in the browser, tests/test_korean_apptest.py
without one): which words of a Korean page may be English. Names stay English, as a Korean engineer writes
them (vLLM, TTFT, flags, model ids, units, code); data quoted on a page (the lab's prompts, a model's answers)
is not UI."""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Names a Korean engineer writes in English: products, metrics, formats, units, a flag's or a value's name.
ALLOWED = {w.lower() for w in """
    vLLM TTFT TPOT ITL E2EL SLO KV GPU GPUs CPU RAM VRAM NVIDIA NVML CUDA API URL JSON CSV HTML PNG SDK PID ID
    Python openai transformers Streamlit Ray Uvicorn Jupyter Llama Hugging Face Hub SmolLM Instruct Meta HTTP HTTPS
    ms tok req GiB GB MB MiB KiB min auto float bfloat Eager English generate vs prefill temperature kill
    Authorization Bearer goodput decode Wh kWh Welch t MFU FLOPs TFLOP LoRA
    """.split()}
WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*")
# Whole tokens that are names however they are spelt: flags, identifiers, model ids, paths, addresses, units.
NAME = re.compile(r"--?[\w.-]+|\S*\d\S*|\S+[_/.:][\w/.:-]+|/\w[\w/.-]*|https?://\S+|\b[A-Z][A-Z0-9_]{2,}\b|"
                  r"\b[a-z]+(?:-[a-z]+)+\b|`[^`]*`|(?<![A-Za-z])[A-Z](?![A-Za-z])")
TEMPLATE = re.compile(r"%\{[^}]*\}|<[^>]+>|&\w+;")


def english(texts: list[str], data: frozenset[str] = frozenset()) -> list[str]:
    """The English words in `texts` that are neither a name nor, where `data` is given, a quoted prompt's or
    answer's word."""
    return [word for text in texts for word in _words(text, data)]


def english_in(texts: list[str], data: frozenset[str] = frozenset()) -> dict[str, str]:
    """Each English word left, with the start of the first text it is in (for a failure to say where)."""
    found: dict[str, str] = {}
    for text in texts:
        for word in _words(text, data):
            found.setdefault(word, text[:120])
    return found


def _words(text: str, data: frozenset[str]) -> list[str]:
    return [w for w in WORD.findall(NAME.sub(" ", TEMPLATE.sub(" ", text)))
            if w.lower() not in ALLOWED and w.lower() not in data]


@functools.cache
def data() -> tuple[str, ...]:
    """The lab's prompts and the example runs' prompts and answers: data, not UI, wherever a page quotes them."""
    from engine.measure.workloads import prompts

    texts = [p for v in vars(prompts).values() for p in (v if isinstance(v, list) else [v]) if isinstance(p, str)]
    for f in (ROOT / "examples").glob("*.json"):
        for run in json.loads(f.read_text()):
            texts += [t for t in run.get("generated_texts") or [] if isinstance(t, str)]
            texts += [r.get("prompt") or "" for r in (run.get("serving_lab") or {}).get("records") or []]
    return tuple(sorted({t for t in texts if t.strip()}, key=len, reverse=True))


@functools.cache
def data_words() -> frozenset[str]:
    """Every word of data(): allowed where a page quotes data in pieces (tick labels, hover texts)."""
    return frozenset(w.lower() for t in data() for w in WORD.findall(t))


def unquoted(text: str) -> str:
    """`text` without the data it quotes whole (the chat box's example prompt, a prompt in a table)."""
    for d in data():
        if len(d) > 12 and d in text:
            text = text.replace(d, " ")
    return text
