"""Read a run directory (docs/runs.md) into memory, noting every missing or damaged piece.

Nothing here raises on bad records: a missing file, an empty file, a truncated last line, a row
with the wrong number of fields or an unparseable number becomes a line in `RunData.problems`, and
the report says what it could not use. Paths are taken relative to the directory given (never from
the absolute `run_dir` written into agents/hN-<role>.json), so a copied results directory reports the same.
"""

from __future__ import annotations

import csv
import io
import json
import pathlib
from dataclasses import dataclass, field

import numpy as np

from dlcp.reporting.facts import RunFacts, config_unknowns, disagreement, meta_unknowns, run_facts

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# Column -> kind ("str" or "num"; numbers load as float64 with NaN for an empty cell, which keeps
# microsecond Unix timestamps exact: they stay below 2^53).
MESSAGE_COLUMNS = {
    "host": "str",
    "rank": "num",
    "side": "str",
    "peer": "num",
    "iter": "num",
    "msg_id": "num",
    "phase": "str",
    "step": "num",
    "layer_first": "num",
    "layer_last": "num",
    "prio": "num",
    "bytes": "num",
    "pkts": "num",
    "lost_pkts": "num",
    "retx_pkts": "num",
    "rounds": "num",
    "forced": "num",
    "protected_lost": "num",
    "start_us": "num",
    "first_byte_us": "num",
    "complete_us": "num",
    "mct_us": "num",
}
ITERATION_COLUMNS = {
    "host": "str",
    "rank": "num",
    "iter": "num",
    "start_us": "num",
    "end_us": "num",
    "iteration_us": "num",
    "compute_us": "num",
    "comm_us": "num",
    "lost_values": "num",
    "train_loss": "num",
    "test_loss": "num",
    "test_accuracy": "num",
}
# a budget schedule's changes (dlcp/records.py BUDGET_COLUMNS): only runs with a schedule have them
BUDGET_COLUMNS = {
    "host": "str",
    "rank": "num",
    "iter": "num",
    "grad_norm": "num",
    "change": "num",
    "critical": "num",
    "budget": "num",
}
# Columns without which a kind of record is useless for the report (others are optional extras).
MESSAGE_REQUIRED = ("side", "mct_us")
ITERATION_REQUIRED = ("iter", "iteration_us")


@dataclass
class Table:
    """Columns of equal length: numpy float arrays for numbers, object arrays for strings."""

    columns: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def col(self, name: str) -> np.ndarray:
        return self.columns[name]

    def where(self, mask: np.ndarray) -> Table:
        return Table({k: v[mask] for k, v in self.columns.items()})


@dataclass
class RunData:
    path: pathlib.Path
    name: str
    meta: dict | None = None
    config: dict | None = None
    topology: dict | None = None
    messages: Table = field(default_factory=Table)
    iterations: Table = field(default_factory=Table)
    budget: Table = field(default_factory=Table)  # records/hN-budget.csv: a budget schedule's changes, if any
    agents: dict[str, dict] = field(default_factory=dict)  # host -> records/hN-agent.json
    background: dict[str, dict] = field(default_factory=dict)  # hN-background<i> -> its records/*.json
    counters: list[dict] = field(default_factory=list)  # counters/sN.json, sorted by switch
    samples: dict[str, list[dict]] = field(default_factory=dict)  # switch -> counters/sN-samples.jsonl
    progress: dict[str, dict] = field(default_factory=dict)  # host -> progress/hN
    problems: list[str] = field(default_factory=list)  # what is missing or damaged, one line each
    time_scale: float = 1.0  # measured times were divided by this (time dilation, dlcp/reporting/steady.py)
    facts: RunFacts = field(default_factory=RunFacts)  # backend, dilation, warm-up and their sources

    @property
    def policy(self) -> str | None:
        """The run's policy: meta.json "policy", else config.toml [dlcp] policy."""
        if self.meta and isinstance(self.meta.get("policy"), str):
            return self.meta["policy"]
        dlcp = (self.config or {}).get("dlcp")
        if isinstance(dlcp, dict) and isinstance(dlcp.get("policy"), str):
            return dlcp["policy"]
        return None


