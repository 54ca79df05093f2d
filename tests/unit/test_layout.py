"""House rules (docs/design.md, "Layout"): `dlcp/` stays importable without root, Mininet, bmv2 or the
other top-level packages; its packages depend on each other in one direction only; the CLI sits above
`dlcp/`, `emulation/` and `simulation/`; ns-3 is reached through one loader only; no import cycle
anywhere; every bench prints its JSON on the last line."""

import ast
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOP = ("dlcp", "dlcp_cli", "emulation", "agents", "simulation")
FORBIDDEN_IN_DLCP = {"mininet", "emulation", "agents", "dlcp_cli", "p4runtime_sh", "bm_runtime", "sswitch_runtime"}

# What each unit of dlcp/ may import from the others (lower layers first). A unit is a package
# (dlcp.wire) or a top-level module (dlcp.records).
DLCP_ALLOWED = {
    "dlcp": set(),
    "dlcp.records": set(),
    "dlcp.tables": set(),
    "dlcp.registry": set(),
    "dlcp.settings": {"dlcp.registry"},
    "dlcp.exit_status": set(),
    "dlcp.bench_output": {"dlcp.tables"},
    "dlcp.wire": {"dlcp.bench_output", "dlcp.settings"},
    # egress queueing: admission, ECN decision, disciplines (the switch's and the virtual network's)
    # the backends and what they can do, as data (their implementations live above dlcp/)
    "dlcp.backends": {"dlcp.wire"},
    "dlcp.queueing": {"dlcp.wire", "dlcp.settings", "dlcp.registry", "dlcp.backends"},
    "dlcp.transport": {"dlcp.wire", "dlcp.records", "dlcp.settings", "dlcp.queueing", "dlcp.bench_output"},
    "dlcp.workloads": {"dlcp.wire", "dlcp.bench_output", "dlcp.settings", "dlcp.registry"},
    "dlcp.network": {"dlcp.wire", "dlcp.settings", "dlcp.backends", "dlcp.queueing"},
    "dlcp.comm": {
        "dlcp.wire",
        "dlcp.transport",
        "dlcp.workloads",
        "dlcp.settings",
        "dlcp.registry",
        "dlcp.network",
        "dlcp.bench_output",
        "dlcp.tables",
    },
    "dlcp.ddp_hook": {"dlcp.wire", "dlcp.transport", "dlcp.comm", "dlcp.workloads", "dlcp.settings"},
    # the worker's and the PS's iterations without I/O: what they hand to the comm layer and get back
    "dlcp.iteration": {"dlcp.comm", "dlcp.workloads"},
    # the experiment config is composed from the layers' settings models (dlcp/settings.py)
    "dlcp.experiment": {
        "dlcp.wire",
        "dlcp.transport",
        "dlcp.comm",
        "dlcp.workloads",
        "dlcp.settings",
        "dlcp.registry",  # the policies between jobs (experiment/job_policy.py)
        "dlcp.network",
        "dlcp.backends",
        "dlcp.queueing",
    },
    "dlcp.reporting": {"dlcp.wire", "dlcp.experiment", "dlcp.tables", "dlcp.backends"},
    # the switch's reference model and counter dump (the C core beside it is no Python import)
    "dlcp.switch": {"dlcp.wire", "dlcp.network", "dlcp.transport", "dlcp.settings", "dlcp.queueing"},
    "dlcp.codegen": {"dlcp.wire", "dlcp.network", "dlcp.queueing"},
    # the series runner: above the config, the network and the reports; backends by the registry
    "dlcp.runs": {
        "dlcp.backends",
        "dlcp.bench_output",
        "dlcp.exit_status",
        "dlcp.experiment",
        "dlcp.network",
        "dlcp.reporting",
        "dlcp.settings",
        "dlcp.tables",
        "dlcp.workloads",
    },
    # the papers' claims beside our figures: the models, the series runner, the reports
    "dlcp.reproduce": {
        "dlcp.comm",
        "dlcp.reporting",
        "dlcp.runs",
        "dlcp.settings",
        "dlcp.tables",
        "dlcp.workloads",
    },
}
# Who may import which top-level package
TOP_ALLOWED = {
    "dlcp": {"dlcp"},
    "agents": {"dlcp", "agents"},
    "emulation": {"dlcp", "emulation"},
    "simulation": {"dlcp", "simulation"},
    "dlcp_cli": {"dlcp", "emulation", "simulation", "dlcp_cli"},
}
NS3_LOADER = "simulation.ns3.loader"  # the one module that imports cppyy / the ns3 wheel


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for top in TOP for p in (ROOT / top).rglob("*.py")}


