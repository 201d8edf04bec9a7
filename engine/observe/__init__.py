"""Observing the machine: GPUs through NVML, the hardware and versions, live telemetry. (docs/architecture.md)"""
