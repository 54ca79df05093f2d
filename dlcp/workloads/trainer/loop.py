"""Data-parallel training loops over any collective with the shapes of dlcp/workloads/contract.py.

The agents run the same loop, one worker per process; here all workers live in one process, either
stepped in turn (`threaded=False`: deterministic and cheapest on a small machine) or one thread per
worker (and one for the PS), which is how they would drive a real, blocking transport. A failure in
one thread aborts the collective so the others stop waiting, and is re-raised.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence


def _run_threads(targets: list[Callable[[], None]], abort: Callable[[BaseException], None]) -> None:
    errors: list[BaseException] = []

    def guard(target):
        try:
            target()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            abort(e)

    threads = [threading.Thread(target=guard, args=(t,), daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def train_allreduce(
    workloads: Sequence,
    endpoints: Sequence,
    iterations: int,
    *,
    threaded: bool = False,
    abort: Callable[[BaseException], None] = lambda e: None,
    on_iteration: Callable[[int], None] | None = None,
) -> None:
    """All-reduce mode: compute -> submit every message -> wait -> apply_gradients, per worker.
    `on_iteration(it)` runs after every worker applied iteration `it` (sequential mode only)."""
    if not threaded:
        for it in range(iterations):
            for w, ep in zip(workloads, endpoints):
                for msg in w.compute(it):
                    ep.submit(it, msg)
            for w, ep in zip(workloads, endpoints):
                w.apply_gradients(it, ep.wait(it))
            if on_iteration is not None:
                on_iteration(it)
        return

    def worker(w, ep):
        for it in range(iterations):
            for msg in w.compute(it):
                ep.submit(it, msg)
            w.apply_gradients(it, ep.wait(it))

    _run_threads([functools.partial(worker, w, ep) for w, ep in zip(workloads, endpoints)], abort)


def train_ps(
    workloads: Sequence,
    clients: Sequence,
    server_workload,
    server,
    iterations: int,
    *,
    threaded: bool = False,
    abort: Callable[[BaseException], None] = lambda e: None,
    on_iteration: Callable[[int], None] | None = None,
) -> None:
    """PS mode: workers push every message, the PS gathers, updates and scatters, workers pull."""
    msg_ids = [layout.msg_id for layout in server_workload.layouts()]

    def serve(it):
        server_workload.update(it, server.gather(it))
        server.scatter(it, {m: server_workload.parameters(m) for m in msg_ids})

    def push(w, c, it):
        for msg in w.compute(it):
            c.push(it, msg)

    def pull(w, c, it):
        for msg_id, chunk in c.pull(it).items():
            w.apply_parameters(it, msg_id, chunk)

    if not threaded:
        for it in range(iterations):
            for w, c in zip(workloads, clients):
                push(w, c, it)
            serve(it)
            for w, c in zip(workloads, clients):
                pull(w, c, it)
            if on_iteration is not None:
                on_iteration(it)
        return

    def worker(w, c):
        for it in range(iterations):
            push(w, c, it)
            pull(w, c, it)

    def ps():
        for it in range(iterations):
            serve(it)

    _run_threads([ps] + [functools.partial(worker, w, c) for w, c in zip(workloads, clients)], abort)
