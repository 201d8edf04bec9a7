"""ServerConfig: rendering to argv / shell command, validation before anything starts, presets."""
import socket
from pathlib import Path

import pytest

from engine.errors import ConfigError
from engine.serving.config import OWN_CONTROLS, PRESETS, ServerConfig, parse_extra_args
from engine.serving.server import port_is_free

from tests.conftest import MODELS

LAB_MODEL = "/models/meta-llama--Meta-Llama-3-8B-Instruct"


def test_lab_command_on_gpu_matches_the_notebook():
    cfg = ServerConfig(model=LAB_MODEL, dtype="float16", max_model_len=2048, gpu_memory_utilization=0.85,
                       port=9000, device="cuda")
    argv = cfg.argv(python="python")
    assert argv[:5] == ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", LAB_MODEL]
    for flag, value in [("--dtype", "float16"), ("--max-model-len", "2048"), ("--gpu-memory-utilization", "0.85"),
                        ("--port", "9000")]:
        assert argv[argv.index(flag) + 1] == value
    assert cfg.env() == {}
    cmd = cfg.shell_command()
    assert cmd.startswith("python -m vllm.entrypoints.openai.api_server \\\n    --model ")
    assert "    --gpu-memory-utilization 0.85 \\\n" in cmd
    assert "--enable-mfu-metrics" not in argv  # opt-in: it costs a GPU server throughput (bench/results/mfu-h200.md)


def test_cpu_uses_kv_cache_space_instead_of_memory_fraction():
    cfg = ServerConfig(model="m", device="cpu", cpu_kvcache_gib=3)
    assert "--gpu-memory-utilization" not in cfg.argv()
    assert cfg.env() == {"VLLM_CPU_KVCACHE_SPACE": "3"}
    assert cfg.shell_command().startswith("VLLM_CPU_KVCACHE_SPACE=3 python -m")


def test_a_fraction_of_a_gib_on_cpu_is_passed_as_bytes_without_the_variable():
    """VLLM_CPU_KVCACHE_SPACE is an integer and overrides the flag: a squeezed cache goes as bytes alone."""
    cfg = ServerConfig(model="m", device="cpu", cpu_kvcache_gib=0.01)
    cfg.validate()
    argv = cfg.argv()
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == "10737418"
    assert cfg.env() == {}


def test_optional_flags_render_and_api_key_is_hidden_in_the_shell_command():
    cfg = ServerConfig(model="m", max_num_seqs=64, enforce_eager=True, tensor_parallel_size=2,
                       enable_prefix_caching=False, load_format="dummy", api_key="s3cret",
                       served_model_name="llama", extra_args=("--seed", "0"))
    argv = cfg.argv()
    for expected in ["--max-num-seqs", "--enforce-eager", "--no-enable-prefix-caching", "--seed"]:
        assert expected in argv
    assert argv[argv.index("--load-format") + 1] == "dummy"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert "s3cret" not in cfg.shell_command() and "$VLLM_API_KEY" in cfg.shell_command()
    assert cfg.to_dict()["api_key"] == "***"
    assert cfg.model_name == "llama"