class ReportInputError(ValueError):
    """What a report or comparison was given cannot be used as asked; the message is the one-line
    reason (`dlcp report` / `dlcp compare` print it and exit 2). Other errors are bugs and keep
    their traceback."""


class NotARunDirectory(ReportInputError):
    """The path is not a run directory at all (as opposed to a run with missing pieces)."""


RUN_MARKERS = ("records", "meta.json", "config.toml", "counters")


def is_run_dir(path: pathlib.Path) -> bool:
    return path.is_dir() and any((path / m).exists() for m in RUN_MARKERS)


def default_out_dir(paths: list[pathlib.Path]) -> pathlib.Path:
    """Where a comparison of these directories goes by default: their parent directory when they
    all have the same one (results/<ts>-NAME/), else the current directory."""
    parents = {p.resolve().parent for p in paths}
    return parents.pop() if len(parents) == 1 else pathlib.Path.cwd()


def check_run_dir(path: pathlib.Path) -> None:
    """Raise NotARunDirectory with a one-line reason (and a hint when it holds runs)."""
    if not path.exists():
        raise NotARunDirectory(f"{path}: no such directory")
    if not path.is_dir():
        raise NotARunDirectory(f"{path}: not a directory")
    if is_run_dir(path):
        return
    inner = sorted(p.name for p in path.iterdir() if is_run_dir(p))
    hint = f"; it holds the runs {', '.join(inner)}: report one of them, or `dlcp compare` them" if inner else ""
    raise NotARunDirectory(f"{path}: not a run directory (none of {', '.join(RUN_MARKERS)}){hint}")


def load_run(path: str | pathlib.Path, name: str | None = None) -> RunData:
    """Everything a report needs from one run directory. Raises NotARunDirectory only when the
    path is not a run directory at all; any damage inside one is listed in `problems`."""
    path = pathlib.Path(path)
    check_run_dir(path)
    run = RunData(path=path, name=name or path.resolve().name)
    run.meta, meta_state = _read_document(path / "meta.json", json.loads)
    run.config, config_state = _read_document(path / "config.toml", tomllib.loads)
    run.facts = run_facts(run.meta, run.config)
    if meta_state:
        run.problems.append(f"meta.json: {meta_state} ({meta_unknowns(run.facts)})")
    if config_state:
        run.problems.append(f"config.toml: {config_state} ({config_unknowns(run.facts)})")
    differ = disagreement(run.meta, run.config, run.facts)
    if differ:
        run.problems.append(differ)
    run.topology = _read_json(path / "topology.json", run.problems, "topology", quiet_if_missing=True)
    run.messages = _read_records(path, "messages", MESSAGE_COLUMNS, MESSAGE_REQUIRED, run.problems)
    run.iterations = _read_records(path, "iterations", ITERATION_COLUMNS, ITERATION_REQUIRED, run.problems)
    run.budget = _read_optional_records(path, "budget", BUDGET_COLUMNS, run.problems)
    run.agents = _read_agent_totals(path, run.problems)
    run.background = _read_background_totals(path, run.problems)
    run.counters = _read_counters(path, run.problems)
    run.samples = _read_samples(path, run.problems)
    run.progress = _read_progress(path, run.problems)
    run.problems += missing_records(path, run.topology, run.agents)
    if run.meta is not None and run.meta.get("exit_status") not in (None, 0, "ok", "success"):
        run.problems.append(f"meta.json: the run ended with exit status {run.meta.get('exit_status')!r}")
    status = run_status(run.meta)
    if status == UNFINISHED:
        run.problems.append(
            "meta.json: no end recorded (the run was killed, e.g. by SIGKILL, before it could write one, or is "
            "still running): a partial run, the figures cover what was recorded until then"
        )
    elif status not in (None, "ok"):
        error = (run.meta or {}).get("error")
        why = f": {error}" if isinstance(error, str) else ""
        run.problems.append(
            f"meta.json: the run ended with status {status!r}{why} "
            "(a partial run: the figures cover what was recorded until then)"
        )
    return run


UNFINISHED = "unfinished"  # meta.json without the status the runner writes at the end


