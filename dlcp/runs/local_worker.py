"""Set-up of a series' local Dask workers (`LocalCluster(preload=...)`, run in each worker process
as it starts).

- They ignore SIGINT and SIGTERM. A signal to the whole process group (a terminal's Ctrl-C,
  `kill -TERM -PGID`, a batch system's stop) would otherwise kill them mid-run, and Dask would start
  their runs again elsewhere; the series passes a stop on to its runs itself
  (`tasks.stop_runs`), and the cluster's close stops the workers. Done in the worker rather than by
  ignoring the signals in the series' process while it starts them (which the workers would
  inherit): there a stop landing meanwhile would be dropped.
- They do not log a failed heartbeat. A local cluster's scheduler lives in the series' process, so
  a worker loses it only when the series closes the cluster (a heartbeat in flight then fails, a
  race inside Dask's close) or has ended; the traceback would end the series' output and say
  nothing about its runs.
"""

from __future__ import annotations

import logging
import signal

from dlcp.runs import signals

HEARTBEAT_FAILED = "Failed to communicate with scheduler during heartbeat."  # distributed/worker.py


class NoHeartbeatFailure(logging.Filter):
    """Drops `distributed.worker`'s record of a heartbeat that found the scheduler gone."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != HEARTBEAT_FAILED


def dask_setup(worker) -> None:
    """Dask's preload hook, on the worker process's main thread."""
    signals.handle_stops(signal.SIG_IGN)
    logging.getLogger("distributed.worker").addFilter(NoHeartbeatFailure())
