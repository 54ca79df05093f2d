"""Registries (dlcp/registry.py): a scheduler, a collective or a fill rule is one module that
registers itself, and everything users see comes from the registry. A throwaway scheduler and a
throwaway collective, each registered from a module written into a temporary directory, are
accepted and checked by config validation, offered by the CLIs, listed by the docs generator, and
run."""

from __future__ import annotations

import importlib
import sys
import textwrap

import numpy as np
import pytest

from dlcp.comm.plans.collective import COLLECTIVES
from dlcp.comm.schedulers import SCHEDULERS
from dlcp.experiment import config as configmod
from dlcp.registry import Entry, Registry, RegistryError, UnknownName
from dlcp.settings import ConfigError
from dlcp.workloads.fills import FILLS

SCHEDULER_MODULE = '''
"""A throwaway scheduler: whole tensors in groups of `width`, the way a new scheduler is added."""

from pydantic import Field

from dlcp.comm.schedulers.base import register_scheduler
from dlcp.comm.schedulers.grouped import GroupedAllReduce
from dlcp.settings import Settings


class ThrowawayOptions(Settings):
    width: int = Field(2, ge=1, description="throwaway: tensors per group")


@register_scheduler("throwaway", "a test's scheduler: consecutive tensors in groups of width", ThrowawayOptions)
class Throwaway(GroupedAllReduce):
    def __init__(self, profile, cost=None, workers=None, width: int = 2):
        n = len(profile.sizes)
        super().__init__(profile.sizes, [list(range(i, min(i + width, n))) for i in range(0, n, width)])
'''

COLLECTIVE_MODULE = '''
"""A throwaway collective: the ring with its ranks in reverse order."""

from pydantic import Field

from dlcp.comm.plans.collective import CollectiveEntry, FixedSchedule, register_collective, spec_for, worker_hosts
from dlcp.comm.plans.ring import ring_schedule
from dlcp.settings import BadValue, Settings


class ReversedOptions(Settings):
    hops: int = Field(1, ge=1, le=1, description="reversed_ring: ranks between neighbours")


def _plan(options, workers, spec):
    spec = spec_for(workers, spec)
    return FixedSchedule("reversed_ring", ring_schedule(spec, worker_hosts(spec, workers)[::-1]))


def _check(options, scheduler, workers):
    if workers is not None and workers < 3:
        raise BadValue("reversed_ring.hops", f"needs 3 workers, not {workers}")


register_collective(
    CollectiveEntry(
        name="reversed_ring",
        description="a test's collective: the ring, ranks reversed",
        options=ReversedOptions,
        plan=_plan,
        describe=lambda options, workers, spec: {"collective": "reversed_ring", "steps_per_phase": workers - 1},
        check=_check,
    )
)
'''


def _register_from(tmp_path, monkeypatch, name: str, source: str):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(name)


@pytest.fixture
def throwaway_scheduler(tmp_path, monkeypatch):
    _register_from(tmp_path, monkeypatch, "throwaway_scheduler_module", SCHEDULER_MODULE)
    yield "throwaway"
    SCHEDULERS.unregister("throwaway")
    sys.modules.pop("throwaway_scheduler_module", None)


@pytest.fixture
def throwaway_collective(tmp_path, monkeypatch):
    _register_from(tmp_path, monkeypatch, "throwaway_collective_module", COLLECTIVE_MODULE)
    yield "reversed_ring"
    COLLECTIVES.unregister("reversed_ring")
    sys.modules.pop("throwaway_collective_module", None)


def allreduce(**comm) -> dict:
    return {"name": "t", "workload": {"mode": "allreduce", "workers": 4}, "comm": comm}


# --- a new scheduler ---------------------------------------------------------------------------------


def test_a_registered_scheduler_is_a_config_value_with_its_own_section(throwaway_scheduler):
    cfg = configmod.validate(allreduce(scheduler="throwaway", throwaway={"width": 3}))
    assert cfg["comm"]["scheduler"] == "throwaway" and cfg["comm"]["throwaway"] == {"width": 3}
    assert configmod.validate(allreduce())["comm"]["throwaway"] == {"width": 2}  # defaults, like every section
    with pytest.raises(ConfigError, match=r"^comm.throwaway.width: 0 is below the minimum 1$"):
        configmod.validate(allreduce(scheduler="throwaway", throwaway={"width": 0}))
    with pytest.raises(ConfigError, match=r"^comm.throwaway.depth: unknown key \(known: width\)$"):
        configmod.validate(allreduce(throwaway={"depth": 1}))
    text = configmod.dumps(configmod.validate(allreduce(scheduler="throwaway")))
    assert 'scheduler = "throwaway"' in text and "throwaway = {width = 2}" in text


