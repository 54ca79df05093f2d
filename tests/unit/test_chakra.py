"""Chakra execution traces in and out (dlcp/workloads/chakra.py) on real files: ASTRA-sim's
microbenchmark ETs (tests/data/chakra/astra-sim, provenance in its README) and our own export of a
run, read back with Chakra's own reader (`protolib`) and Chakra's et_def schema for the installed
protobuf. Needs the `chakra` extra (mlc-chakra)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("chakra.src.third_party.utils.protolib")

from dlcp.experiment import config as configmod
from dlcp.experiment.chakra_export import export_run
from dlcp.workloads.chakra import NotMappable, bindings_path, et_schema, profile_from_et, read_et
from dlcp.workloads.profile import load_profile

ASTRA = Path(__file__).resolve().parents[1] / "data" / "chakra" / "astra-sim"


def test_schema_is_chakras_et_def_for_this_protobuf():
    """Every message field and enum value of the classes we use is in Chakra's et_def.proto, with its
    number; where Chakra's own bindings import (protobuf >= 6.31) they are what we use."""
    schema = et_schema()
    proto = (bindings_path().parent / "et_def.proto").read_text()
    fd = schema.file_descriptor
    fields = 0
    for msg in fd.message_types_by_name.values():
        assert re.search(rf"message {msg.name} \{{", proto), msg.name
        for f in msg.fields:
            assert re.search(rf"\b{f.name} = {f.number};", proto), f"{msg.name}.{f.name}"
            fields += 1
    for enum in fd.enum_types_by_name.values():
        for v in enum.values:
            assert re.search(rf"\b{v.name} = {v.number};", proto), v.name
    assert fields > 60 and schema.NodeType["COMM_COLL_NODE"] == 7 and schema.CollectiveCommType["ALL_REDUCE"] == 0
    try:
        from chakra.schema.protobuf import et_def_pb2
    except (ImportError, TypeError):
        assert "built for this protobuf runtime" in schema.source
    else:
        assert schema.Node is et_def_pb2.Node


@pytest.mark.parametrize("rank", range(4))
def test_astra_sim_all_reduce_microbenchmark_imports(rank):
    p = profile_from_et(ASTRA / "all_reduce" / "4npus_1MB" / f"all_reduce.{rank}.et")
    assert p.sizes == (1 << 18,) and p.nbytes == [1 << 20]  # 1 MB of fp32
    assert p.compute_s == 0 and p.names == ("all_reduce_4npus_1MB",)
    assert "all_reduce" in p.note and "schema 0.0.4" in p.note


@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter", "all_to_all"])
def test_other_astra_sim_microbenchmarks_are_refused_with_one_line(collective):
    f = ASTRA / collective / "4npus_1MB" / f"{collective}.0.et"
    with pytest.raises(NotMappable) as e:
        profile_from_et(f)
    msg = str(e.value)
    assert msg.startswith(f"{f}: node 0 '{collective}_4npus_1MB': {collective.upper()} is not a data-parallel")
    assert "\n" not in msg


def _run_dir(tmp_path, **workload) -> Path:
    raw = {
        "name": "exp",
        "backend": "ns3",
        "workload": {
            "mode": "allreduce",
            "workers": 4,
            "model": "synthetic",
            "compute": "profile",
            "profile": "resnet50-fp32-b64-h200",
            "iterations": 2,
            **workload,
        },
    }
    run = tmp_path / "run"
    run.mkdir(parents=True)
    (run / "config.toml").write_text(configmod.dumps(configmod.validate(raw)))
    return run


def test_exported_run_loads_with_chakras_reader_and_imports_back(tmp_path):
    run = _run_dir(tmp_path, compute_scale=2)
    paths = export_run(run, tmp_path / "et")
    assert [p.name for p in paths] == [f"exp.{r}.et" for r in range(4)]
    schema = et_schema()
    source = load_profile("resnet50-fp32-b64-h200")
    for path in paths:  # Chakra's own reader, record by record
        with path.open("rb") as f:
            meta = schema.GlobalMetadata()
            assert schema.protolib.decodeMessage(f, meta) and meta.version == "0.0.4"
            nodes = []
            node = schema.Node()
            while schema.protolib.decodeMessage(f, node):
                nodes.append(node)
                node = schema.Node()
        per_iteration = 2 * len(source) + len(source)  # forward, backward, one all-reduce per tensor
        assert len(nodes) == 2 * per_iteration
        assert len({n.id for n in nodes}) == len(nodes)
    back = profile_from_et(paths[0])
    assert back.sizes == source.sizes and len(back) == 161
    assert back.names[0] == "COMM_COLL_NODE_conv1.weight_ALLREDUCE"
    # whole microseconds, the compute scale applied
    assert back.forward_s == pytest.approx([2 * t for t in source.forward_s], abs=0.6e-6)
    assert back.backward_s == pytest.approx([2 * t for t in source.backward_s], abs=0.6e-6)
    assert "node(s) of later iterations left out" in back.note


def test_export_of_bucketed_messages_and_the_cli(tmp_path):
    run = _run_dir(tmp_path, profile="vgg16-fp32-b64-h200", bucket_values=6553600)
    p = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "chakra", "export", str(run), "--iterations", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    et = run / "chakra" / "exp.0.et"
    meta, nodes = read_et(et)
    reduces = [n for n in nodes if n.type == et_schema().NodeType["COMM_COLL_NODE"]]
    source = load_profile("vgg16-fp32-b64-h200")
    assert sum(a.int64_val for n in reduces for a in n.attr if a.name == "comm_size") == 4 * source.parameters
    out = tmp_path / "back.json"
    imp = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "chakra", "import", str(et), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert imp.returncode == 0, imp.stderr
    back = load_profile(out)
    assert back.parameters == source.parameters and len(back) == len(reduces) < len(source)
    assert back.compute_s == pytest.approx(source.compute_s, abs=len(source) * 1.2e-6)
    real = _run_dir(tmp_path / "r", compute="real", profile="")
    bad = subprocess.run(
        [sys.executable, "-m", "dlcp_cli", "chakra", "export", str(real)], capture_output=True, text=True, timeout=300
    )
    assert bad.returncode == 2 and "compute = 'real'" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_pipeline_parallel_send_is_refused(tmp_path):
    schema = et_schema()
    f = tmp_path / "pp.0.et"
    with f.open("wb") as out:
        schema.protolib.encodeMessage(out, schema.GlobalMetadata(version="0.0.4"))
        schema.protolib.encodeMessage(
            out, schema.Node(id=3, name="send_activations", type=schema.NodeType["COMM_SEND_NODE"])
        )
    with pytest.raises(NotMappable, match=r"node 3 'send_activations': COMM_SEND_NODE: point-to-point"):
        profile_from_et(f)
