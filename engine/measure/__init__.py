"""Measuring it: the load generator, the naive baseline, chat, the metrics and the workloads. (docs/architecture.md)"""
