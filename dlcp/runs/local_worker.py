"""Set-up of a series' local Dask workers (`LocalCluster(preload=...)`, run in each worker process
as it starts): they ignore SIGINT and SIGTERM. A signal to the whole process group (a terminal's
Ctrl-C, `kill -TERM -PGID`, a batch system's stop) would otherwise kill them mid-run, and Dask
would start their runs again elsewhere; the series passes a stop on to its runs itself
(`tasks.stop_runs`), and the cluster's close stops the workers.

Done in the worker rather than by ignoring the signals in the series' process while it starts
them (which the workers would inherit): there a stop landing meanwhile would be dropped.
"""

from __future__ import annotations

import signal

from dlcp.runs import signals


def dask_setup(worker) -> None:
    """Dask's preload hook, on the worker process's main thread."""
    signals.handle_stops(signal.SIG_IGN)
