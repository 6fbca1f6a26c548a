"""The instance pinning rule (issue 17): every instance of several is pinned to its slice (whole
NUMA nodes where the slices are nodes, its cores otherwise), one-core slices included, as a
paired test measured level or faster."""

from __future__ import annotations

from hwtune.apply.launch import instance_pinning
from hwtune.models.hardware import CpuInfo, Hardware, Limits, LogicalCpu, NumaNode
from hwtune.planner import plan
from hwtune.planner.instances import pinning


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


def test_one_core_slices_are_pinned_with_the_measurement_as_reason() -> None:
    hw = machine(2)
    decision = pinning(hw, [(0,), (1,)])
    assert decision.pinned
    assert "own physical core" in decision.reason
    assert "2-vCPU EPYC Zen 4 VM" in decision.reason and "1.27x [1.23-1.31]" in decision.reason
    assert "16 paired rounds" in decision.reason and "bench/" not in decision.reason
    # The planner also caps each copy's pools to its slice: one intra-op thread each.
    profile = plan(hw, instances=2, instance=1)
    assert profile.threads.intra_op.value == 1
    assert instance_pinning(profile, hw).pinned


def test_slices_of_two_cores_or_more_are_pinned() -> None:
    hw = machine(4)
    decision = instance_pinning(plan(hw, instances=2), hw)
    assert decision.pinned and "2+ physical cores" in decision.reason
    # Three instances on four cores: uneven slices, every one pinned to its own cores.
    three = plan(hw, instances=3)
    assert instance_pinning(three, hw).pinned
    slices = [set(s.cpus) for s in three.instances]
    assert all(not (a & b) for i, a in enumerate(slices) for b in slices[i + 1 :])


def test_a_core_with_its_smt_sibling_is_pinned_as_one_slice() -> None:
    hw = machine(2, smt=2)  # two cores, four CPUs: each slice is one core with its sibling
    profile = plan(hw, instances=2)
    assert instance_pinning(profile, hw).pinned
    assert sorted(len(s.cpus) for s in profile.instances) == [2, 2]


def test_whole_numa_nodes_are_pinned_with_their_memory() -> None:
    hw = machine(2, nodes=2)  # one core per node
    decision = pinning(hw, [(0,), (1,)])
    assert decision.pinned and "whole NUMA nodes" in decision.reason
    # Half a node is not a node boundary: pinned to the cores, without the memory binding.
    hw4 = machine(4, nodes=2)
    quarter = pinning(hw4, [(0,), (1,), (2,), (3,)])
    assert quarter.pinned and "NUMA" not in quarter.reason.split(";")[0]


def test_one_instance_keeps_its_cpus() -> None:
    hw = machine(2)
    assert pinning(hw, [(0, 1)]).pinned


def test_plan_explain_and_json_say_when_exec_pins() -> None:
    from hwtune.models.convert import dump
    from hwtune.planner.explain import explain

    hw = machine(2)
    two = plan(hw, instances=2)
    assert two.pinning is not None and two.pinning.value is True and two.pinning.source == "rule"
    assert two.pinning.reason == pinning(hw, [(0,), (1,)]).reason
    text = explain(two, "instance")
    assert "slices never share a physical core" in text and "pinning = pinned" in text
    assert "pinned to its own physical core" in explain(two, "pinning")
    assert dump(two)["pinning"]["value"] is True  # `plan --json`
    four = plan(machine(4), instances=2).pinning
    assert four is not None and four.value is True
    alone = plan(hw)
    assert alone.pinning is None and "pinning" not in explain(alone, "instance")


def test_plan_and_explain_print_each_value_the_same_way() -> None:
    # `hwtune plan` read `pinning  pinned` and `hwtune explain pinning` `pinning = true`.
    from hwtune.commands.plan import table_rows
    from hwtune.planner.explain import explain, setting_names

    profile = plan(machine(2), instances=2)
    names = set(setting_names(profile))
    compared = 0
    for name, value, _ in table_rows(profile):
        first = explain(profile, name).splitlines()[0] if name in names else ""
        if first.startswith(f"{name} = "):
            assert first == f"{name} = {value}", name
            compared += 1
    assert compared > 5
    assert explain(profile, "pinning").splitlines()[0] == "pinning = pinned"


def test_cpu_numbers_no_list_gave_are_not_pinned_to() -> None:
    """Detection found no CPU list, only a count: the slices number CPUs from 0 (`cpus_assumed`),
    which this machine may lack (sched_setaffinity: EINVAL) or give to others. Nothing is
    pinned, however many instances, and a tuned "pinned" does not change that."""
    from hwtune.models.profile import Setting

    hw = Hardware(cpu=CpuInfo(arch="x86_64", logical_cpus=4), limits=Limits(effective_cpus=4))
    two = plan(hw, instances=2)
    assert two.instances[0].cpus_assumed
    decision = instance_pinning(two, hw)
    assert not decision.pinned
    assert "no CPU list was detected, so there is nothing true to pin to" in decision.reason
    assert decision.reason.startswith("the 2 instances left unpinned, their thread pools still")
    assert two.pinning is not None and two.pinning.value is False  # `plan` shows it
    alone = pinning(hw, [(0, 1, 2, 3)])  # one instance: its affinity stays as it is
    assert not alone.pinned and alone.reason.startswith("one instance, left unpinned")
    measured = {"instances.pinned": Setting(True, "pinned 1.1x faster", "measured")}
    tuned = plan(hw, instances=2, measured=measured).pinning
    assert tuned is not None and tuned.value is False and tuned.source == "rule"
