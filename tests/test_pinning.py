"""The instance pinning rule (issue 17): pin slices of 2+ cores or whole NUMA nodes; leave
one-core slices unpinned with capped pools, as measured faster."""

from __future__ import annotations

from hwtune.apply.launch import instance_pinning
from hwtune.models.hardware import CpuInfo, Hardware, Limits, LogicalCpu, NumaNode
from hwtune.planner import plan
from hwtune.planner.instances import MIN_PINNED_CORES, pinning


def machine(cores: int, nodes: int = 1, smt: int = 1) -> Hardware:
    """`cores` physical cores (`smt` CPUs each) spread evenly over `nodes` NUMA nodes."""
    cpus = cores * smt
    per_node = cores // nodes
    topology = tuple(
        LogicalCpu(cpu, socket=0, core=cpu % cores, node=(cpu % cores) // per_node)
        for cpu in range(cpus)
    )
    numa = tuple(
        NumaNode(n, tuple(lc.cpu for lc in topology if lc.node == n)) for n in range(nodes)
    )
    everything = tuple(range(cpus))
    return Hardware(
        cpu=CpuInfo(
            arch="x86_64",
            physical_cores=cores,
            logical_cpus=cpus,
            threads_per_core=smt,
            online_cpus=everything,
            topology=topology,
        ),
        numa=numa if nodes > 1 else (),
        limits=Limits(affinity_cpus=everything, usable_cpus=everything, effective_cpus=cpus),
    )


def test_one_core_slices_are_left_unpinned_with_the_measurement_as_reason() -> None:
    hw = machine(2)
    decision = pinning(hw, [(0,), (1,)])
    assert not decision.pinned
    assert "0.61-0.86x" in decision.reason and "2-vCPU EPYC VM" in decision.reason
    # The planner still caps each copy's pools to its slice: one intra-op thread each.
    profile = plan(hw, instances=2, instance=1)
    assert profile.threads.intra_op.value == 1
    assert not instance_pinning(profile, hw).pinned


def test_slices_of_two_cores_or_more_are_pinned() -> None:
    assert MIN_PINNED_CORES == 2
    hw = machine(4)
    profile = plan(hw, instances=2)
    decision = instance_pinning(profile, hw)
    assert decision.pinned and "2+ physical cores" in decision.reason
    # Three instances on four cores: one slice has a single core, so none is pinned.
    assert not instance_pinning(plan(hw, instances=3), hw).pinned


def test_smt_siblings_do_not_make_a_core_big_enough() -> None:
    hw = machine(2, smt=2)  # two cores, four CPUs: each slice is one core with its sibling
    assert not instance_pinning(plan(hw, instances=2), hw).pinned


def test_whole_numa_nodes_are_pinned_even_when_small() -> None:
    hw = machine(2, nodes=2)  # one core per node
    decision = pinning(hw, [(0,), (1,)])
    assert decision.pinned and "whole NUMA nodes" in decision.reason
    # Half a node is not a node boundary: falls back to the core count.
    hw4 = machine(4, nodes=2)
    assert not pinning(hw4, [(0,), (1,), (2,), (3,)]).pinned


def test_one_instance_keeps_its_cpus() -> None:
    hw = machine(2)
    assert pinning(hw, [(0, 1)]).pinned


def test_plan_explain_and_json_say_when_exec_pins() -> None:
    from hwtune.models.convert import dump
    from hwtune.planner.explain import explain

    hw = machine(2)
    two = plan(hw, instances=2)
    assert two.pinning is not None and two.pinning.value is False and two.pinning.source == "rule"
    assert two.pinning.reason == pinning(hw, [(0,), (1,)]).reason
    text = explain(two, "instance")
    assert "slices never share a physical core" in text and "pinning = false" in text
    assert "left unpinned" in explain(two, "pinning")
    assert dump(two)["pinning"]["value"] is False  # `plan --json`
    four = plan(machine(4), instances=2).pinning
    assert four is not None and four.value is True
    alone = plan(hw)
    assert alone.pinning is None and "pinning" not in explain(alone, "instance")