def run_status(meta: dict | None) -> str | None:
    """How the run ended: meta.json `status` ("ok", "error", "interrupted", "terminated"), or
    UNFINISHED when meta.json holds none (the runner writes it when the run ends, whatever ended it,
    so only a run killed outright, or one still running, lacks it); None without meta.json."""
    if meta is None:
        return None
    status = meta.get("status")
    return status if isinstance(status, str) and status != "running" else UNFINISHED


def _rel(run_path: pathlib.Path, p: pathlib.Path) -> str:
    try:
        return str(p.relative_to(run_path))
    except ValueError:
        return str(p)


def _read_json(p: pathlib.Path, problems: list[str], what: str, quiet_if_missing: bool = False):
    label = f"{p.parent.name}/{p.name}" if p.parent.name in ("records", "counters") else p.name
    if not p.exists():
        if not quiet_if_missing:
            problems.append(f"{label}: missing ({what} unknown)")
        return None
    try:
        data = json.loads(p.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError) as e:
        problems.append(f"{label}: unreadable ({_one_line(e)}); {what} unknown")
        return None
    if not isinstance(data, dict):
        problems.append(f"{label}: expected a JSON object, found {type(data).__name__}")
        return None
    return data


def _read_document(p: pathlib.Path, parse) -> tuple[dict | None, str | None]:
    """A JSON or TOML file that must hold a table: (its data, None), or (None, what is wrong with
    it: missing, empty, unreadable). An empty file is damage, not a run without settings."""
    if not p.exists():
        return None, "missing"
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
        data = parse(text) if text.strip() else None
    except (OSError, ValueError) as e:  # tomllib.TOMLDecodeError and json's errors are ValueErrors
        return None, f"unreadable ({_one_line(e)})"
    if data is None:
        return None, "empty"
    if not isinstance(data, dict):
        return None, f"expected a table of settings, found {type(data).__name__}"
    if not data:
        return None, "empty"
    return data, None


def _one_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _read_records(
    run_path: pathlib.Path, kind: str, schema: dict[str, str], required: tuple[str, ...], problems: list[str]
) -> Table:
    rec_dir = run_path / "records"
    if not rec_dir.is_dir():
        if kind == "messages":  # say it once, not once per kind
            problems.append("records/: missing (no agent records at all)")
        return _empty_table(schema)
    files = sorted(rec_dir.glob(f"*-{kind}.csv"))
    if not files:
        problems.append(f"records/*-{kind}.csv: no files")
        return _empty_table(schema)
    parts = [read_csv_table(f, schema, required, problems, _rel(run_path, f)) for f in files]
    return concat_tables([p for p in parts if p is not None], schema)


def _read_optional_records(run_path: pathlib.Path, kind: str, schema: dict[str, str], problems: list[str]) -> Table:
    """Records only some runs have (no files: an empty table, and nothing to report missing)."""
    files = sorted((run_path / "records").glob(f"*-{kind}.csv"))
    parts = [read_csv_table(f, schema, (), problems, _rel(run_path, f)) for f in files]
    return concat_tables([p for p in parts if p is not None], schema)


def _empty_table(schema: dict[str, str]) -> Table:
    return Table({c: np.empty(0, dtype=object if k == "str" else float) for c, k in schema.items()})


def concat_tables(tables: list[Table], schema: dict[str, str]) -> Table:
    if not tables:
        return _empty_table(schema)
    return Table({c: np.concatenate([t.columns[c] for t in tables]) for c in schema})


