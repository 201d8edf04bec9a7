"""A real LoRA adapter for the embedded model, written without peft: PEFT's on-disk layout is adapter_config.json
and adapter_model.safetensors with lora_A (rank x in) and lora_B (out x rank) for each target module, which vLLM
loads with --enable-lora --lora-modules NAME=PATH."""
from __future__ import annotations

import json
from pathlib import Path

RANK = 8


def write_adapter(path: Path, base_model: str, seed: int, layers: int, hidden: int, kv_out: int,
                  scale: float = 0.5) -> Path:
    """An adapter on q_proj and v_proj of every layer, its weights drawn from `seed` and big enough (`scale`) that
    a greedy answer through it differs from the base model's and another seed's."""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for i in range(layers):
        for module, out in (("q_proj", hidden), ("v_proj", kv_out)):
            key = f"base_model.model.model.layers.{i}.self_attn.{module}"
            tensors[f"{key}.lora_A.weight"] = torch.randn(RANK, hidden, generator=g) * scale / hidden ** 0.5
            tensors[f"{key}.lora_B.weight"] = torch.randn(out, RANK, generator=g) * scale
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path / "adapter_model.safetensors"))
    (path / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model, "r": RANK,
        "lora_alpha": 2 * RANK, "lora_dropout": 0.0, "target_modules": ["q_proj", "v_proj"], "bias": "none",
        "fan_in_fan_out": False, "modules_to_save": None, "inference_mode": True}))
    return path
