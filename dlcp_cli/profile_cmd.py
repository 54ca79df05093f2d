"""`dlcp profile`: the compute profiles (format: dlcp/workloads/profile.py; docs/profiles.md).

dlcp profile list                         the bundled profiles, one line each
dlcp profile show NAME|FILE               tensors, parameters, forward, backward, the note
dlcp profile MODEL [--device cuda] ...    measure MODEL layer by layer into a profile JSON
                                          (dlcp/workloads/trainer/profiler.py)
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import sys

VERBS = ("list", "show")


def measure_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dlcp profile",
        description="Measure a model's per-layer forward and backward times in isolation (one process, "
        "no network) and write a profile usable as workload.profile. `dlcp profile list` and `dlcp "
        "profile show NAME` read the bundled ones (docs/profiles.md).",
    )
    p.add_argument(
        "model",
        help="ours (mlp, cnn, resnet), a torchvision classification model (resnet18, resnet50, vgg16, "
        "vit_b_16, ...), a transformers model (bert-base, bert-large, gpt2, or hf:ClassName), or "
        "module:factory (docs/profiles.md); all but ours need the `models` extra",
    )
    p.add_argument("--device", default="cpu", help="cpu (perf_counter) or cuda (CUDA events); default cpu")
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16"), help="bf16 = autocast (default fp32)")
    p.add_argument("--batch-size", type=int, default=32, help="per-worker batch (default 32)")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per sample of a sequence model (default 128)")
    p.add_argument(
        "--hf-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change a field of a transformers model's config, e.g. num_hidden_layers=2 (repeatable)",
    )
    p.add_argument("--dataset", default="digits", choices=("digits", "synthetic"), help="our models' data")
    p.add_argument(
        "--repeats",
        type=int,
        help="measured steps, each after a plain one; the median is kept (default 100 for ours, otherwise as "
        "many as 30 s allow, 20 to 200)",
    )
    p.add_argument("--warmup", type=int, help="steps run first and not counted (default 10 for ours, 5 otherwise)")
    p.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads on the CPU (default 1, as the agents)"
    )
    p.add_argument(
        "--scale-to-plain",
        action="store_true",
        help="multiply every time by plain / hooked step so they add up to the step without hooks "
        "(as the bundled GPU profiles)",
    )
    p.add_argument("--out", help="output file (default: <profile name>.json here)")
    return p


def _hf_config(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--hf-config {pair!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def cmd_measure(argv: list[str]) -> int:
    args = measure_parser().parse_args(argv)
    from dlcp.workloads.profile import profile_from_dict
    from dlcp.workloads.trainer.profiler import measure_profile
    from dlcp.workloads.trainer.zoo import OURS

    ours = args.model in OURS
    repeats = args.repeats if args.repeats is not None else (100 if ours else None)
    warmup = args.warmup if args.warmup is not None else (10 if ours else 5)
    try:
        data = measure_profile(
            args.model,
            dataset=args.dataset,
            batch_size=args.batch_size,
            repeats=repeats,
            warmup=warmup,
            threads=args.threads,
            device=args.device,
            precision=args.precision,
            seq_len=args.seq_len,
            hf_config=_hf_config(args.hf_config),
            scale_to_plain=args.scale_to_plain,
            command="dlcp profile " + shlex.join(argv),
        )
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
    for line in measured_lines(data):
        print(line)
    print(f"profile: {out}")
    return 0


def measured_lines(data: dict) -> list[str]:
    """The profile's totals beside the plain timed step: how far the per-layer sum is from it."""
    m = data["measured"]
    fwd, bwd = 1e3 * sum(data["forward_s"]), 1e3 * sum(data["backward_s"])
    plain, hooked = m["step_plain_ms"], m["step_hooked_ms"]
    off = (fwd + bwd) / plain["median"] - 1
    return [
        f"{data['model']}: {data['tensors']} tensors, {data['parameters']:,} parameters",
        f"forward {fwd:.3f} ms + backward {bwd:.3f} ms = {fwd + bwd:.3f} ms per step (per layer its median "
        f"over {m['repeats']} steps, scaled to the median step)",
        f"plain timed step (no hooks): median {plain['median']:.3f} ms, p10-p90 {plain['p10']:.3f}-"
        f"{plain['p90']:.3f} ms; with the hooks: median {hooked['median']:.3f} ms",
        f"forward + backward vs the plain step: {off:+.1%}",
    ]


def cmd_list(argv: list[str]) -> int:
    from dlcp.workloads.profile import bundled_profiles, load_profile

    if argv:
        print("dlcp profile list: takes no arguments", file=sys.stderr)
        return 2
    rows = []
    for name in bundled_profiles():
        p = load_profile(name)
        rows.append(
            (
                name,
                str(len(p)),
                f"{p.parameters:,}",
                f"{p.forward_total_s * 1e3:.2f}",
                f"{p.backward_total_s * 1e3:.2f}",
                str(p.measured.get("device", "-")),
            )
        )
    head = ("profile", "tensors", "parameters", "forward ms", "backward ms", "measured on")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(c.ljust(w) if i in (0, 5) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return 0


def cmd_show(argv: list[str]) -> int:
    from dlcp.workloads.profile import load_profile

    ap = argparse.ArgumentParser(prog="dlcp profile show", description="One profile: totals, the note, per tensor.")
    ap.add_argument("profile", help="a bundled name (dlcp profile list) or a profile JSON file")
    ap.add_argument("--tensors", action="store_true", help="also list every tensor (size, forward, backward)")
    args = ap.parse_args(argv)
    try:
        p = load_profile(args.profile)
    except ValueError as e:
        print(f"dlcp profile show: {e}", file=sys.stderr)
        return 2
    fwd, bwd = p.forward_total_s * 1e3, p.backward_total_s * 1e3
    print(f"{p.name} ({p.source})")
    print(f"tensors: {len(p)}  parameters: {p.parameters:,}  gradient bytes: {sum(p.nbytes):,} (fp32)")
    ratio = f"{bwd / fwd:.2f}" if fwd > 0 else "-"
    print(f"forward: {fwd:.3f} ms  backward: {bwd:.3f} ms  backward / forward: {ratio}  total: {fwd + bwd:.3f} ms")
    for key, value in p.measured.items():
        print(f"measured.{key}: {json.dumps(value)}")
    print(f"note: {p.note}")
    if args.tensors:
        print(f"{'#':>4}  {'name':40s}  {'size':>10}  {'forward us':>10}  {'backward us':>11}")
        for i, (n, s, f, b) in enumerate(zip(p.names, p.sizes, p.forward_s, p.backward_s)):
            print(f"{i:4d}  {n:40s}  {s:10d}  {f * 1e6:10.2f}  {b * 1e6:11.2f}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["list"]:
        return cmd_list(argv[1:])
    if argv[:1] == ["show"]:
        return cmd_show(argv[1:])
    return cmd_measure(argv)


def add_parser(sub) -> None:
    """`dlcp profile` in the command list; main() hands its arguments to `main` untouched."""
    p = sub.add_parser(
        "profile",
        help="list, show or measure per-layer compute profiles (dlcp profile --help)",
        add_help=False,
    )
    p.add_argument("profile_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=lambda a: main(a.profile_args))