def test_a_registered_scheduler_is_offered_by_the_clis(throwaway_scheduler):
    from dlcp.comm.schedulers_bench import timeline_rows
    from dlcp.workloads.profile import load_profile
    from dlcp_cli import schedule_cmd, sweep

    choices = next(a.choices for a in schedule_cmd.build_parser()._actions if a.dest == "scheduler")
    assert "throwaway" in choices
    assert sweep.full_key("width") == "comm.throwaway.width"
    plan = schedule_cmd.scheduler_plan(
        schedule_cmd.build_parser().parse_args(
            [
                "--scheduler",
                "throwaway",
                "--profile",
                "vgg16-usbyte",
                "--workers",
                "4",
                "--rate-gbps",
                "10",
                "--option",
                "width=4",
            ]
        )
    )
    assert plan["groups"][0] == [0, 1, 2, 3]
    rows = timeline_rows([load_profile("vgg16-usbyte")], [4], 10.0, 30e-6)  # `dlcp bench schedulers`' table
    assert rows[0]["throwaway"] >= rows[0]["compute_ms"]


def test_a_registered_scheduler_is_in_the_generated_docs(throwaway_scheduler):
    keys = configmod.schema_markdown()
    assert "`bytescheduler` / `dear` / `mgwfbp` / `oasr` / `throwaway` / `usbyte` / `wfbp`" in keys
    assert "| `comm.throwaway.width` | integer | `2` | throwaway: tensors per group; >= 1 |" in keys
    values = configmod.values_markdown()
    assert "| `comm.scheduler` | `throwaway` | a test's scheduler: consecutive tensors in groups of width |" in values


def test_a_registered_scheduler_runs(throwaway_scheduler):
    from test_comm_layer import BACKWARD_MS, LAYOUTS, N_LAYERS, all_reduce_rounds, check_sums

    from dlcp.comm.costmodel import CostModel
    from dlcp.comm.inmemory import memory_communicators
    from dlcp.comm.prediction import predict
    from dlcp.comm.settings import CommSetup
    from dlcp.workloads.profile import load_profile

    comm = CommSetup(scheduler="throwaway", throwaway={"width": 2})
    assert comm.scheduler_options() == {"width": 2}
    comms, _ = memory_communicators(3, LAYOUTS, N_LAYERS, comm, backward_ms=BACKWARD_MS)
    assert len(comms[0].units) == (len(LAYOUTS) + 1) // 2  # one operation per group of two tensors
    check_sums(all_reduce_rounds(comms, 2))
    _, tl = predict("throwaway", load_profile("vgg16-usbyte"), 4, CostModel(1e-3, 1e-9, workers=4), width=3)
    assert tl.iteration_s > 0


def test_without_its_module_the_name_is_unknown_again(throwaway_scheduler):
    entry = SCHEDULERS.unregister("throwaway")
    try:
        with pytest.raises(ConfigError, match="comm.scheduler: 'throwaway' is not one of bytescheduler, dear"):
            configmod.validate(allreduce(scheduler="throwaway"))
        with pytest.raises(ConfigError, match="comm.throwaway: unknown key"):
            configmod.validate(allreduce(throwaway={"width": 2}))
    finally:
        SCHEDULERS.register(entry)


# --- a new collective ----------------------------------------------------------------------------------


