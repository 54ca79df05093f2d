"""Series of runs on any backend (docs/runs.md): the series runner behind `dlcp run` and the
contract a backend implements.

    series_runner.py  plan, checks, the series and the per-run entry point (run_one)
    contract.py       what a backend implements: check a config, run one run (RunContext, Session)
    run_dir.py        a run directory's layout, config/topology/runtime files, meta.json
    naming.py         results, variant and repeat directory names; --name
    progress.py       the progress display and the agents' progress files
    signals.py        SIGINT / SIGTERM as exceptions, clean-up they cannot cut short
    forked.py         a run in a forked process (backends that need one per run)
    privilege.py      root's powers, and handing results back to the user behind sudo
    machine_lock.py   one series at a time on a machine where runs cannot share it (Mininet)

The backends themselves are named in dlcp/backends.py and live above dlcp/.
"""
