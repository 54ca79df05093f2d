"""`dlcp chakra`: Chakra execution traces in and out (dlcp/workloads/chakra.py; docs/profiles.md).

dlcp chakra import FILE.et [--out PROFILE.json]   one rank's data-parallel ET -> a profile
dlcp chakra export RUN_DIR [--out DIR]            a run's workload -> one ET per worker rank
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dlcp chakra", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    im = sub.add_parser("import", help="a Chakra ET of a data-parallel job -> a profile JSON")
    im.add_argument("et", help="one rank's ET file (e.g. ASTRA-sim's workload.0.et)")
    im.add_argument("--name", help="the profile's name (default: the file's name up to its first dot)")
    im.add_argument("--out", help="output file (default: <name>.json here)")
    ex = sub.add_parser("export", help="a run's workload -> Chakra ET, one file per worker rank")
    ex.add_argument("run_dir", help="a run directory (results/<time>-NAME/<variant>)")
    ex.add_argument("--out", help="output folder (default: RUN_DIR/chakra)")
    ex.add_argument("--iterations", type=int, help="passes to write (default: the run's iterations)")
    return ap


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        return _import(args) if args.verb == "import" else _export(args)
    except ValueError as e:
        print(f"dlcp chakra {args.verb}: {e}", file=sys.stderr)
        return 2


def _import(args) -> int:
    from dlcp.workloads.chakra import profile_from_et
    from dlcp.workloads.profile import profile_to_dict

    profile = profile_from_et(args.et, args.name)
    out = pathlib.Path(args.out or f"{profile.name}.json")
    try:
        out.write_text(json.dumps(profile_to_dict(profile), indent=1) + "\n")
    except OSError as e:
        print(f"dlcp chakra import: cannot write {out}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(
        f"{profile.name}: {len(profile)} tensors, {profile.parameters:,} parameters; forward "
        f"{profile.forward_total_s * 1e3:.3f} ms + backward {profile.backward_total_s * 1e3:.3f} ms"
    )
    print(f"profile: {out}")
    return 0


def _export(args) -> int:
    from dlcp.experiment.chakra_export import export_run

    run_dir = pathlib.Path(args.run_dir)
    paths = export_run(run_dir, pathlib.Path(args.out) if args.out else run_dir / "chakra", args.iterations)
    print(
        f"{len(paths)} Chakra ET file(s), one per worker rank: {paths[0].parent}/{paths[0].name.rsplit('.', 2)[0]}.<rank>.et"
    )
    return 0
