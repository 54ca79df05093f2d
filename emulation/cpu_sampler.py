"""Did the machine keep up? The CPU time of the switch processes during a run.

A switch process stands in for hardware that forwards at line rate. It sleeps when it has nothing
to do (emulation/builtin_switch: ppoll until the next frame or departure), so the share of wall time it
spends on a CPU says how close it came to saturation; a switch that needs a whole CPU queues
frames in the kernel instead of in its emulated queues. Sampled from /proc/PID/stat (utime + stime,
every thread) by a thread of the runner; the result goes into meta.json `switch_cpu` and the
report flags a saturated switch (dlcp/reporting/keepup_check.py).
"""

from __future__ import annotations

import os
import threading
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
PERIOD_S = 0.5
WINDOW_S = 5.0  # the busiest stretch of this length is what `busy_peak` reports


def machine_cpu_s() -> float | None:
    """Busy CPU seconds of the whole machine so far (every CPU; /proc/stat minus idle and iowait)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (sum(fields[:8]) - fields[3] - fields[4]) / CLK_TCK  # user..steal, without idle and iowait


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process (all its threads), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15 of proc(5))


MACHINE = "machine"  # the sample key of the whole machine's busy time


class CpuSampler:
    """Samples the CPU time of named processes, and of the whole machine (its busy share counts
    every CPU: 1.0 = all CPUs busy), every PERIOD_S until `stop()`."""

    def __init__(self, pids: dict[str, int], period_s: float = PERIOD_S, window_s: float = WINDOW_S):
        self.pids, self.period_s, self.window_s = dict(pids), period_s, window_s
        self.samples: dict[str, list[tuple[float, float]]] = {name: [] for name in [*pids, MACHINE]}
        self.loadavg_start = os.getloadavg()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def start(self) -> CpuSampler:
        self._sample()
        self._thread.start()
        return self

    def _sample(self) -> None:
        now = time.monotonic()
        for name, pid in self.pids.items():
            cpu = process_cpu_s(pid)
            if cpu is not None:
                self.samples[name].append((now, cpu))
        busy = machine_cpu_s()
        if busy is not None:
            self.samples[MACHINE].append((now, busy / (os.cpu_count() or 1)))

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self._sample()

    def stop(self) -> dict[str, dict]:
        """Per process: CPU seconds, wall seconds, busy share over the whole run and in its
        busiest window (meta.json `switch_cpu`)."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(2 * self.period_s + 1)
            self._sample()
        return {
            name: busy_summary(s, self.window_s) for name, s in self.samples.items() if name != MACHINE and len(s) >= 2
        }

    def machine(self) -> dict:
        """The whole machine during the run (meta.json `machine`): CPUs, load averages at the start
        and the end, busy share of all CPUs (others' work included) overall and in the busiest
        window. Call after stop()."""
        out = {
            "cpus": os.cpu_count(),
            "loadavg_start": [round(x, 2) for x in self.loadavg_start],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        }
        if len(self.samples[MACHINE]) >= 2:
            s = busy_summary(self.samples[MACHINE], self.window_s)
            out.update(busy=s["busy"], busy_peak=s["busy_peak"], window_s=self.window_s)
        return out


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
    return {
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
        "busy": busy,
        "busy_peak": busy if peak is None else peak,
        "window_s": window_s,
    }
