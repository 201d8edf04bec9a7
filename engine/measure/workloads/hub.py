"""A Hugging Face dataset by name as a workload (as `vllm bench serve --dataset-name hf --dataset-path NAME`),
through the `datasets` library: from this machine's Hugging Face cache when the Hub cannot be reached (offline with
HF_DATASETS_OFFLINE=1, or no network), else downloaded once into it; a folder written by `Dataset.save_to_disk`
too. Its rows are read as an uploaded file's are (datasets.py: a prompt column, ShareGPT conversations or OpenAI
messages), sampled before they are converted. See docs/measuring.md#workloads."""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from engine.measure.workloads import datasets as files
from engine.measure.workloads.base import Plan, Report, WorkloadError
from engine.measure.workloads.tokens import Tokens
from engine.messages import say

KIND = "hub"


def _library():
    try:
        import datasets
    except ImportError:  # a machine set up before it was a requirement
        raise WorkloadError(say("Reading a Hugging Face dataset needs the datasets library: install it "
                                "(pip install -r requirements.txt) and try again.")) from None
    return datasets


def _cache_said() -> str:
    lib = _library()
    return str(lib.config.HF_DATASETS_CACHE)


def _cache_first(lib, name: str, subset: str | None, split: str, cache_dir: str | None) -> Any:
    """The dataset from the local cache when it is there (at once: with the Hub out of reach the library tries it for
    half a minute before it looks in its cache), else from the Hub unless offline mode is on."""
    offline = lib.config.HF_HUB_OFFLINE
    lib.config.HF_HUB_OFFLINE = True  # the library reads it at each call: the cache alone, this once
    try:
        return lib.load_dataset(name, subset, split=split, cache_dir=cache_dir)
    except ConnectionError:
        if offline:
            raise
    finally:
        lib.config.HF_HUB_OFFLINE = offline
    return lib.load_dataset(name, subset, split=split, cache_dir=cache_dir)


def load(name: str, subset: str | None = None, split: str = "train", cache_dir: str | None = None) -> Any:
    """The dataset's split (a `datasets.Dataset`): a folder saved with save_to_disk, else `name` on the Hub through
    the local cache. WorkloadError (one sentence) when neither the cache nor the network has it, or its split or
    subset is not there."""
    lib = _library()
    name = (name or "").strip()
    if not name:
        raise WorkloadError(say("Give the name of a Hugging Face dataset (owner/name), such as the one you would pass "
                                "to datasets.load_dataset."))
    folder = Path(name).expanduser()
    try:
        if folder.is_dir() and ((folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()):
            ds = lib.load_from_disk(str(folder))
            if isinstance(ds, lib.DatasetDict):
                if split not in ds:
                    raise WorkloadError(say("The dataset {name} has no split '{split}': pick one of {splits}.",
                                            name=name, split=split, splits=", ".join(ds)))
                ds = ds[split]
            return ds
        return _cache_first(lib, name, subset, split, cache_dir)
    except WorkloadError:
        raise
    except ConnectionError:
        raise WorkloadError(say("The Hugging Face dataset {name} is not in this machine's cache ({cache}) and the Hub "
                                "cannot be reached: load it once where the network reaches the Hub (it is kept in "
                                "that cache), or give its rows as a file.", name=name,
                                cache=cache_dir or _cache_said())) from None
    except lib.exceptions.DatasetNotFoundError:
        raise WorkloadError(say("The Hub has no dataset {name} (or it is gated and needs a token): check its name "
                                "(owner/name).", name=name)) from None
    except ValueError as e:  # an unknown split or subset: the library names the ones there are
        known = str(e).split("Should be one of", 1)[-1].strip(" .") if "Should be one of" in str(e) else ""
        if "split" in str(e).lower():
            raise WorkloadError(say("The dataset {name} has no split '{split}': pick one of {splits}.", name=name,
                                    split=split, splits=known or "train")) from None
        raise WorkloadError(say("The dataset {name} cannot be read with subset '{subset}' ({why}): check its subsets "
                                "on its page.", name=name, subset=subset or "", why=str(e).splitlines()[0][:160])) \
            from None
    except Exception as e:  # noqa: BLE001 - a damaged cache, a file it cannot parse: one sentence, not a traceback
        raise WorkloadError(say("The dataset {name} could not be read ({why}): check its name and this machine's "
                                "Hugging Face cache ({cache}).", name=name, why=type(e).__name__,
                                cache=cache_dir or _cache_said())) from None


def plan(name: str, subset: str | None = None, split: str = "train", column: str | None = None,
         n: int | None = None, how: str = "first", seed: int = 0, tokens: Tokens | None = None,
         max_tokens: int | None = None, output_from_reply: bool = False, cache_dir: str | None = None,
         report: Report | None = None) -> Plan:
    """A Hugging Face dataset's split as a single-turn workload: `n` rows (the first, or a seeded random choice in
    the dataset's order) read as a file's rows are (`column`: the prompt's column when it is not one of the usual
    names). The run records the dataset's name, split, subset, rows and the library's fingerprint of it."""
    ds = load(name, subset, split, cache_dir)
    total = len(ds)
    if total == 0:
        raise WorkloadError(say("The dataset {name} has no rows in its split '{split}'.", name=name, split=split))
    if column is not None and column not in ds.column_names:
        raise WorkloadError(say("The dataset {name} has no column '{column}': pick one of {columns}.", name=name,
                                column=column, columns=", ".join(ds.column_names)))
    if n is not None and n < 1:
        raise WorkloadError(say("Take at least one row of the dataset, not {n}.", n=n))
    if how not in ("first", "random"):
        raise WorkloadError(say("Sampling is 'first' or 'random', not '{how}'.", how=how))
    if n is None or n >= total:
        picked = list(range(total))
    else:
        picked = list(range(n)) if how == "first" else sorted(random.Random(seed).sample(range(total), n))
    rows = ds.select(picked)
    if column is not None:
        rows = rows.select_columns([column]).rename_column(column, "prompt") if column != "prompt" else rows
    data = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows).encode("utf-8")
    label = f"{name}:{split}" if subset is None else f"{name}/{subset}:{split}"
    parsed = files.parse(data, label + ".jsonl", report=report)
    out = files.plan(parsed, None, "first", seed, tokens, output_from_reply, max_tokens, report=report)
    out.kind = KIND
    out.summary.update({"kind": KIND, "name": label, "dataset": name, "subset": subset, "split": split,
                        "column": column, "rows": total, "sent": len(picked), "seed": seed,
                        "sampling": how if len(picked) < total else "all",
                        "fingerprint": getattr(ds, "_fingerprint", None)})
    for k in ("format", "sha256", "size_bytes"):  # of the JSON made here, not of the dataset
        out.summary.pop(k, None)
    return out