def read_csv_table(
    p: pathlib.Path, schema: dict[str, str], required: tuple[str, ...], problems: list[str], label: str
) -> Table | None:
    """One records CSV as a Table with every schema column (absent ones all-NaN / empty string).

    A last line without its newline is a truncated write (the agent died mid-row): it is dropped and
    reported, even if it happens to parse, because a cut-off number can still look like a number.
    """
    try:
        text = p.read_bytes().decode("utf-8", errors="replace")
    except OSError as e:
        problems.append(f"{label}: unreadable ({_one_line(e)})")
        return None
    if not text.strip():
        problems.append(f"{label}: empty file")
        return None
    lines = text.splitlines(keepends=True)
    if not lines[-1].endswith(("\n", "\r")):
        if len(lines) == 1:
            problems.append(f"{label}: truncated header line, no rows")
            return None
        problems.append(f"{label}: last line truncated (line {len(lines)}, dropped)")
        lines = lines[:-1]
    reader = csv.reader(io.StringIO("".join(lines)))
    header = [h.strip() for h in next(reader)]
    absent = [c for c in schema if c not in header]
    missing_required = [c for c in required if c not in header]
    if missing_required:
        problems.append(f"{label}: no column {', '.join(missing_required)} (file not used)")
        return None
    if absent:
        problems.append(f"{label}: no column {', '.join(absent)} (left empty)")
    index = {c: header.index(c) for c in schema if c in header}
    good: list[list[str]] = []
    linenos: list[int] = []  # file line of each good row, for the problem note
    bad_rows: list[int] = []
    for lineno, row in enumerate(reader, start=2):
        if not row:
            continue
        if len(row) != len(header):
            bad_rows.append(lineno)
        else:
            good.append(row)
            linenos.append(lineno)
    cols: dict[str, np.ndarray] = {}
    keep = np.ones(len(good), dtype=bool)
    by_column = list(zip(*good)) if good else [()] * len(header)
    for c, kind in schema.items():
        if c not in index:
            cols[c] = np.full(len(good), "" if kind == "str" else np.nan, dtype=object if kind == "str" else float)
            continue
        cells = by_column[index[c]]
        if kind == "str":
            cols[c] = np.array([x.strip() for x in cells], dtype=object)
        else:
            cols[c], ok = _numbers(cells)
            keep &= ok
    if not keep.all():
        bad_rows += [linenos[i] for i in np.flatnonzero(~keep)]
        cols = {c: v[keep] for c, v in cols.items()}
    if bad_rows:
        bad_rows.sort()
        shown = ", ".join(map(str, bad_rows[:5])) + (" ..." if len(bad_rows) > 5 else "")
        problems.append(f"{label}: {len(bad_rows)} malformed row(s) skipped (line {shown})")
    if not keep.sum():
        problems.append(f"{label}: header only, no rows" if not good else f"{label}: no usable rows")
    return Table(cols)


def _numbers(cells) -> tuple[np.ndarray, np.ndarray]:
    """Cells as float64 (empty -> NaN) and a mask of the cells that parsed (one fast pass; cell by
    cell only when some cell is not a number)."""
    nan = float("nan")
    try:
        # float() accepts surrounding whitespace; "" and "  " are missing cells
        return np.array([float(x) if x and not x.isspace() else nan for x in cells], dtype=float), np.ones(
            len(cells), dtype=bool
        )
    except ValueError:
        out = np.full(len(cells), np.nan)
        ok = np.ones(len(cells), dtype=bool)
        for i, cell in enumerate(cells):
            if not cell or cell.isspace():
                continue
            try:
                out[i] = float(cell)
            except ValueError:
                ok[i] = False
        return out, ok


def _read_agent_totals(run_path: pathlib.Path, problems: list[str]) -> dict[str, dict]:
    out = {}
    for p in sorted((run_path / "records").glob("*-agent.json")):
        data = _read_json(p, problems, "agent totals")
        if data is not None:
            out[p.name[: -len("-agent.json")]] = data
    return out


def _read_background_totals(run_path: pathlib.Path, problems: list[str]) -> dict[str, dict]:
    """The emulated background senders' records (hN-background<i>.json; sinks are -sink<port>)."""
    out = {}
    for p in sorted((run_path / "records").glob("*-background*.json")):
        data = _read_json(p, problems, "background sender totals")
        if isinstance(data, dict):
            out[p.name[: -len(".json")]] = data
    return out


def _read_counters(run_path: pathlib.Path, problems: list[str]) -> list[dict]:
    d = run_path / "counters"
    files = sorted(d.glob("*.json")) if d.is_dir() else []
    if not files:
        problems.append("counters/: no switch counter dumps (switch-side statistics unavailable)")
        return []
    dumps = []
    for p in files:
        data = _read_json(p, problems, "switch counters")
        if data is None:
            continue
        data.setdefault("switch", p.stem)
        if not isinstance(data.get("queues", []), list):
            problems.append(f"counters/{p.name}: 'queues' is not a list (ignored)")
            data["queues"] = []
        dumps.append(data)
    return dumps