@pytest.mark.parametrize("changes, words", [
    ({"gpu_memory_utilization": 0.0}, "outside (0, 1]"),
    ({"gpu_memory_utilization": 1.2}, "outside (0, 1]"),
    ({"port": 70000}, "not a valid port"),
    ({"dtype": "int3"}, "dtype"),
    ({"max_model_len": 4}, "too small"),
    ({"model": " "}, "No model"),
    ({"tensor_parallel_size": 0}, "tensor-parallel-size"),
    ({"cpu_kvcache_gib": 0}, "between 0.001 and 512"),
])
def test_bad_settings_are_refused_with_a_sentence(changes, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        ServerConfig(model="m").with_changes(**changes).validate()


def test_max_model_len_above_the_models_limit():
    with pytest.raises(ConfigError, match="above this model's limit of 8192"):
        ServerConfig(model="m", max_model_len=16384).validate(model_max_len=8192)
    ServerConfig(model="m", max_model_len=8192).validate(model_max_len=8192)


def test_unknown_extra_flag_is_refused_when_the_flags_are_known():
    known = {"--seed", "--swap-space"}
    ServerConfig(model="m", extra_args=("--seed", "1")).validate(known_flags=known)
    with pytest.raises(ConfigError, match="no flag '--sed'"):
        ServerConfig(model="m", extra_args=("--sed=1",)).validate(known_flags=known)


def test_extra_args_parse_like_a_shell():
    assert parse_extra_args('--a 1 --b "two words"') == ("--a", "1", "--b", "two words")
    with pytest.raises(ConfigError, match="quotes"):
        parse_extra_args('--a "unclosed')


def test_config_for_a_model_has_the_labs_defaults_and_keeps_them_for_unset_options():
    from engine.serving import models

    spec = models.shape_only_llama3_8b(MODELS)
    gpu = ServerConfig.for_model(spec, "cuda", port=8300, max_model_len=None, dtype=None)
    assert (gpu.dtype, gpu.max_model_len, gpu.load_format, gpu.port) == ("float16", 2048, "dummy", 8300)
    assert gpu.served_model_name == "llama3-8b-shape-only"
    cpu = ServerConfig.for_model(spec, "cpu", max_model_len=512)
    assert (cpu.dtype, cpu.max_model_len) == ("auto", 512)


def test_port_in_use_is_detected():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert not port_is_free(port)
    assert port_is_free(port)


def test_presets_are_the_labs():
    got = {p.name: (p.changes["max_model_len"], p.changes["gpu_memory_utilization"]) for p in PRESETS}
    assert got == {"Lab default": (2048, 0.85), "24 GB GPU": (1024, 0.75), "8 GB GPU": (1024, 0.34),
                   "Tuning": (512, 0.90)}


def test_round_trip_through_dict():
    cfg = ServerConfig(model="m", extra_args=("--seed", "0"), max_num_seqs=8)
    assert ServerConfig.from_dict(cfg.to_dict() | {"api_key": None}) == cfg


@pytest.mark.parametrize("flag", sorted(OWN_CONTROLS))
def test_a_refused_flag_names_a_control_that_exists(flag):
    """Once, `--extra "--no-enable-prefix-caching"` was refused for "an option of `python -m engine serve`" that
    serve did not have. Each flag refused for a control of its own names the Server page's field (a label the page
    draws) and, where it names one, an option `serve` takes."""
    import re

    from engine.cli import build_parser
    from engine.serving.config import refuse_extra_flags

    with pytest.raises(ConfigError) as e:
        refuse_extra_flags([flag, "1"])
    field, option = OWN_CONTROLS[flag]
    said = str(e.value)
    assert f"{field} on the Server page" in said
    page = (Path(__file__).resolve().parent.parent / "app_pages" / "server.py").read_text()
    assert re.search(rf'_\(\s*"{re.escape(field)}"', page), f"the Server page has no field {field!r}"
    if option is not None:
        assert option in said
        value = [] if "caching" in option or option == "--enforce-eager" else ["1"]
        args = build_parser().parse_args(["serve", option, *value])  # argparse exits on an unknown option
        assert getattr(args, option.removeprefix("--no-").removeprefix("--").replace("-", "_")) is not None


def test_prefix_caching_turns_off_from_the_command_line():
    from engine.cli import parse
    from engine.cli.server import config, given

    args = parse(["serve", "--no-enable-prefix-caching"])
    cfg, _spec = config(args)
    assert cfg.enable_prefix_caching is False and "--no-enable-prefix-caching" in cfg.argv()
    assert "enable_prefix_caching" in given(args)  # `run --url` refuses it as an option it would ignore
    assert config(parse(["serve"]))[0].enable_prefix_caching is None  # vLLM's default
