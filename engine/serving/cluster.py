"""The commands that serve one model from several machines: a Ray cluster and one vLLM API server on its head.
See docs/internals.md#cluster."""
from __future__ import annotations

import ipaddress
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ConfigError, ServerBusy
from engine.messages import Message, say
from engine.observe import nvml
from engine.serving.models import embedded_dir
from engine.serving.config import ServerConfig, check_port

RAY_PORT = 6379
MAX_NODES = 64


@dataclass(frozen=True)
class NodeCommand:
    where: Message  # which machine runs it, in words
    command: str


def ray_commands(cfg: ServerConfig, head: str, nodes: int, gpus_per_node: int, port: int = 8000) -> list[NodeCommand]:
    """Commands for `nodes` machines of `gpus_per_node` GPUs each, the head reachable at `head` (an IP
    address or host name the workers can reach), the API server then listening on `port` of the head."""
    _check(head, nodes, gpus_per_node, port)
    ray_head = f"ray start --head --port {RAY_PORT} --num-gpus {gpus_per_node}"
    ray_worker = f"ray start --address {shlex.quote(head)}:{RAY_PORT} --num-gpus {gpus_per_node}"
    served = cfg.with_changes(host="0.0.0.0", port=port, tensor_parallel_size=gpus_per_node,
                              pipeline_parallel_size=nodes, data_parallel_size=1, gpus=(), device="cuda",
                              extra_args=(*cfg.extra_args, "--distributed-executor-backend", "ray"))
    # Every node must reach the others under the address it announces: VLLM_HOST_IP pins it.
    out = [NodeCommand(say("the head machine ({head}), first", head=head),
                       f"export VLLM_HOST_IP={shlex.quote(head)}\n{ray_head}")]
    out += [NodeCommand(say("worker machine {k} of {n}", k=k, n=nodes - 1),
                        f"export VLLM_HOST_IP=<this machine's address>\n{ray_worker}") for k in range(1, nodes)]
    out.append(NodeCommand(say("the head machine, once `ray status` shows {gpus} GPUs", gpus=nodes * gpus_per_node),
                           served.shell_command()))
    return out


def _check(head: str, nodes: int, gpus_per_node: int, port: int) -> None:
    if not head.strip() or any(c.isspace() for c in head) or head.startswith("-"):
        raise ConfigError(say("'{head}' is not an address: give the head machine's IP address or host name, as "
                              "the other machines reach it.", head=head))
    try:
        if ipaddress.ip_address(head).is_loopback:
            raise ConfigError(say("{head} is this machine's own loopback address, which the other machines cannot "
                                  "reach: give the head's address on the network.", head=head))
    except ValueError:
        pass  # a host name
    if not 1 <= nodes <= MAX_NODES:
        raise ConfigError(say("{nodes} machines is outside 1 to {most}.", nodes=nodes, most=MAX_NODES))
    if not 1 <= gpus_per_node <= 16:
        raise ConfigError(say("{gpus} GPUs per machine is outside 1 to 16.", gpus=gpus_per_node))
    check_port(port)


# -- two servers on one machine ------------------------------------------------------------------
def sharing_said(device: str, gpus: int) -> str | None:
    """Why two servers on one machine with this `device` and this many GPUs would not be compared fairly
    side by side (they would share its CPU or its one GPU), and what to do instead; None: they need not."""
    if device == "cpu":
        return say("On CPU a second server would share this machine's cores with the first, so neither would be "
                   "measured fairly: compare configurations one after another on the Tuning page, or give the "
                   "address of a server on another machine.")
    if gpus < 2:
        return say("With one GPU a second server would share it with the first, so neither would be measured "
                   "fairly: compare configurations one after another on the Tuning page, or give the address "
                   "of a server on another machine.")
    return None


def side_by_side_here(device: str) -> str | None:
    """Why two servers on this machine cannot be compared fairly side by side (its CPU, or its one GPU,
    would be shared), with what to do instead; None with two GPUs or more."""
    return sharing_said(device, len(nvml.devices()))


def check_pair(a, b, device: str, shared_ok: bool) -> None:
    """Two servers (engine.runs.Target) fit to be measured side by side: not one server twice (ConfigError),
    and not sharing this machine's CPU or its one GPU (ServerBusy) unless `shared_ok`."""
    if a.same_server(b):
        raise ConfigError(say("{url} is the server the app already measures: give the address of a second "
                              "one.", url=b.base_url))
    shared = a.on_this_machine and b.on_this_machine  # one CPU or one GPU would serve both
    if not shared_ok and shared and (why := side_by_side_here(device)):
        raise ServerBusy(why)


def second_server_command(started: ServerConfig | None, device: str, models: Path,
                          port: int | None = None) -> str | None:
    """The command that starts a second server like the running one on another GPU (then connected side
    by side by URL; the app itself runs one server), None without two GPUs or a started server."""
    gpus = sorted(nvml.devices(), key=lambda g: g["index"])
    if started is None or device != "cuda" or len(gpus) < 2:
        return None
    cfg = started
    used = set(cfg.gpus) or set(range(cfg.gpus_needed))
    free = [g["index"] for g in gpus if g["index"] not in used] or [gpus[-1]["index"]]
    model = ("embedded" if cfg.model == str(embedded_dir(models)) else
             cfg.model if os.path.isdir(cfg.model) else f"hub:{cfg.model}")
    argv = ["python", "-m", "engine", "serve", "--model", model, "--port", str(port or cfg.port + 1),
            "--gpus", str(free[0]), "--max-model-len", str(cfg.max_model_len),
            "--gpu-memory-utilization", f"{cfg.gpu_memory_utilization:g}", "--detach"]
    return " ".join(shlex.quote(x) for x in argv)
