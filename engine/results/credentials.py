"""Credentials: what counts as one, and copies of runs, settings, command lines and error text with them taken out.
See docs/internals.md#credentials."""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from engine.results.records import RunResult

# The keys that hold a credential, compared after lower-casing and turning '-', '.' and ' ' into '_'. An explicit
# list, never a pattern: a measurement named like a secret (first_token, joules_per_token) must never vanish.
CREDENTIAL_KEYS = frozenset({
    "api_key", "apikey", "x_api_key", "openai_api_key", "vllm_api_key",
    "authorization", "proxy_authorization", "cookie", "set_cookie",
    "token", "access_token", "auth_token", "bearer_token", "refresh_token", "id_token", "session_token",
    "hf_token", "hugging_face_hub_token", "huggingface_token", "huggingface_hub_token",
    "password", "passwd", "secret", "client_secret", "private_key",
})


def is_credential_key(key: object) -> bool:
    """Whether a settings or header key names a credential ("Authorization", "hf-token", "API_KEY")."""
    return isinstance(key, str) and re.sub(r"[-. ]", "_", key.strip().lower()) in CREDENTIAL_KEYS


# `--api-key X`, `--hf-token=X` in a command line: the value becomes the variable it should come from.
_FLAG_NAMES = "|".join(sorted((k.replace("_", "[-_]") for k in CREDENTIAL_KEYS), key=len, reverse=True))
_SECRET_FLAG = re.compile(rf"(--(?:{_FLAG_NAMES}))(=|[ \t]+)('[^']*'|\"[^\"]*\"|[^\s\\]+)", re.I)
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
    """A copy of `obj` (JSON-like) without credentials: CREDENTIAL_KEYS dropped at any depth, secret values in
    strings and argv lists replaced by their variable's name; every other key and number kept as it is."""
    if isinstance(obj, dict):
        return {k: scrub(v) for k, v in obj.items() if not is_credential_key(k)}
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