def imports_of(path: pathlib.Path) -> set[str]:
    """Every module imported anywhere in the file (function-level imports too: they are dependencies)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES)
    return names


def dlcp_unit(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def test_dlcp_imports_nothing_that_needs_root():
    offenders = {
        str(p.relative_to(ROOT)): sorted({m.split(".")[0] for m in imports_of(p)} & FORBIDDEN_IN_DLCP)
        for m, p in MODULES.items()
        if m.split(".")[0] == "dlcp"
    }
    assert not {k: v for k, v in offenders.items() if v}


def test_every_dlcp_unit_is_known():
    units = {dlcp_unit(m) for m in MODULES if m.split(".")[0] == "dlcp"}
    assert units == set(DLCP_ALLOWED), "add the new unit to DLCP_ALLOWED (and docs/design.md)"


NO_IO = {"socket", "threading", "time", "select", "selectors", "os", "ctypes", "asyncio", "subprocess"}
TRANSPORT_DRIVERS = ("udp_driver", "udpio", "sockets", "sync", "virtual", "tcp_baseline", "factory", "deadline_timer")


def io_imports(prefix: str, also: set[str] = frozenset()) -> dict[str, list[str]]:
    """The modules under `prefix` that import a socket, thread, clock, process (NO_IO, `also`) or
    transport driver module, with those imports."""
    core = {m: p for m, p in MODULES.items() if m.startswith(prefix)}
    assert core, prefix
    bad = {
        m: sorted(
            t
            for t in imports_of(p)
            if t.split(".")[0] in NO_IO | also
            or t in also
            or (t.startswith("dlcp.transport.") and t.split(".")[2] in TRANSPORT_DRIVERS)
        )
        for m, p in core.items()
    }
    return {m: v for m, v in bad.items() if v}


def test_transport_core_does_no_io():
    """The protocol core is driven by events and the caller's clock (a simulator drives it too): it may
    not touch sockets, threads or clocks, nor import the drivers that do."""
    assert not io_imports("dlcp.transport.core")


def test_iteration_core_does_no_io():
    """The worker's and the PS's iterations are driven by events that carry the time (the agents'
    threads and ns-3 drive them): no socket, thread, clock, transport driver, and no file (the
    records writer is the drivers')."""
    assert not io_imports("dlcp.iteration", {"pathlib", "io", "shutil", "tempfile", "csv", "json", "dlcp.records"})


def test_dlcp_units_depend_downward_only():
    bad = []
    for m, p in MODULES.items():
        if m.split(".")[0] != "dlcp":
            continue
        for target in imports_of(p):
            if target in MODULES and target.startswith("dlcp"):
                src, dst = dlcp_unit(m), dlcp_unit(target)
                if src != dst and dst not in DLCP_ALLOWED[src]:
                    bad.append(f"{m} imports {target}")
    assert not bad, bad


def test_top_level_packages_depend_downward_only():
    bad = [
        f"{m} imports {t}"
        for m, p in MODULES.items()
        for t in imports_of(p)
        if t.split(".")[0] in TOP and t.split(".")[0] not in TOP_ALLOWED[m.split(".")[0]]
    ]
    assert not bad, bad


def test_only_the_loader_imports_ns3():
    """The sim extra stays optional: everything else reaches ns-3 through loader.ns()."""
    bad = [
        m
        for m, p in MODULES.items()
        if m != NS3_LOADER and {t.split(".")[0] for t in imports_of(p)} & {"cppyy", "libcppyy", "ns"}
    ]
    assert not bad, bad


def test_no_import_cycle():
    graph = {m: {t for t in imports_of(p) if t in MODULES and t != m} for m, p in MODULES.items()}
    # a package's __init__ is imported with any of its modules: not an edge worth a cycle
    for m in graph:
        graph[m] = {t for t in graph[m] if not m.startswith(t + ".")}
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_bench_tagging_json_last_line():
    out = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "bench", "tagging", "--values", "100000", "--repeats", "1", "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = out.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["values"] == 100000 and result["seconds"] > 0
    assert "Mvalues_per_s" in out  # the readable table came first


def test_unknown_bench_is_one_line_error():
    p = subprocess.run([sys.executable, "-m", "dlcp_cli", "bench", "nosuch"], capture_output=True, text=True)
    assert p.returncode != 0 and "unknown benchmark 'nosuch'" in p.stderr


# A string equal to a backend's name that is not a backend (the benchmark of simple_switch_grpc)
NOT_BACKEND_NAMES = {("dlcp_cli.benches", "bmv2")}


def test_only_the_registry_names_backends():
    """dlcp/ and dlcp_cli/ compare no backend's name: they ask dlcp/backends.py for capabilities,
    and reports read meta.json's facts. Docstrings and comments may name backends; code may not."""
    import dlcp.backends as backends

    names = set(backends.names()) | set(backends.RENAMED)
    bad = [
        f"{m}:{node.lineno} {node.value!r}"
        for m, p in MODULES.items()
        if m.split(".")[0] in ("dlcp", "dlcp_cli") and m != "dlcp.backends"
        for node in ast.walk(ast.parse(p.read_text(), str(p)))
        if isinstance(node, ast.Constant) and node.value in names and (m, node.value) not in NOT_BACKEND_NAMES
    ]
    assert not bad, bad


def test_the_registry_imports_no_backend_until_a_run_starts():
    """The config, the registry, the series runner and the CLI's parser load without emulation/ or
    simulation/; `backends.implementation` is what imports one."""
    code = (
        "import sys, dlcp.backends as b, dlcp.experiment.config, dlcp.runs.series_runner, dlcp_cli.main; "
        "dlcp_cli.main.build_parser(); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'emulation', 'simulation', 'mininet', 'cppyy'})); "
        "b.implementation('ns3'); print('simulation.ns3.backend' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "True"]
