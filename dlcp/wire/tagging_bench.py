"""`dlcp bench tagging`: time to tag and packetise one large flat fp32 gradient (no root)."""

from __future__ import annotations

import argparse
import time

from dlcp.bench_output import emit


def bench_tagging(argv: list[str]) -> int:
    import numpy as np
    import torch

    from dlcp.wire.chunking import MessageId, packetize
    from dlcp.wire.tagging import TaggingConfig, tag_message

    ap = argparse.ArgumentParser(
        prog="dlcp bench tagging", description="Time to tag and packetise one flat fp32 gradient."
    )
    ap.add_argument("--values", type=int, default=25_000_000)
    ap.add_argument("--layers", type=int, default=50, help="equal-sized layers in the message")
    ap.add_argument("--repeats", type=int, default=3, help="report the best of this many runs")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.values < 1 or args.layers < 1 or args.repeats < 1:
        raise SystemExit("dlcp bench tagging: --values, --layers and --repeats must be >= 1")

    rng = np.random.default_rng(0)
    grad_np = rng.standard_normal(args.values, dtype=np.float32) * 1e-3
    grad_t = torch.from_numpy(grad_np)
    starts = np.linspace(0, args.values, args.layers, endpoint=False).astype(np.int64)
    layer_ids = np.arange(args.layers)
    config = TaggingConfig(policy="dlcp")
    rows = []
    seconds = {}
    for label, grad in (("numpy", grad_np), ("torch", grad_t)):
        best_tag = best_total = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            tags = tag_message(grad, starts, layer_ids, args.layers, config)
            t1 = time.perf_counter()
            batch = packetize(grad, MessageId(msg_id=1), tags)
            payload_views = [batch.payload(i) for i in range(len(batch))]
            t2 = time.perf_counter()
            best_tag, best_total = min(best_tag, t1 - t0), min(best_total, t2 - t0)
        seconds[label] = best_total
        rows.append(
            {
                "input": label,
                "values": args.values,
                "packets": len(payload_views),
                "tag_s": best_tag,
                "packetise_s": best_total - best_tag,
                "total_s": best_total,
                "Mvalues_per_s": args.values / best_total / 1e6,
            }
        )
    emit(
        f"tag + packetise {args.values:,} fp32 values ({args.layers} layers, policy dlcp, best of {args.repeats})",
        rows,
        {"values": args.values, "seconds": seconds["torch"], "seconds_numpy": seconds["numpy"]},
        args.json,
    )
    return 0