def test_a_registered_collective_is_checked_planned_offered_and_documented(throwaway_collective):
    from dlcp.comm.assemble import step_plan
    from dlcp.comm.settings import CommSetup
    from dlcp_cli import schedule_cmd

    cfg = configmod.validate(allreduce(collective="reversed_ring"))
    assert cfg["comm"]["reversed_ring"] == {"hops": 1}
    with pytest.raises(ConfigError, match=r"^comm.reversed_ring.hops: needs 3 workers, not 2$"):
        configmod.validate({**allreduce(collective="reversed_ring"), "workload": {"mode": "allreduce", "workers": 2}})
    plan = step_plan(CommSetup(collective="reversed_ring"), 4)
    assert plan.collective == "reversed_ring" and plan.schedule(0).hosts == ("h4", "h3", "h2", "h1")
    ap = schedule_cmd.build_parser()
    assert "reversed_ring" in next(a.choices for a in ap._actions if a.dest == "collective")
    assert (
        schedule_cmd.collective_plan(ap.parse_args(["--collective", "reversed_ring", "--workers", "5", "--hops", "1"]))[
            "steps_per_phase"
        ]
        == 4
    )
    assert "| `comm.reversed_ring.hops` | integer | `1` |" in configmod.schema_markdown()
    assert "| `comm.collective` | `reversed_ring` | a test's collective: the ring, ranks reversed |" in (
        configmod.values_markdown()
    )


# --- the registry itself -------------------------------------------------------------------------------


def test_lookups_and_registrations_fail_in_one_line_naming_the_known():
    reg: Registry[Entry] = Registry("widget")
    reg.register(Entry("b", "the second"))
    reg.register(Entry("a", "the first"))
    assert reg.names() == ("b", "a") and reg.choices() == ("a", "b") and list(reg) == ["b", "a"] and "a" in reg
    assert reg.get("a").description == "the first" and reg["b"] is reg.get("b")
    with pytest.raises(UnknownName, match=r"^widget 'c' is not one of a, b$"):
        reg.get("c")
    with pytest.raises(RegistryError, match=r"^widget 'a' is registered twice$"):
        reg.register(Entry("a", "again"))
    with pytest.raises(RegistryError, match=r"^widget name 'A b'"):
        reg.register(Entry("A b", "bad name"))
    with pytest.raises(RegistryError, match="one non-empty line"):
        reg.register(Entry("c", "two\nlines"))
    with pytest.raises(ValueError, match=r"^'c' is not one of a, b$"):
        reg.check("c")


def test_discovery_imports_the_package_on_first_lookup_only():
    reg: Registry[Entry] = Registry("scheduler module", discover="dlcp.comm.schedulers")
    assert reg._discovered is False
    reg.names()  # imports every scheduler module (registering into SCHEDULERS, not here)
    assert reg._discovered and {"dlcp.comm.schedulers.wfbp", "dlcp.comm.schedulers.dear"} <= set(sys.modules)


def test_the_built_in_entries():
    assert SCHEDULERS.choices() == ("bytescheduler", "dear", "mgwfbp", "oasr", "usbyte", "wfbp")
    assert COLLECTIVES.choices() == ("dssync", "dtree", "multitree", "ring", "ring2d", "tar")
    assert FILLS.choices() == ("bubble", "local", "rescale", "stale", "zero")
    assert all(SCHEDULERS[n].cls.name == n for n in SCHEDULERS)  # the decorator names the class


def test_collective_traits_come_from_the_entry():
    from dlcp.comm.settings import CommSetup

    dssync = CommSetup(collective="dssync")
    assert dssync.averages_parameters() and not dssync.resyncs()
    assert not CommSetup(collective="dssync", dssync={"average": "gradients"}).averages_parameters()
    ring = CommSetup()
    assert not ring.averages_parameters() and ring.resyncs()


def test_fill_rules_are_one_formula_for_numpy_and_torch():
    torch = pytest.importorskip("torch")
    from dlcp.workloads.contract import Aggregate
    from dlcp.workloads.fills import fill_mean
    from dlcp.workloads.trainer.fill import fill_average

    rng = np.random.default_rng(3)
    count = rng.integers(0, 5, 500).astype(np.uint16)
    total = (rng.standard_normal(500) * count).astype(np.float32)
    agg = Aggregate(1, total, count, 4)
    prev, own = (rng.standard_normal(500).astype(np.float32) for _ in range(2))
    for name in FILLS:
        for p, o in ((prev, own), (None, None)):
            a = fill_mean(name, total, count, 4, p, o)
            b = fill_average(agg, name, previous=p, own=o).numpy()
            assert a.dtype == b.dtype == np.float32 and np.array_equal(a, b), name
    assert isinstance(torch.zeros(1), torch.Tensor)
