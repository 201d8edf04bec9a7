"""Judging finished records: vLLM's metrics, SLOs, the memory-bandwidth ceiling, KV cache, cold or warm, batch slots,
prefix caching."""
