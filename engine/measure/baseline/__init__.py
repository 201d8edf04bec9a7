"""The naive baseline: transformers generate() one prompt at a time and as a static batch, in its own process."""
