"""Measuring it, in parts ranked lowest first (tests/test_layering.py): the progress protocol every measurement
reports through, judging finished records, the load generator, the naive baseline, the workloads, and the Python
behind a run. (docs/architecture.md)"""