def _read_samples(run_path: pathlib.Path, problems: list[str]) -> dict[str, list[dict]]:
    """Queue samples of the built-in switches (JSON lines); a damaged line is skipped and noted,
    a cut-off last line (a killed switch) silently dropped. No file (bmv2): no samples."""
    out = {}
    for p in sorted((run_path / "counters").glob("*-samples.jsonl")):
        try:
            lines = p.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        except OSError as e:
            problems.append(f"counters/{p.name}: unreadable ({_one_line(e)})")
            continue
        if lines and not lines[-1].endswith("\n"):
            lines = lines[:-1]
        rows, bad = [], 0
        for line in lines:
            try:
                row = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(row, dict) and isinstance(row.get("t"), (int, float)) and isinstance(row.get("ports"), dict):
                rows.append(row)
            else:
                bad += 1
        if bad:
            problems.append(f"counters/{p.name}: {bad} malformed line(s) skipped")
        out[p.name[: -len("-samples.jsonl")]] = rows
    return out


def _read_progress(run_path: pathlib.Path, problems: list[str]) -> dict[str, dict]:
    d = run_path / "progress"
    out = {}
    for p in sorted(d.iterdir()) if d.is_dir() else []:
        try:
            state = json.loads(p.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            problems.append(f"progress/{p.name}: unreadable")
            continue
        if not isinstance(state, dict):
            continue
        out[p.name] = state
        if state.get("state") != "done":
            detail = f": {state['error']}" if state.get("error") else ""
            problems.append(
                f"progress/{p.name}: agent ended in state {state.get('state')!r} at iteration "
                f"{state.get('iter')}/{state.get('iters')}{detail}"
            )
    return out


# What each agent writes (agents/common.py, simulation/ns3/simulated_run.py), and what the report loses
# without it. Workers and the PS write message records and totals; workers also iteration records.
AGENT_RECORDS = (
    ("messages.csv", ("worker", "ps"), "its messages: MCT, loss and retransmission figures leave it out"),
    ("iterations.csv", ("worker",), "its iterations: iteration times and training curves leave it out"),
    ("agent.json", ("worker", "ps"), "its agent totals and receive-path keep-up figures unknown"),
)


UNSURE_ROLE = "agent"  # a host with message records but no iteration records and no topology.json


def agent_roles(run_path: pathlib.Path, topology: dict | None, agents: dict[str, dict]) -> dict[str, str]:
    """host -> role of every worker and PS of the run: from topology.json, else from the agents'
    totals and the records there are (a host with iteration records is a worker)."""
    hosts = (topology or {}).get("hosts")
    if isinstance(hosts, list):
        return {
            h["name"]: h["role"]
            for h in hosts
            if isinstance(h, dict) and isinstance(h.get("name"), str) and h.get("role") in ("worker", "ps")
        }
    roles: dict[str, str] = {h: a["role"] for h, a in agents.items() if a.get("role") in ("worker", "ps")}
    rec = run_path / "records"
    for p in rec.glob("*-iterations.csv"):
        roles.setdefault(p.name[: -len("-iterations.csv")], "worker")
    for p in rec.glob("*-messages.csv"):
        roles.setdefault(p.name[: -len("-messages.csv")], UNSURE_ROLE)
    return roles


def missing_records(run_path: pathlib.Path, topology: dict | None, agents: dict[str, dict]) -> list[str]:
    """One line per record file an agent of the run should have left and did not (deleted, or the
    agent never wrote it), naming the host and what the report cannot count without it. Kinds with
    no file at all are said once by `_read_records`; no records/ at all, likewise."""
    rec = run_path / "records"
    if not rec.is_dir():
        return []
    roles = agent_roles(run_path, topology, agents)
    out = []
    for suffix, writers, loses in AGENT_RECORDS:
        if not any(rec.glob(f"*-{suffix}")):
            continue
        for host, role in sorted(roles.items(), key=lambda hr: (len(hr[0]), hr[0])):
            expected = role in writers or (role == UNSURE_ROLE and "ps" in writers)
            if expected and not (rec / f"{host}-{suffix}").exists():
                out.append(f"records/{host}-{suffix}: missing ({role} {host}: {loses})")
    return out
