"""The verdict on one claim: is the direction reproduced, is the magnitude within 2x, and why not.

Both figures are speed-ups S (baseline time / the system's). Direction: S > 1, and where ours has a
95 % interval, its low end > 1 ("not significant" when it holds 1). A measured figure (paired
repeats) is judged on its interval only: without one (too few pairs) its direction is "no
interval", whatever the point says. Magnitude: the gains G = S - 1
(what "83 % faster" states) within a factor of two, 0.5 <= G_ours / G_paper <= 2; a range claim
(5-16 %) takes the factor against its nearer end. A claim that gives no figure is judged on the
direction alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlcp.reproduce.claims import Figure


@dataclass(frozen=True)
class Verdict:
    direction: str  # "reproduced" | "not reproduced" | "not significant" | "no interval" | "no figure"
    magnitude: str  # "within 2x" | "outside 2x (...)" | "no paper figure" | "-"
    why: str

    @property
    def reproduced(self) -> bool:
        return self.direction == "reproduced"


def judge(
    paper: Figure, ours: float | None, ci: tuple[float, float] | None = None, why: str = "", measured: bool = False
) -> Verdict:
    """The verdict on `ours` against the paper's figure; `measured`: ours comes from paired
    repeats, so its direction needs its 95 % interval `ci`."""
    if ours is None:
        return Verdict("no figure", "-", why or "this model cannot price this comparison")
    if measured and ci is None:
        direction = "no interval"
    elif ci is not None and ci[0] <= 1 <= ci[1]:
        direction = "not significant"
    elif (ci[0] if ci is not None else ours) > 1:
        direction = "reproduced"
    else:
        direction = "not reproduced"
    reasons = []
    if direction == "not reproduced":
        reasons.append(f"ours {ours:.3g}x: the paper's system is not faster here")
    elif direction == "not significant":
        reasons.append(f"ours {ours:.3g}x, but the 95 % interval {ci[0]:.3g}-{ci[1]:.3g} holds 1")  # type: ignore[index]
    elif direction == "no interval":
        reasons.append(f"ours {ours:.3g}x from too few pairs for a 95 % interval: the direction is not judged")
    if paper.kind == "direction" or paper.speedup is None:
        magnitude = "no paper figure"
    else:
        g = ours - 1
        hi = paper.speedup - 1
        lo = (paper.low - 1) if paper.kind == "range" and paper.low is not None else hi
        if g <= 0:
            magnitude = "outside 2x (no gain)"
        elif 0.5 * lo <= g <= 2 * hi:
            magnitude = "within 2x"
        else:
            factor = g / hi if g > 2 * hi else lo / g
            side = "larger" if g > 2 * hi else "smaller"
            magnitude = f"outside 2x (our gain {100 * g:.3g} % is {factor:.2g}x {side})"
        if magnitude != "within 2x" and g > 0:
            reasons.append(f"gain {100 * g:.3g} % against the paper's {_paper_gain(paper)}")
    if why and reasons:
        reasons.append(why)
    return Verdict(direction, magnitude, "; ".join(reasons))


def _paper_gain(paper: Figure) -> str:
    assert paper.speedup is not None
    if paper.kind == "range" and paper.low is not None:
        return f"{100 * (paper.low - 1):.3g}-{100 * (paper.speedup - 1):.3g} %"
    return f"{'up to ' if paper.kind == 'up to' else ''}{100 * (paper.speedup - 1):.3g} %"
