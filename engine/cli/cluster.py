"""`cluster`: what to run on each machine of a Ray cluster to serve one model across them (the app
never logs into other machines; it attaches by URL once the head serves)."""
from __future__ import annotations

from engine.cli.output import say_line


def register(sub) -> None:
    c = sub.add_parser("cluster", help="print the commands that serve one model from several machines (Ray)")
    c.add_argument("--head", required=True, help="the head machine's address, as the others reach it")
    c.add_argument("--nodes", type=int, required=True, help="machines in all, the head included")
    c.add_argument("--gpus-per-node", type=int, required=True)
    c.add_argument("--serve-port", type=int, default=8000, help="where the API server listens on the head")
    for option in ("--model", "--dtype", "--extra"):
        c.add_argument(option)
    c.add_argument("--max-model-len", type=int)
    c.add_argument("--gpu-memory-utilization", type=float)
    c.set_defaults(func=_cluster)


def _cluster(args) -> int:
    from engine.serving import prepare
    from engine.serving.cluster import ray_commands
    from engine.serving.config import ServerConfig, parse_extra_args

    spec = prepare.resolve(args.model or "embedded", args.settings.models)
    cfg = ServerConfig.for_model(spec, "cuda", max_model_len=args.max_model_len, dtype=args.dtype,
                                 gpu_memory_utilization=args.gpu_memory_utilization,
                                 extra_args=parse_extra_args(args.extra or ""))
    for step, node in enumerate(ray_commands(cfg, args.head, args.nodes, args.gpus_per_node, args.serve_port), 1):
        say_line(f"# {step}. on {node.where}\n{node.command}\n")
    say_line(f"Then attach to http://{args.head}:{args.serve_port} (Server page: Connect to an existing server, or "
             f"`python -m engine run SCENARIO --url http://{args.head}:{args.serve_port}`).")
    return 0
