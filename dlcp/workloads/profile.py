"""Per-tensor compute profiles of a model: what the communication schedulers plan with.

A profile lists a model's parameter tensors in forward order (index 0 = input side, the order of
torch's `named_parameters()`), each with its size in fp32 elements and the forward and backward
compute time attributed to it, in seconds. Backward runs the tensors in reverse order: tensor L-1
first, so its gradient is ready first (seeds-brief §1).

Files (JSON) carry the keys `model`, `note`, `sizes`, `forward_s`, `backward_s` and optionally
`names`, `tensors` (count, checked), `parameters` (total elements, checked) and `measured` (how
the numbers were measured: device, precision, batch size, the step with and without the timing
hooks and the spread over repeats; an object kept as it is). `note` says where the numbers come
from; it travels with the profile because a plan is only as good as its inputs. The bundled
profiles live in `dlcp/workloads/profiles/` and load by name (`load_profile("vgg16-fp32-b64-h200")`);
docs/profiles.md says which to use for what.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

PROFILE_DIR = Path(__file__).with_name("profiles")
BYTES_PER_ELEMENT = 4  # fp32 gradients
_KNOWN_KEYS = {"model", "note", "names", "sizes", "forward_s", "backward_s", "tensors", "parameters", "measured"}
# bundled profiles that changed name: an old name fails with one line naming the new ones
RENAMED = {
    "resnet50": "resnet50-usbyte (the US-Byte authors' forward times, backward = 2 x forward) or a "
    "measured one such as resnet50-fp32-b64-h200",
    "vgg16": "vgg16-usbyte (the US-Byte authors' forward times, backward = 2 x forward) or a "
    "measured one such as vgg16-fp32-b64-h200",
}


@dataclass(frozen=True)
class Profile:
    """One model's per-tensor profile. Sequences are indexed by tensor, in forward order.

    sizes: elements (fp32) per tensor; forward_s / backward_s: seconds of compute per tensor.
    """

    name: str
    names: tuple[str, ...]
    sizes: tuple[int, ...]
    forward_s: tuple[float, ...]
    backward_s: tuple[float, ...]
    note: str = ""
    source: str = field(default="", compare=False)  # the file it came from, for error messages
    measured: dict[str, Any] = field(default_factory=dict, compare=False)  # the `measured` object, if any

    def __post_init__(self):
        problem = _problem(self)
        if problem:
            where = f"{self.source}: " if self.source else f"profile {self.name!r}: "
            raise ValueError(where + problem)

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def nbytes(self) -> list[int]:
        """Gradient bytes per tensor (fp32)."""
        return [n * BYTES_PER_ELEMENT for n in self.sizes]

    @property
    def parameters(self) -> int:
        return sum(self.sizes)

    @property
    def compute_s(self) -> float:
        """Forward + backward time of one iteration with no communication wait: the floor of any
        iteration time."""
        return math.fsum(self.forward_s) + math.fsum(self.backward_s)

    @property
    def forward_total_s(self) -> float:
        return math.fsum(self.forward_s)

    @property
    def backward_total_s(self) -> float:
        return math.fsum(self.backward_s)

    def scaled(self, compute: float = 1.0) -> Profile:
        """The same model on a device `compute` times slower (2.0 = every layer takes twice as long)."""
        if not (isinstance(compute, (int, float)) and math.isfinite(compute) and compute > 0):
            raise ValueError(f"scaled: compute factor must be a finite number > 0, got {compute!r}")
        if compute == 1:
            return self
        return replace(
            self,
            forward_s=tuple(t * compute for t in self.forward_s),
            backward_s=tuple(t * compute for t in self.backward_s),
            note=f"{self.note} [compute times x{compute:g}]".strip(),
        )

    def fitted_to(self, sizes: Sequence[int], model: str) -> Profile:
        """This profile's compute laid over another model's tensors `sizes` (forward order): tensor
        i takes the forward and backward time of the same fraction of this profile's parameters
        (each profile tensor's time shared by the elements that overlap), so the totals, and how
        the time runs from the input side to the output side, are kept while the tensors, and so
        the messages, are the other model's."""
        if not sizes or any(n <= 0 for n in sizes):
            raise ValueError(f"fitted_to: model {model} needs tensors of at least one element")
        ours = _edges(self.sizes)
        theirs = _edges(sizes)
        fwd, bwd = [], []
        for lo, hi in itertools.pairwise(theirs):
            share = [
                max(0.0, min(hi, b) - max(lo, a)) / (b - a) for a, b in itertools.pairwise(ours)
            ]  # of each profile tensor
            fwd.append(math.fsum(w * t for w, t in zip(share, self.forward_s)))
            bwd.append(math.fsum(w * t for w, t in zip(share, self.backward_s)))
        return replace(
            self,
            names=tuple(f"{model}.{i}" for i in range(len(sizes))),
            sizes=tuple(int(n) for n in sizes),
            forward_s=tuple(fwd),
            backward_s=tuple(bwd),
            note=f"{self.note} [fitted onto model {model}'s {len(sizes)} tensors by parameter fraction]".strip(),
        )


def _edges(sizes: Sequence[int]) -> list[float]:
    """Where each tensor starts and ends as a fraction of all the parameters (0 .. 1)."""
    total = math.fsum(sizes)
    out, acc = [0.0], 0.0
    for n in sizes:
        acc += n
        out.append(acc / total)
    out[-1] = 1.0
    return out


def _problem(p: Profile) -> str | None:
    """The first thing wrong with `p`, as a phrase naming the field, or None."""
    n = len(p.sizes)
    if n == 0:
        return "sizes: empty (a profile needs at least one tensor)"
    for key in ("names", "forward_s", "backward_s"):
        if len(getattr(p, key)) != n:
            return f"{key}: {len(getattr(p, key))} entries but sizes has {n}"
    for i, s in enumerate(p.sizes):
        if isinstance(s, bool) or not isinstance(s, int) or s <= 0:
            return f"sizes[{i}]: must be a positive integer (fp32 elements), got {s!r}"
    for key in ("forward_s", "backward_s"):
        for i, t in enumerate(getattr(p, key)):
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
                return f"{key}[{i}]: must be a finite number of seconds >= 0, got {t!r}"
    if len(set(p.names)) != n:
        return "names: not unique"
    return None


def bundled_profiles() -> list[str]:
    """The names of the bundled profiles, sorted."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def load_profile(name_or_path: str | Path) -> Profile:
    """A bundled profile by name (`resnet50-fp32-b64-h200`, `vgg16-usbyte`) or a profile JSON
    file by path."""
    path = Path(name_or_path)
    if path.suffix != ".json" and not path.exists():
        path = PROFILE_DIR / f"{name_or_path}.json"
        if not path.exists():
            if str(name_or_path) in RENAMED:
                raise ValueError(f"profile {name_or_path!r}: renamed; use {RENAMED[str(name_or_path)]}")
            known = ", ".join(bundled_profiles())
            raise ValueError(f"profile {name_or_path!r}: no such file and not a bundled profile ({known})")
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise ValueError(f"{path}: cannot read ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    return profile_from_dict(data, source=str(path))


def profile_from_dict(data: dict, source: str = "profile") -> Profile:
    """Build a Profile from the JSON layout; errors name `source` and the offending field."""
    if not isinstance(data, dict):
        raise ValueError(f"{source}: top level must be an object")
    unknown = sorted(set(data) - _KNOWN_KEYS)
    if unknown:
        raise ValueError(f"{source}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_KNOWN_KEYS))})")
    for key in ("sizes", "forward_s", "backward_s"):
        if key not in data:
            raise ValueError(f"{source}: missing field {key!r}")
        if not isinstance(data[key], list):
            raise ValueError(f"{source}: {key}: must be a list")
    n = len(data["sizes"])
    names = data.get("names")
    if names is None:
        names = [f"tensor{i}" for i in range(n)]  # vgg16-usbyte.json has none; indices are what plans use
    elif not isinstance(names, list) or not all(isinstance(x, str) for x in names):
        raise ValueError(f"{source}: names: must be a list of strings")
    for key, want in (("tensors", n), ("parameters", None)):
        if key in data:
            got = data[key]
            if key == "parameters":
                want = sum(s for s in data["sizes"] if isinstance(s, int))
            if got != want:
                raise ValueError(f"{source}: {key}: says {got!r} but sizes give {want}")
    note = data.get("note", "")
    if not isinstance(note, str):
        raise ValueError(f"{source}: note: must be a string")
    measured = data.get("measured", {})
    if not isinstance(measured, dict):
        raise ValueError(f"{source}: measured: must be an object")
    name = data.get("model", Path(source).stem)
    return Profile(
        name=str(name),
        names=tuple(names),
        sizes=tuple(data["sizes"]),
        forward_s=tuple(data["forward_s"]),
        backward_s=tuple(data["backward_s"]),
        note=note,
        source=source,
        measured=measured,
    )


def profile_to_dict(p: Profile) -> dict:
    """The JSON layout of `p` (what `load_profile` reads back as an equal profile)."""
    data: dict[str, Any] = {"model": p.name, "note": p.note}
    if p.measured:
        data["measured"] = p.measured
    data.update(
        names=list(p.names),
        sizes=list(p.sizes),
        forward_s=list(p.forward_s),
        backward_s=list(p.backward_s),
        tensors=len(p),
        parameters=p.parameters,
    )
    return data


def synthetic_profile(layers, backward_ms: float, forward_ms: float = 0.0, name: str = "synthetic") -> Profile:
    """A profile for the `synthetic` workload (dlcp/synthetic.py): one tensor per layer of
    `layers` (values), `backward_ms` of backward compute per iteration split equally over the
    layers (as the workload sleeps compute_ms / n_messages per message), `forward_ms` likewise
    (the synthetic workload itself has no forward time: leave it 0 to match it)."""
    layers = list(layers) if isinstance(layers, (list, tuple)) else layers
    if not isinstance(layers, list) or not layers:
        raise ValueError(f"synthetic profile: layers: must be a non-empty list of positive integers, got {layers!r}")
    for key, v in (("backward_ms", backward_ms), ("forward_ms", forward_ms)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"synthetic profile: {key}: must be a finite number >= 0, got {v!r}")
    n = len(layers)
    return Profile(
        name=name,
        names=tuple(f"layer{i}" for i in range(n)),
        sizes=tuple(layers),
        forward_s=(forward_ms / 1e3 / n,) * n,
        backward_s=(backward_ms / 1e3 / n,) * n,
        note=f"synthetic: {n} layers, {backward_ms:g} ms backward and {forward_ms:g} ms "
        "forward per iteration, split equally over the layers",
    )
