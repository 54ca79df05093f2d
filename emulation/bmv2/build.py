"""Compile p4/dlcp.p4 for bmv2 (`dlcp build`, `make p4`).

    p4c --target bmv2 --arch v1model -o build/p4 --p4runtime-files build/p4/dlcp.p4info.txtpb p4/dlcp.p4

p4c is found on PATH, or wherever DLCP_P4C points (a `p4c` driver or `p4c-bm2-ss` itself). The
outputs are `build/p4/dlcp.json` (bmv2 pipeline), `build/p4/dlcp.p4info.txtpb` (P4Info) and
`build/p4/build.json` (p4c version, data port, sources' digest: `ensure_built` rebuilds only when
one of those changed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from dlcp.wire.header import DATA_PORT

ROOT = Path(__file__).resolve().parents[2]
P4_MAIN = ROOT / "p4" / "dlcp.p4"
BUILD_DIR = ROOT / "build" / "p4"
P4C_ENV = "DLCP_P4C"


class P4BuildError(RuntimeError):
    """p4c missing or failing; the message says what to do."""


@dataclass(frozen=True)
class Build:
    json: Path
    p4info: Path
    p4c_version: str
    data_port: int


def find_tool(env_var: str, *names: str) -> str | None:
    """An executable: where `env_var` points (a path or a name on PATH), else the first of `names`
    on PATH."""
    env = os.environ.get(env_var)
    if env:
        return env if os.access(env, os.X_OK) else shutil.which(env)
    return next((p for p in map(shutil.which, names) if p), None)


def missing_tool_message(env_var: str, name: str, install: str, example: str) -> str:
    """One line: what is missing, how to install it, how to point the project at it."""
    env = os.environ.get(env_var)
    where = f"{env_var}={env} is not an executable" if env else f"{name} not found on PATH"
    return f"{where}: install {install} and put it on PATH, or set {env_var}={example}"


def find_p4c() -> str | None:
    return find_tool(P4C_ENV, "p4c", "p4c-bm2-ss")


def missing_p4c_message() -> str:
    return missing_tool_message(P4C_ENV, "p4c", "p4c (https://github.com/p4lang/p4c)", "/path/to/p4c (or p4c-bm2-ss)")


def p4c_version(p4c: str) -> str:
    try:
        out = subprocess.run([p4c, "--version"], capture_output=True, text=True, timeout=30)
    except OSError as e:
        raise P4BuildError(f"{p4c}: cannot run: {e}") from None
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[-1].strip() if lines else "unknown"


def sources_digest() -> str:
    h = hashlib.sha256()
    for p in sorted((ROOT / "p4").rglob("*.p4")):
        h.update(p.relative_to(ROOT).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def compile_command(p4c: str, out_dir: Path, data_port: int, main: Path = P4_MAIN) -> list[str]:
    p4info = out_dir / "dlcp.p4info.txtpb"
    defines = [] if data_port == DATA_PORT else [f"-DDLCP_DATA_PORT={data_port}"]
    if Path(p4c).name.startswith("p4c-bm2-ss"):
        return [
            p4c,
            "--arch",
            "v1model",
            *defines,
            "-o",
            str(out_dir / "dlcp.json"),
            "--p4runtime-files",
            str(p4info),
            str(main),
        ]
    return [
        p4c,
        "--target",
        "bmv2",
        "--arch",
        "v1model",
        "--std",
        "p4-16",
        *defines,
        "-o",
        str(out_dir),
        "--p4runtime-files",
        str(p4info),
        str(main),
    ]


def check_generated() -> None:
    """Refuse to compile P4 whose generated includes no longer match their definitions."""
    from dlcp import codegen

    stale = [p for p in codegen.stale(ROOT) if p.startswith("p4/")]
    if stale:
        raise P4BuildError(
            f"{stale[0]} is stale (its definition changed): run `make gen` (python -m dlcp.codegen) first"
        )


def build(out_dir: Path = BUILD_DIR, data_port: int = DATA_PORT, p4c: str | None = None) -> Build:
    """Compile unconditionally; raises P4BuildError with p4c's own messages on failure."""
    p4c = p4c or find_p4c()
    if p4c is None:
        raise P4BuildError(missing_p4c_message())
    if not 0 < data_port < 65536:
        raise P4BuildError(f"data port {data_port} outside 1..65535")
    check_generated()
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = compile_command(p4c, out_dir, data_port)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise P4BuildError(
            f"p4c failed (exit {proc.returncode}): {shlex.join(cmd)}\n{(proc.stderr or proc.stdout).strip()}"
        )
    result = Build(out_dir / "dlcp.json", out_dir / "dlcp.p4info.txtpb", p4c_version(p4c), data_port)
    for f in (result.json, result.p4info):
        if not f.is_file():
            raise P4BuildError(f"p4c succeeded but did not write {f}: {shlex.join(cmd)}")
    (out_dir / "build.json").write_text(
        json.dumps(
            {
                "p4c": p4c,
                "p4c_version": result.p4c_version,
                "data_port": data_port,
                "sources": sources_digest(),
                "command": cmd,
                "warnings": proc.stderr.strip(),
            },
            indent=2,
        )
        + "\n"
    )
    return result


def ensure_built(out_dir: Path = BUILD_DIR, data_port: int | None = None) -> Build:
    """The current build, compiling first if the sources or the data port changed.

    `data_port=None` keeps the data port of the existing build (default DATA_PORT)."""
    stamp = out_dir / "build.json"
    try:
        info = json.loads(stamp.read_text())
        data_port = info["data_port"] if data_port is None else data_port
        if (
            info["sources"] == sources_digest()
            and info["data_port"] == data_port
            and (out_dir / "dlcp.json").is_file()
            and (out_dir / "dlcp.p4info.txtpb").is_file()
        ):
            return Build(out_dir / "dlcp.json", out_dir / "dlcp.p4info.txtpb", info["p4c_version"], data_port)
    except (OSError, ValueError, KeyError):
        pass
    return build(out_dir, DATA_PORT if data_port is None else data_port)


def main(args: argparse.Namespace) -> int:
    """`dlcp build`."""
    try:
        b = build(Path(args.out) if args.out else BUILD_DIR, args.data_port)
    except P4BuildError as e:
        print(f"dlcp build: {e}", file=sys.stderr)
        return 1
    print(
        f"dlcp build: {b.json.relative_to(ROOT) if b.json.is_relative_to(ROOT) else b.json} and "
        f"{b.p4info.name} ({b.p4c_version}, DLCP data port {b.data_port})"
    )
    return 0
