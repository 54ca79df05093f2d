"""Did the machine keep up? The CPU time of the switch processes during a run.

A switch process stands in for hardware that forwards at line rate. It sleeps when it has nothing
to do (emulation/refswitch: ppoll until the next frame or departure), so the share of wall time it
spends on a CPU says how close it came to saturation; a switch that needs a whole CPU queues
frames in the kernel instead of in its emulated queues. Sampled from /proc/PID/stat (utime + stime,
every thread) by a thread of the runner; the result goes into meta.json `switch_cpu` and the
report flags a saturated switch (dlcp/reporting/keepup.py).
"""

from __future__ import annotations

import os
import threading
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
PERIOD_S = 0.5
WINDOW_S = 5.0  # the busiest stretch of this length is what `busy_peak` reports


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process (all its threads), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15 of proc(5))


class CpuSampler:
    """Samples the CPU time of named processes every PERIOD_S until `stop()`."""

    def __init__(self, pids: dict[str, int], period_s: float = PERIOD_S, window_s: float = WINDOW_S):
        self.pids, self.period_s, self.window_s = dict(pids), period_s, window_s
        self.samples: dict[str, list[tuple[float, float]]] = {name: [] for name in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def start(self) -> "CpuSampler":
        self._sample()
        self._thread.start()
        return self

    def _sample(self) -> None:
        now = time.monotonic()
        for name, pid in self.pids.items():
            cpu = process_cpu_s(pid)
            if cpu is not None:
                self.samples[name].append((now, cpu))

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self._sample()

    def stop(self) -> dict[str, dict]:
        """Per process: CPU seconds, wall seconds, busy share over the whole run and in its
        busiest window."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(2 * self.period_s + 1)
            self._sample()
        return {name: busy_summary(s, self.window_s) for name, s in self.samples.items() if len(s) >= 2}


def busy_summary(samples: list[tuple[float, float]], window_s: float) -> dict:
    """From (wall, cpu) samples: cpu_s, wall_s, busy = cpu / wall, busy_peak = the highest busy
    share over any stretch of at least `window_s` between samples (the whole run if shorter)."""
    (t0, c0), (t1, c1) = samples[0], samples[-1]
    wall, cpu = t1 - t0, c1 - c0
    peak = None
    j = 0
    for i in range(len(samples)):
        while j < len(samples) and samples[j][0] - samples[i][0] < window_s:
            j += 1
        if j == len(samples):
            break
        dt = samples[j][0] - samples[i][0]
        share = (samples[j][1] - samples[i][1]) / dt
        peak = share if peak is None else max(peak, share)
    busy = cpu / wall if wall > 0 else None
    return {"cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "busy": busy,
            "busy_peak": busy if peak is None else peak, "window_s": window_s}
