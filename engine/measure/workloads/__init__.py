"""Workloads: the catalogue of named scenarios and the prompts they send."""
