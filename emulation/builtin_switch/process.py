"""The switch process around an engine: port sockets, signals, the control socket, counter dumps.

The engine (C fast path, or the Python reference engine) forwards until time is up, a wake fd is
readable (a signal arrived, a control client connected) or a port's socket fails; this shell then
does the slow work (dump counters, answer the control socket, retire a vanished port) and calls it
again. Signals only set flags, so engine state is never touched concurrently.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dlcp.network.runtime_file import DEFAULT_QUEUE_DEPTH_PKTS, Runtime
from dlcp.switch import counter_dump as C
from dlcp.switch.pipeline import Pipeline
from emulation.builtin_switch import fastpath_source
from emulation.builtin_switch.afpacket import new_kernel_drops, open_port_socket
from emulation.builtin_switch.pyengine import PyEngine

ENGINES = ("auto", "c", "python")
BACKEND = "builtin"  # the backend whose switches this process is (dlcp/backends.py), in its counter dumps
RUN_SLICE_S = 0.5
MAX_LAG_S = 0.002  # catch-up a rate-limited port may take after a late wake-up


@dataclass
class Options:
    name: str = ""
    counters_path: str | None = None
    control_path: str | None = None
    pcap_dir: str | None = None
    pcap_ports: tuple[int, ...] = ()
    debug_log: bool = False
    batch: int = 64
    seed: int | None = None
    data_port: int = 9910
    engine: str = "auto"
    samples_path: str | None = None  # periodic queue samples (JSON lines), see Sampler
    sample_period_s: float = 0.1


def load_fastpath():
    """The C engine module, checked to be built from the sources beside it (ImportError if not)."""
    from emulation.builtin_switch import _fastpath

    if all(path.exists() for path in fastpath_source.SOURCES):  # noqa: SIM102
        if getattr(_fastpath, "SOURCE_SHA", None) != fastpath_source.source_sha():
            raise ImportError(
                "the built _fastpath module is stale (built from another _fastpath.c or "
                "dlcp_wire.h); rebuild with make setup"
            )
    return _fastpath


def make_engine(pipeline: Pipeline, opts: Options):
    """(engine, name): the C fast path unless asked otherwise, absent, or --debug-log is on."""
    if opts.engine != "python" and not opts.debug_log:
        try:
            _fastpath = load_fastpath()
        except ImportError as e:
            if opts.engine == "c":
                raise SystemExit(f"builtin_switch: the C engine is not usable ({e}); make setup builds it") from e
            print(f"builtin_switch: C engine not available ({e}); using the Python engine", file=sys.stderr)
        else:
            eng = _fastpath.Engine(
                batch=opts.batch,
                data_port=opts.data_port,
                seed=opts.seed if opts.seed is not None else int.from_bytes(os.urandom(8), "little"),
            )
            eng.set_tables(*pipeline.compiled_tables())
            eng.set_ecn(pipeline.ecn_k)
            return eng, "c"
    elif opts.engine == "c":
        raise SystemExit("builtin_switch: --debug-log needs the Python engine")
    return PyEngine(pipeline, batch=opts.batch, debug_log=opts.debug_log, max_lag_s=MAX_LAG_S), "python"


class Sampler:
    """Queue samples every `period` seconds, one JSON line each, for timelines of queue depth and
    drops: {"t": Unix time, "ports": {port: {"occ": [8 occupancies now, by qid], "peak": [8 highest
    since the last sample], "admitted"|"early"|"tail": packets so far, "non_dlcp_admitted"|...: the
    part of them without a DLCP header}}}. Counts are cumulative; a reader takes differences."""

    def __init__(self, path: str, period_s: float, ports: list[int]):
        self.file = open(path, "a", buffering=1 << 16)  # noqa: SIM115 (open for the switch's lifetime)
        self.period_s, self.ports = period_s, ports
        self.next_t = time.monotonic()
        self.last_flush = self.next_t

    def due_in(self) -> float:
        return max(0.0, self.next_t - time.monotonic())

    def take(self, engine, force: bool = False) -> None:
        """A sample when one is due (or `force`: the last one, at stop, so the samples end with the
        final counts)."""
        now = time.monotonic()
        if now < self.next_t and not force:
            return
        raw = engine.sample()
        ports = {}
        for p in self.ports:
            row = {"occ": raw["occupancy"][p * 8 : (p + 1) * 8], "peak": raw["peak"][p * 8 : (p + 1) * 8]}
            for kind in ("admitted", "early", "tail"):
                row[kind] = raw[f"{kind}_pkts"][p]
                row[f"non_dlcp_{kind}"] = raw[f"non_dlcp_{kind}_pkts"][p]
            ports[str(p)] = row
        self.file.write(json.dumps({"t": round(time.time(), 4), "ports": ports}, separators=(",", ":")) + "\n")
        self.next_t = max(self.next_t + self.period_s, now)
        if now - self.last_flush >= 1.0:  # a killed switch loses at most a second of samples
            self.file.flush()
            self.last_flush = now

    def close(self) -> None:
        self.file.close()


class Switch:
    def __init__(self, runtime: Runtime, opts: Options):
        self.opts = opts
        self.name = opts.name or runtime.switch or "switch"
        self.runtime = runtime
        self.pipeline = Pipeline(runtime, data_port=opts.data_port, seed=opts.seed)
        self.engine, self.engine_name = make_engine(self.pipeline, opts)
        self.socks: dict[int, socket.socket] = {}
        self.kernel_drops = {p.port: 0 for p in runtime.ports}
        self.gone: set[int] = set()
        self.stopping = False
        self.dump_requested = False
        self.control: socket.socket | None = None
        self._wake_r = self._wake_w = None
        self.sampler: Sampler | None = None

    # --- set-up and tear-down ----------------------------------------------------------------

    def open(self) -> None:
        missing = set(self.opts.pcap_ports) - {p.port for p in self.runtime.ports}
        if missing:
            raise SystemExit(
                f"builtin_switch {self.name}: --pcap-port {sorted(missing)[0]} is not a port of {self.runtime.source}"
            )
        for cfg in self.runtime.ports:
            try:
                sock = open_port_socket(cfg.intf)
            except OSError as e:
                raise SystemExit(
                    f"builtin_switch {self.name}: port {cfg.port}: interface {cfg.intf}: {e.strerror or e}"
                ) from None
            self.socks[cfg.port] = sock
            pcap = None
            if cfg.port in self.opts.pcap_ports:
                Path(self.opts.pcap_dir).mkdir(parents=True, exist_ok=True)
                pcap = str(Path(self.opts.pcap_dir) / f"{cfg.intf}.pcap")
            if self.engine_name == "c":
                self.engine.add_port(
                    cfg.port,
                    sock.fileno(),
                    cfg.rate_bps or 0.0,
                    cfg.rate_pps or 0.0,
                    cfg.queue_depth_pkts or DEFAULT_QUEUE_DEPTH_PKTS,
                    cfg.delay_us / 1e6,
                    cfg.loss,
                    MAX_LAG_S,
                    pcap,
                    cfg.host_nic,
                )
                self.engine.set_queueing(cfg.port, cfg.queueing.discipline.c_id, cfg.queueing.c_params())
            else:
                self.engine.add_port(cfg, sock, pcap)
        if self.opts.samples_path:
            Path(self.opts.samples_path).parent.mkdir(parents=True, exist_ok=True)
            self.sampler = Sampler(
                self.opts.samples_path, self.opts.sample_period_s, [p.port for p in self.runtime.ports]
            )
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)
        signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGUSR1, self._on_dump)
        if self.opts.control_path:
            path = Path(self.opts.control_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.unlink(missing_ok=True)
            self.control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.control.bind(str(path))
            self.control.listen(8)
            self.control.setblocking(False)

    def close(self) -> None:
        if self.sampler:  # what arrived since the last periodic sample
            self.sampler.take(self.engine, force=True)
        if isinstance(self.engine, PyEngine):
            self.engine.close()
        for s in self.socks.values():
            s.close()
        self.socks.clear()
        if self.sampler:
            self.sampler.close()
            self.sampler = None
        if self.control:
            self.control.close()
            self.control = None
            Path(self.opts.control_path).unlink(missing_ok=True)

    def _on_stop(self, signum, frame) -> None:
        self.stopping = True

    def _on_dump(self, signum, frame) -> None:
        self.dump_requested = True

    # --- counters ----------------------------------------------------------------------------

    def snapshot(self) -> dict:
        raw = self.engine.counters()
        for port, s in self.socks.items():
            self.kernel_drops[port] += new_kernel_drops(s)
        ports = [
            C.port_row(
                cfg.port,
                cfg.intf,
                {**raw["ports"][cfg.port], "rx_kernel_drops": self.kernel_drops[cfg.port]},
                "gone" if cfg.port in self.gone else "up",
            )
            for cfg in self.runtime.ports
        ]
        return C.snapshot(self.name, raw, ports, self.engine_name, backend=BACKEND)

    def dump(self) -> str | None:
        self.engine.flush()
        if not self.opts.counters_path:
            return None
        C.write_json_atomic(self.opts.counters_path, self.snapshot())
        return self.opts.counters_path

    # --- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        gc.disable()  # the hot path makes no reference cycles; collections would only add latency
        print(f"builtin_switch {self.name} ready: {len(self.socks)} ports, {self.engine_name} engine", flush=True)
        wake = [self._wake_r.fileno()] + ([self.control.fileno()] if self.control else [])
        while not self.stopping:
            slice_s = RUN_SLICE_S if self.sampler is None else min(RUN_SLICE_S, self.sampler.due_in())
            reason, port, err = self.engine.run(slice_s, wake)
            if self.sampler is not None:
                self.sampler.take(self.engine)
            if reason == 2:
                self._port_error(port, err)
            self._drain_wakeups()
            self._serve_control()
            if self.dump_requested:
                self.dump_requested = False
                self.dump()

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(256):
                pass
        except BlockingIOError:
            pass

    def _port_error(self, port: int, err: int) -> None:
        """A socket error: keep the port if its interface still exists (it was down for a moment),
        otherwise retire it; its packets count as tx_errors from then on."""
        cfg = next(c for c in self.runtime.ports if c.port == port)
        try:
            socket.if_nametoindex(cfg.intf)
        except OSError:
            self.engine.port_gone(port)
            s = self.socks.pop(port, None)
            if s is not None:
                self.kernel_drops[port] += new_kernel_drops(s)
                s.close()
            self.gone.add(port)
            print(
                f"builtin_switch {self.name}: port {port}: interface {cfg.intf} is gone; forwarding on the other ports",
                file=sys.stderr,
                flush=True,
            )
            return
        print(
            f"builtin_switch {self.name}: port {port} ({cfg.intf}): {os.strerror(err) if err else 'socket error'}"
            f"{' (link down?)' if err == errno.ENETDOWN else ''}",
            file=sys.stderr,
            flush=True,
        )

    def _serve_control(self) -> None:
        """Answer pending control connections: one command line in, one JSON line out."""
        if self.control is None:
            return
        while True:
            try:
                conn, _ = self.control.accept()
            except BlockingIOError:
                return
            with conn:
                conn.settimeout(1.0)
                try:
                    line = conn.makefile("r").readline().strip()
                    conn.sendall((json.dumps(self._command(line)) + "\n").encode())
                except (OSError, ValueError):
                    continue

    def _command(self, line: str) -> dict:
        cmd = line.split()[0] if line else ""
        if cmd == "ping":
            return {"ok": True, "switch": self.name, "pid": os.getpid(), "engine": self.engine_name}
        if cmd == "counters":
            return {"ok": True, "counters": self.snapshot()}
        if cmd == "dump":
            return {"ok": True, "path": self.dump()}
        return {"ok": False, "error": f"unknown command {cmd!r} (ping, counters, dump)"}


def control_request(path: str | Path, command: str, timeout: float = 2.0) -> dict:
    """Send one command to a running switch's control socket and return its JSON answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        s.sendall((command + "\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    return json.loads(data)
