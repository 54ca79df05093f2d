"""The generated P4, C and doc views of dlcp/wire/layout.py and dlcp/network/pipeline_names.py
(dlcp/codegen.py): current on disk, and following their definitions (a changed field width or table
name reaches P4, C and Python together). The C header is compiled and its values read back; with
p4c on PATH, a changed definition is compiled too and read back from p4c's own outputs."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dlcp import codegen
from dlcp.network import pipeline_names as P
from dlcp.wire.layout import LAYOUT, bit_shifts, length, numpy_dtype_spec, slots, struct_format

ROOT = Path(__file__).resolve().parents[2]
CC = shutil.which("cc") or shutil.which("gcc")


def wider_job_id():
    """LAYOUT with job_id widened from 8 to 16 bits: every later field moves by a byte."""
    return dataclasses.replace(
        LAYOUT, header=tuple(dataclasses.replace(f, bits=16) if f.name == "job_id" else f for f in LAYOUT.header)
    )


def renamed_lpm():
    """PIPELINE with the LPM table renamed (its symbol, the P4 program's handle on it, stays)."""
    return dataclasses.replace(
        P.PIPELINE,
        tables=tuple(
            dataclasses.replace(t, name="DlcpIngress.routes") if t.name == P.IPV4_LPM else t for t in P.PIPELINE.tables
        ),
    )


def c_values(header_text: str, names: list[str], tmp_path: Path) -> dict[str, int]:
    """Compile a program that includes `header_text` and prints each macro in `names`."""
    (tmp_path / "dlcp_wire.h").write_text(header_text)
    prints = "\n".join(f'    printf("{n} %lld\\n", (long long)({n}));' for n in names)
    (tmp_path / "probe.c").write_text(
        f'#include <stdio.h>\n#include "dlcp_wire.h"\nint main(void) {{\n{prints}\n    return 0;\n}}\n'
    )
    subprocess.run(
        [CC, "-Wall", "-Werror", "-o", str(tmp_path / "probe"), str(tmp_path / "probe.c")],
        check=True,
        capture_output=True,
        text=True,
    )
    out = subprocess.run([str(tmp_path / "probe")], check=True, capture_output=True, text=True).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


def expected_c(layout=LAYOUT, spec=P.PIPELINE) -> dict[str, int]:
    """What the C header must say, computed from the definitions (not from the generator)."""
    want = {
        "DLCP_OFF": layout.eth_len + layout.ipv4_len + layout.udp_len,
        "DLCP_VERSION": layout.version,
        "DLCP_HEADER_LEN": length(layout.header),
        "DLCP_TELEMETRY_LEN": length(layout.telemetry),
        "DLCP_DATA_PORT": layout.data_port,
        "MAX_PORTS": spec.max_ports,
        "N_QUEUES": spec.n_queues,
        "N_COLORS": spec.n_colors,
        "MAX_GROUPS": spec.max_groups,
    }
    for prefix, fields in (("DLCP", layout.header), ("DLCP_TEL", layout.telemetry)):
        for s in slots(fields):
            n = f"{prefix}_{s.name.upper()}"
            want.update({f"{n}_OFF": s.offset, f"{n}_SIZE": s.size, f"{n}_SHIFT": s.shift, f"{n}_MASK": s.mask})
    for part, prefix in (("types", "DLCP_TYPE_"), ("phases", "DLCP_PHASE_"), ("flags", "DLCP_FLAG_")):
        want.update({prefix + c.name: c.value for c in getattr(layout, part)})
    want.update({f"DSCP_{n.upper()}_SHIFT": v for n, v in bit_shifts(layout.dscp).items() if n != "zero"})
    want.update({f"DROP_{r.upper()}": i for r, i in spec.drop_reasons.items()})
    want.update({f"LB_{m.upper()}": v for m, v in spec.lb_modes.items()})
    for t in spec.tables:
        want.update({f"{t.sym}_DEFAULT_{p.upper()}": v for p, v in t.default_params.items()})
        for k, shift in P.key_shifts(t).items():
            key = next(x for x in t.keys if x.name == k)
            want.update({f"{t.sym}_{key.sym}_SHIFT": shift, f"{t.sym}_{key.sym}_BITS": key.bits})
    want.update({f"REGISTER_{r.sym}_SIZE": r.size for r in spec.registers})
    want.update({f"REGISTER_{r.sym}_BITS": r.bits for r in spec.registers})
    want.update({f"COUNTER_{c.sym}_SIZE": c.size for c in spec.counters})
    return want


def test_generated_files_are_current():
    assert codegen.stale() == [], "generated files are stale: run `make gen` (python -m dlcp.codegen)"


def test_every_generated_file_says_so():
    for rel, text in codegen.outputs().items():
        assert "do not edit" in text.splitlines()[0] or codegen.DOC_BEGIN in text, rel


def test_check_names_a_stale_file_and_write_fixes_it(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / codegen.WIRE_DOC, tmp_path / codegen.WIRE_DOC)
    assert sorted(codegen.write(tmp_path)) == sorted([codegen.P4_WIRE, codegen.P4_PIPELINE, codegen.C_HEADER])
    assert codegen.main(["--check", "--root", str(tmp_path)]) == 0
    header = tmp_path / codegen.C_HEADER
    header.write_text(
        header.read_text().replace(
            "#define N_QUEUES                             8", "#define N_QUEUES                             4"
        )
    )
    assert codegen.main(["--check", "--root", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"stale: {codegen.C_HEADER} (run `make gen`)\n"
    assert codegen.write(tmp_path) == [codegen.C_HEADER] and codegen.stale(tmp_path) == []


def test_doc_without_markers_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / codegen.WIRE_DOC).write_text("# Wire format\n")
    assert codegen.main(["--root", str(tmp_path)]) == 2
    assert "docs/wire-format.md: the generated-table markers are missing" in capsys.readouterr().err


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_c_header_agrees_with_the_definitions(tmp_path):
    want = expected_c()
    assert c_values(codegen.c_header(), sorted(want), tmp_path) == want


def test_field_width_change_reaches_p4_c_and_python(tmp_path):
    layout = wider_job_id()
    out = codegen.outputs(layout)
    # P4: the header type and its length
    assert re.search(r"bit<16>\s+job_id;", out[codegen.P4_WIRE])
    assert "/* 25 bytes, big-endian */" in out[codegen.P4_WIRE]
    assert not re.search(r"bit<8>\s+job_id;", out[codegen.P4_WIRE])
    # Python: the struct and numpy views header.py derives at import
    assert struct_format(layout.header) == "!BBHBHHHBBIII" and struct.calcsize(struct_format(layout.header)) == 25
    assert np.dtype(numpy_dtype_spec(layout.header))["job_id"] == np.dtype(">u2")
    # docs: the byte table
    assert "| 2-3 | 16 | `job_id` |" in out[codegen.WIRE_DOC] and "| 12 | 8 | `flags` |" in out[codegen.WIRE_DOC]
    # C: compiled and read back
    if CC is not None:
        got = c_values(
            out[codegen.C_HEADER],
            [
                "DLCP_HEADER_LEN",
                "DLCP_JOB_ID_SIZE",
                "DLCP_SRC_RANK_OFF",
                "DLCP_FLAGS_OFF",
                "DLCP_OFFSET_OFF",
                "DLCP_JOB_ID_MASK",
            ],
            tmp_path,
        )
        assert got == {
            "DLCP_HEADER_LEN": 25,
            "DLCP_JOB_ID_SIZE": 2,
            "DLCP_SRC_RANK_OFF": 4,
            "DLCP_FLAGS_OFF": 12,
            "DLCP_OFFSET_OFF": 21,
            "DLCP_JOB_ID_MASK": 0xFFFF,
        }


def test_table_rename_reaches_p4_and_python():
    spec = renamed_lpm()
    out = codegen.outputs(spec=spec)
    assert re.search(r'#define TABLE_IPV4_LPM\s+"\.DlcpIngress\.routes"', out[codegen.P4_PIPELINE])
    assert 'DlcpIngress.ipv4_lpm"' not in out[codegen.P4_PIPELINE]
    assert out[codegen.C_HEADER] == codegen.c_header()  # the fast path holds no names
    # Python: the runtime-file reader (tests/unit/test_runtime_file.py) and the P4Info the tests expect
    fake = pytest.importorskip("fake_p4runtime", reason="needs the bmv2 extra (make setup)")
    assert "DlcpIngress.routes" in {t.preamble.name for t in fake.expected_p4info(spec).tables}


# --- with p4c: the P4 program compiled from changed definitions ---------------------------------------


def _p4c():
    from emulation.bmv2 import build

    return build.find_p4c()


@pytest.mark.skipif(_p4c() is None, reason="p4c not found on PATH")
def test_changed_definitions_compile_and_show_in_p4cs_outputs(tmp_path):
    from emulation.bmv2 import build
    from emulation.bmv2.control import load_p4info

    shutil.copytree(ROOT / "p4", tmp_path / "p4")
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / codegen.WIRE_DOC, tmp_path / codegen.WIRE_DOC)
    codegen.write(tmp_path, wider_job_id(), renamed_lpm())
    out = tmp_path / "build"
    out.mkdir()
    cmd = build.compile_command(_p4c(), out, LAYOUT.data_port, main=tmp_path / "p4" / "dlcp.p4")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    info = load_p4info(out / "dlcp.p4info.txtpb")
    assert "DlcpIngress.routes" in {t.preamble.name for t in info.tables}
    assert P.IPV4_LPM not in {t.preamble.name for t in info.tables}
    bmv2 = json.loads((out / "dlcp.json").read_text())
    dlcp_t = next(h for h in bmv2["header_types"] if h["name"] == "dlcp_t")
    assert ["job_id", 16, False] in dlcp_t["fields"]


def test_dlcp_build_refuses_a_stale_p4_program(tmp_path, monkeypatch):
    from emulation.bmv2 import build

    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / codegen.WIRE_DOC, tmp_path / codegen.WIRE_DOC)
    codegen.write(tmp_path)
    monkeypatch.setattr(build, "ROOT", tmp_path)
    build.check_generated()  # current: fine
    (tmp_path / codegen.P4_PIPELINE).write_text("/* edited by hand */\n")
    with pytest.raises(build.P4BuildError, match="p4/include/generated/dlcp_pipeline.p4 is stale.*make gen"):
        build.check_generated()
