"""A claim of a source paper, as `dlcp reproduce` reads it: `experiments/papers/<claim>/claim.toml`.

The manifest says what the paper claims (its figure, with provenance: where it is stated, in which
source), the paper's setup beside ours (one row per aspect, each with its source), and how ours is
measured: `[fast]` with the alpha-beta timeline or the collectives' cost model (seconds), `[full]`
as packet-level series on ns-3 through the series runner (hours at the papers' scale). Every
figure is a speed-up S = baseline time / our time (> 1: the paper's system is faster), read from
the paper's wording as docs/reproduce.md says ("83 % faster" is S = 1.83).

Provenance tags as in seeds-brief: [V] a primary source (an abstract), [C] the authors' public
code, [S] a secondary source, [R] recollection, unchecked, [D] our decision.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import tomllib
from pydantic import Field, model_validator

from dlcp.settings import BadValue, ConfigError, Settings

MANIFEST = "claim.toml"
FigureKind = Literal["up to", "range", "about", "direction"]
Aggregate = Literal["max", "geomean"]


class Figure(Settings):
    """The paper's figure as a speed-up (baseline time / the system's)."""

    kind: FigureKind = Field(description="'up to' (the best case), 'range' (low..high), 'about', or 'direction' only")
    speedup: float | None = Field(None, gt=0, description="the paper's speed-up (the high end of a range)")
    low: float | None = Field(None, gt=0, description="a range's low end")
    quote: str = Field(description="the paper's words")
    source: str = Field(description="where it is stated, with its tag")

    @model_validator(mode="after")
    def _complete(self):
        if self.kind != "direction" and self.speedup is None:
            raise BadValue("speedup", f"a figure of kind {self.kind!r} needs its speed-up")
        if self.kind == "range" and self.low is None:
            raise BadValue("low", "a range needs its low end")
        return self


class SetupRow(Settings):
    aspect: str
    theirs: str
    source: str = Field(description="where their setting is stated, with its tag")
    ours: str


class Versus(Settings):
    """One comparison of a claim: the system against the best of its baselines."""

    label: str = Field(description="how the verdict table names it")
    ours: str = Field(description="a scheduler or collective name (with options: 'multitree kary=5')")
    baselines: list[str] = Field(min_length=1, description="the state of the art: the best of them")
    speedup: float | None = Field(None, gt=0, description="this comparison's own paper figure (else the claim's)")


class TimelineFast(Settings):
    """Schedulers on the alpha-beta timeline (dlcp/comm/timeline.py), per profile."""

    model: Literal["timeline"]
    versus: list[Versus] = Field(min_length=1)
    workers: int = Field(ge=2)
    network: str = Field("", description="a costmodel.PAPER_FITS network (their fitted constants)")
    rate_gbps: float = Field(0.0, ge=0, description="else a ring over links of this rate ...")
    latency_s: float = Field(30e-6, ge=0, description="... and this latency per step")
    profiles: list[str] = Field(min_length=1)
    compute_scale: float = Field(1.0, gt=0, description="the profiles' compute x this (their GPU)")
    aggregate: Aggregate = "max"

    @model_validator(mode="after")
    def _cost(self):
        if bool(self.network) == bool(self.rate_gbps):
            raise BadValue("network", "give network (a paper fit) or rate_gbps, not both or neither")
        return self


class CollectivesFast(Settings):
    """Collectives priced by their own step schedules on a topology, with contention."""

    model: Literal["collectives"]
    versus: list[Versus] = Field(min_length=1)
    topologies: list[str] = Field(min_length=1, description="e.g. torus:4x4")
    fabric_gbps: float = Field(gt=0)
    host_gbps: float = Field(0.0, ge=0, description="0: the topology's default (torus: degree x fabric)")
    latency_s: float = Field(30e-6, ge=0)
    profile: str = Field(description="whose gradient is all-reduced (and whose compute, for 'iteration')")
    compute_scale: float = Field(1.0, gt=0)
    metric: Literal["allreduce", "iteration"] = Field(
        "allreduce", description="one all-reduce of the gradient, or an iteration (WFBP; DS-Sync as it runs)"
    )
    aggregate: Aggregate = "max"


class EcmpFast(Settings):
    """Per-flow ECMP against per-packet spraying of a ring all-reduce (MLT's first step): the ring
    on a leaf-spine with each flow hashed onto one equal-cost path (seeded draws) or sprayed over
    all of them (fluid shares); the iteration of WFBP with each (alpha, beta)."""

    model: Literal["ecmp"]
    label: str
    topology: str
    fabric_gbps: float = Field(gt=0)
    host_gbps: float = Field(gt=0)
    latency_s: float = Field(30e-6, ge=0)
    profiles: list[str] = Field(min_length=1)
    compute_scale: float = Field(1.0, gt=0)
    draws: int = Field(200, ge=20, description="hash draws (the interval's sample)")
    not_modelled: list[str] = Field(
        default_factory=list, description="the claim's steps this model cannot price (packet-level only)"
    )


class Series(Settings):
    """One packet-level series: an experiment file of the claim's folder, named variants (the
    baseline first), paired repeats."""

    name: str
    experiment: str
    set: list[str] = Field(default_factory=list, description="KEY=VALUE overrides of every run")
    variants: dict[str, list[str]] = Field(description="variant name -> its KEY=VALUE overrides; baseline first")
    versus: dict[str, str] = Field(default_factory=dict, description="variant -> the label of the row it reports")

    @model_validator(mode="after")
    def _two(self):
        if len(self.variants) < 2:
            raise BadValue("variants", "a comparison needs a baseline and at least one other variant")
        return self


class Full(Settings):
    series: list[Series] = Field(min_length=1)
    repeat: int = Field(3, ge=1, description="paired repeats per series")
    metric: str = Field("rank_iteration_p50", description="the compare.json ratio the verdict reads")
    also: list[str] = Field(default_factory=list, description="further compare.json ratios reported (tails)")
    reduced: list[str] = Field(
        default_factory=list, description="KEY=VALUE overrides of --reduced: the same claim at a small scale"
    )
    reduced_repeat: int = Field(3, ge=1)


def figure_for(claim: Claim, label: str) -> Figure:
    """The paper's figure a comparison is judged against: its own where the claim gives one."""
    fast = claim.fast
    own = next((v.speedup for v in getattr(fast, "versus", []) if v.label == label and v.speedup), None)
    return claim.figure if own is None else claim.figure.replace(speedup=own, kind="up to", low=None)


