"""Serving the model: vLLM's settings, the model catalogue, the server and its process tree. (docs/architecture.md)"""
