"""Credentials: what counts as one, and copies of runs, settings, command lines and error text with them taken out.
See docs/internals.md#credentials."""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from engine.results.records import RunResult

# Keys that hold credentials, whatever the casing or prefix: api_key, Authorization, hf_token, Password.
# Anchored at the end so that max_tokens, kv_cache_tokens and tokenizer are kept.
_SECRET_KEY = re.compile(r"(?:^|[_\-. ])(?:api[_\-]?key|apikey|authorization|auth|token|password|passwd|secret)$",
                         re.I)
# `--api-key X`, `--hf-token=X` in a command line: the value becomes the variable it should come from.
_SECRET_FLAG = re.compile(r"(--(?:[\w-]*-)?(?:api-key|token|password|secret))(=|[ \t]+)('[^']*'|\"[^\"]*\"|[^\s\\]+)",
                          re.I)
# `VLLM_API_KEY=X python -m ...`, `HF_TOKEN=X`
_SECRET_ENV = re.compile(r"\b([A-Z][A-Z0-9_]*(?:API_KEY|TOKEN|PASSWORD|SECRET))=('[^']*'|\"[^\"]*\"|[^\s\\]+)")
_BEARER = re.compile(r"(Bearer\s+)[^\s\"',;]+")
# A URL's password (`https://user:PASS@host`) and a secret-named query parameter (`?api_key=X`, `&token=X`)
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.\-]*://[^/\s:@]+:)[^@\s/]+@", re.I)
_URL_PARAM = re.compile(r"([?&](?:api[_\-]?key|apikey|key|access[_\-]?token|token|password|secret)=)[^&#\s\"']+", re.I)


def _variable_for(flag: str) -> str:
    name = flag.lstrip("-").upper().replace("-", "_")
    return "VLLM_API_KEY" if name == "API_KEY" else name


def scrub_text(text: str) -> str:
    """`text` (a command line, an error, a URL) with secret values replaced by the variable that holds them
    (a URL's by ***)."""
    if "-" not in text and "=" not in text and "Bearer" not in text and "@" not in text:
        return text  # the common case, at no regex cost
    text = _URL_PASSWORD.sub(r"\1***@", _URL_PARAM.sub(r"\1***", text))
    text = _SECRET_FLAG.sub(
        lambda m: m.group(0) if m.group(3).startswith(("$", "\"$")) else
        f"{m.group(1)}{m.group(2)}${_variable_for(m.group(1))}", text)
    text = _SECRET_ENV.sub(
        lambda m: m.group(0) if m.group(2).lstrip("\"").startswith("$") else f'{m.group(1)}="${m.group(1)}"', text)
    return _BEARER.sub(r"\1***", text)


def _scrub_argv(items: list) -> list:
    """An argv list: the value after a secret flag is replaced too (['--api-key', 'X'])."""
    out = [scrub(v) for v in items]
    for i, v in enumerate(out[:-1]):
        if isinstance(v, str) and isinstance(out[i + 1], str) and _SECRET_FLAG.fullmatch(f"{v} x") \
                and not out[i + 1].startswith("$"):
            out[i + 1] = f"${_variable_for(v)}"
    return out


def scrub(obj: Any) -> Any:
    """A copy of `obj` (JSON-like) without credentials: secret-named keys dropped at any depth,
    secret values in strings and argv lists replaced by their variable's name."""
    if isinstance(obj, dict):
        return {k: scrub(v) for k, v in obj.items() if not _SECRET_KEY.search(str(k))}
    if isinstance(obj, (list, tuple)):
        return _scrub_argv(list(obj))
    if isinstance(obj, str):
        return scrub_text(obj)
    return obj


def scrub_run(run: RunResult) -> RunResult:
    """A copy of `run` with no credential left in its settings, command line or request errors."""
    records = [r if r.error is None or scrub_text(r.error) == r.error else replace(r, error=scrub_text(r.error))
               for r in run.records]
    # The label is the run's name, made from counts and settings, and its wording (extra.label_said) with it.
    return replace(run, config=scrub(run.config), load=scrub(run.load.to_dict()), extra=scrub(run.extra.to_dict()),
                   hardware=scrub(run.hardware), command=scrub_text(run.command), records=records)
