"""The commands that serve one model from several machines with vLLM's own multi-node serving: a Ray
cluster (one head, the other machines as workers) and one vLLM API server on the head that splits
the model tensor-parallel within each machine and pipeline-parallel across them, as vLLM's
distributed-serving guide advises (tensor parallelism needs the fast links inside a machine). The app
does not log into other machines: it writes what a person runs on each, then attaches to the result
by URL like any existing server."""
from __future__ import annotations

import ipaddress
import shlex
from dataclasses import dataclass

from engine.errors import ConfigError
from engine.messages import Message, say
from engine.serving.config import ServerConfig

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
    if not 1 <= port <= 65535:
        raise ConfigError(say("Port {port} is not a valid port: pick a number between 1024 and 65535.", port=port))
