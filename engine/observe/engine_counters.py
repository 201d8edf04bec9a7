"""vLLM's counters of speculative decoding and of the work its engine estimates it did (FLOPs, bytes read and
written; only with --enable-mfu-metrics), as deltas over a measured part. See docs/measuring.md#histograms."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from engine.results.records import EstimatedWork, SpecDecode

SPEC_DECODE = {"drafts": "vllm:spec_decode_num_drafts_total",
               "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
               "accepted": "vllm:spec_decode_num_accepted_tokens_total"}
ACCEPTED_AT = "vllm:spec_decode_num_accepted_tokens_per_pos_total"  # labelled by the draft position
ESTIMATED = {"flops": "vllm:estimated_flops_per_gpu_total",
             "read_bytes": "vllm:estimated_read_bytes_per_gpu_total",
             "write_bytes": "vllm:estimated_write_bytes_per_gpu_total"}


def _samples(text: str, names: set[str], model: str | None) -> dict[tuple[str, str | None], float]:
    """Each wanted counter's value (by name and draft position), summed over engines, for `model` when the page
    labels several."""
    ours = "\n".join(line for line in text.splitlines() if line.split("{", 1)[0].split(" ", 1)[0] in names)
    by_model: dict[str | None, dict[tuple[str, str | None], float]] = {}
    try:
        for family in text_string_to_metric_families(ours):
            for s in family.samples:
                if s.name in names:
                    d = by_model.setdefault(s.labels.get("model_name"), {})
                    key = (s.name, s.labels.get("position"))
                    d[key] = d.get(key, 0.0) + s.value
    except ValueError:  # not Prometheus text
        return {}
    if model in by_model:
        return by_model[model]
    out: dict[tuple[str, str | None], float] = {}
    for d in by_model.values():
        for k, v in d.items():
            out[k] = out.get(k, 0.0) + v
    return out


def _deltas(before: str, after: str, wanted: dict[str, str], model: str | None) -> dict[str, float] | None:
    """after - before of each counter in `wanted` (our key -> vLLM's name); None when the server does not export
    them all, or one went backwards (the server restarted between the reads)."""
    names = set(wanted.values())
    b, a = _samples(before, names, model), _samples(after, names, model)
    out = {}
    for key, name in wanted.items():
        if (name, None) not in b or (name, None) not in a or a[(name, None)] < b[(name, None)]:
            return None
        out[key] = a[(name, None)] - b[(name, None)]
    return out


def view(before: str, after: str, model: str | None = None) -> tuple[SpecDecode | None, EstimatedWork | None]:
    """What a run keeps of these counters (in Notes.server_view): speculation's (drafts, draft tokens, accepted
    tokens, and accepted tokens by draft position) when the server speculates, the estimated work (FLOPs and bytes
    per GPU) when it estimates it; None for either it does not export or did not count meanwhile."""
    spec = _deltas(before, after, SPEC_DECODE, model)
    speculation = None
    if spec is not None and spec["drafts"] > 0:
        b, a = _samples(before, {ACCEPTED_AT}, model), _samples(after, {ACCEPTED_AT}, model)
        at = {int(pos): a[(ACCEPTED_AT, pos)] - b.get((ACCEPTED_AT, pos), 0.0)
              for name, pos in a if name == ACCEPTED_AT and pos is not None and pos.isdigit()}
        speculation = SpecDecode(drafts=spec["drafts"], draft_tokens=spec["draft_tokens"], accepted=spec["accepted"],
                                 accepted_at=[at[i] for i in sorted(at)])
    est = _deltas(before, after, ESTIMATED, model)
    work = None
    if est is not None and est["flops"] > 0:
        work = EstimatedWork(flops=est["flops"], read_bytes=est["read_bytes"], write_bytes=est["write_bytes"])
    return speculation, work