class Claim(Settings):
    id: str
    title: str
    paper: str
    claim: str
    figure: Figure
    setup: list[SetupRow] = Field(min_length=1)
    fast: TimelineFast | CollectivesFast | EcmpFast = Field(discriminator="model")
    full: Full | None = None
    why: list[str] = Field(default_factory=list, description="known reasons our figure can differ")


def load_claim(folder: Path) -> Claim:
    """The claim of one folder; ConfigError naming the file and the key."""
    path = folder / MANIFEST
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file (a claim is a folder with {MANIFEST})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not TOML: {e}") from None
    try:
        claim = Claim.parse(data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}", e.key, e.what) from None
    if claim.id != folder.name:
        raise ConfigError(f"{path}: id: {claim.id!r} is not the folder's name {folder.name!r}")
    for s in claim.full.series if claim.full else []:
        if not (folder / s.experiment).is_file():
            raise ConfigError(f"{path}: full.series {s.name}: experiment {s.experiment} is not in {folder}")
    return claim


def claims_root(given: str | None = None) -> Path:
    """Where claims live: `given`, else experiments/papers under the current directory, else
    beside this package (a checkout)."""
    if given:
        return Path(given)
    here = Path("experiments/papers")
    return here if here.is_dir() else Path(__file__).resolve().parents[2] / "experiments" / "papers"


def load_claims(root: Path, names: list[str] | None = None) -> list[Claim]:
    """The named claims (default: every folder with a manifest), in name order."""
    if not root.is_dir():
        raise ConfigError(f"{root}: no such directory of claims")
    known = sorted(p.name for p in root.iterdir() if (p / MANIFEST).is_file())
    for n in names or []:
        if n not in known:
            raise ConfigError(f"claim {n!r}: not in {root} (claims: {', '.join(known)})")
    return [load_claim(root / n) for n in (names or known)]
