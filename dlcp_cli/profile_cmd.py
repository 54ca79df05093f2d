"""`dlcp profile MODEL`: measure a torch model of ours layer by layer and write its profile JSON
(the format of dlcp/workloads/profile.py; method in dlcp/workloads/trainer/profiler.py)."""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

MODELS = ("mlp", "cnn", "resnet")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "profile",
        help="measure a model's per-layer compute times into a profile JSON",
        description="Measure one of our torch models layer by layer, in isolation (one process, "
        "no network), and write a profile usable as workload.profile.",
    )
    p.add_argument("model", choices=MODELS)
    p.add_argument("--dataset", default="digits", choices=("digits", "synthetic"))
    p.add_argument("--batch-size", type=int, default=32, help="per-worker batch (default 32)")
    p.add_argument("--repeats", type=int, default=100, help="measured steps; the median is kept (default 100)")
    p.add_argument("--warmup", type=int, default=10, help="steps run first and not counted (default 10)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, as the agents)")
    p.add_argument("--out", help="output file (default: <model>-<dataset>-b<batch>.json here)")
    p.set_defaults(func=cmd_profile)


def cmd_profile(args: argparse.Namespace) -> int:
    from dlcp.workloads.profile import profile_from_dict
    from dlcp.workloads.trainer.profiler import measure_profile

    try:
        data = measure_profile(args.model, args.dataset, args.batch_size, args.repeats, args.warmup, args.threads)
    except ValueError as e:
        print(f"dlcp profile: {e}", file=sys.stderr)
        return 2
    out = pathlib.Path(args.out or f"{data['model']}.json")
    profile_from_dict(data, source=str(out))  # what we write must load
    try:
        out.write_text(json.dumps(data, indent=1) + "\n")
    except OSError as e:
        print(f"dlcp profile: cannot write {out}: {e.strerror or e}", file=sys.stderr)
        return 1
    fwd, bwd = sum(data["forward_s"]), sum(data["backward_s"])
    print(
        f"{data['model']}: {data['tensors']} tensors, {data['parameters']:,} parameters; forward "
        f"{fwd * 1e3:.3g} ms + backward {bwd * 1e3:.3g} ms per step"
    )
    print(f"profile: {out}")
    return 0
