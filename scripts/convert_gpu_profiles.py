"""Convert the GPU-measured profiles of shared/data/profiles/<card>/ into bundled profiles.

    python scripts/convert_gpu_profiles.py ../shared/data/profiles/h200 ../shared/data/profiles/h100

Each source file is already in the format of dlcp/workloads/profile.py (sizes in fp32 elements,
forward_s / backward_s in seconds, checked here: the per-tensor sums must give the forward and
backward milliseconds of the folder's README table). The numbers are copied unchanged; the file
is renamed `<model>-<precision>-b<batch>-<card>` (e.g. resnet50-fp32-b64-h200), its `model` key
says the same, its note is kept word for word and gains one sentence naming the source file, and
`measured` records the device, precision, batch and the two step medians the note states.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "dlcp" / "workloads" / "profiles"
STEP = re.compile(r"Step median ([0-9.]+) ms with the hooks, ([0-9.]+) ms without")
DEVICE = re.compile(r"Measured on one (NVIDIA [^(]+?) \(")
NAME = re.compile(r"^(?P<model>.+)-(?P<precision>fp32|bf16)-b(?P<batch>\d+)$")


def readme_rows(folder: Path) -> dict[str, tuple[float, float]]:
    """profile -> (forward ms, backward ms) from the folder's README table."""
    rows = {}
    for line in (folder / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 7 and NAME.match(cells[0]):
            rows[cells[0]] = (float(cells[5]), float(cells[6]))
    return rows


def convert(src: Path, card: str, table: dict[str, tuple[float, float]]) -> dict:
    data = json.loads(src.read_text())
    m = NAME.match(src.stem)
    if not m or data["model"] != src.stem:
        raise SystemExit(f"{src}: name does not say model-precision-bBATCH")
    step = STEP.search(data["note"])
    device = DEVICE.search(data["note"])
    if not step or not device:
        raise SystemExit(f"{src}: note lacks the step medians or the device")
    fwd_ms, bwd_ms = sum(data["forward_s"]) * 1e3, sum(data["backward_s"]) * 1e3
    want = table[src.stem]
    if abs(fwd_ms - want[0]) > 0.051 or abs(bwd_ms - want[1]) > 0.051:
        raise SystemExit(f"{src}: forward/backward {fwd_ms:.2f}/{bwd_ms:.2f} ms, README says {want} (units?)")
    name = f"{src.stem}-{card}"
    note = (
        f"{data['note']} Converted unchanged from shared/data/profiles/{card}/{src.name} "
        f"(that folder's README.md tabulates the set and says how far one measurement can be trusted)."
    )
    return {
        "model": name,
        "note": note,
        "measured": {
            "device": device.group(1).strip(),
            "precision": m["precision"],
            "batch_size": int(m["batch"]),
            "step_hooked_ms": {"median": float(step.group(1))},
            "step_plain_ms": {"median": float(step.group(2))},
        },
        **{k: data[k] for k in ("names", "sizes", "forward_s", "backward_s", "tensors", "parameters")},
    }


def main(folders: list[str]) -> int:
    for folder in map(Path, folders):
        card = folder.name
        table = readme_rows(folder)
        for src in sorted(folder.glob("*.json")):
            out = convert(src, card, table)
            (OUT / f"{out['model']}.json").write_text(json.dumps(out, indent=1) + "\n")
            print(f"{src} -> {OUT / (out['model'] + '.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
