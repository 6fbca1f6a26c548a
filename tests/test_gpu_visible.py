"""CUDA_VISIBLE_DEVICES as a limit on the GPUs, on real captures.

NVML and nvidia-smi list every GPU of the node; before, hwtune planned on all of them and
`hwtune exec --instances N` split all of them among its copies, whatever the caller's
CUDA_VISIBLE_DEVICES said (found on an H200 node: copies given a GPU outside the caller's
list). The GPUs are the `nvidia-smi -L` of an 8 × A100-SXM4-80GB node (UUIDs, one GPU in MIG
mode in the mixed layout), the p4d capture (`topo -m` alone: no names, no UUIDs), and, for a
node of two models, the T4 and RTX PRO 6000 Blackwell `nvidia-smi -q -x` captures side by side.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from hwtune.apply.launch import divides_callers_gpus, env_for_instance, merge_environment
from hwtune.models.convert import dumps_json
from hwtune.models.hardware import Gpu, Hardware
from hwtune.planner import plan
from hwtune.probes import detect
from hwtune.probes.cuda_visible import parse_visibility
from hwtune.probes.issues import IssueLog
from hwtune.probes.nvidia_smi import parse_smi_xml
from hwtune.probes.nvidia_smi_list import parse_smi_list
from hwtune.probes.report import render_summary
from tests.apply_profiles import PYTHON
from tests.conftest import DATA
from tests.gpu_roots import (
    A100_TOPO,
    BLACKWELL_XML,
    EPYC,
    HASWELL,
    MIG_LIST,
    MIXED_MIG_LIST,
    P4D_HOST,
    T4_XML,
    hardware,
)
from tests.test_plan_invariants import KNOWLEDGE

A100S = tuple(parse_smi_list(MIG_LIST.read_text(), "nvidia-smi-L.txt", IssueLog()))
H200 = detect(DATA / "hosts" / "kvm-emeraldrapids-h200", tensorflow=False).gpus
PCI = "PCI_BUS_ID"


def _two_models() -> tuple[Gpu, ...]:
    """A T4 and an RTX PRO 6000 Blackwell, each from its own capture, numbered 0 and 1."""
    t4 = parse_smi_xml(T4_XML.read_bytes(), "t4", IssueLog()).gpus[0]
    blackwell = parse_smi_xml(BLACKWELL_XML.read_bytes(), "bw", IssueLog()).gpus[0]
    return (dataclasses.replace(t4, index=0), dataclasses.replace(blackwell, index=1))


# -- the parser ---------------------------------------------------------------------------


def test_indices_in_bus_order_name_those_gpus_in_the_order_given() -> None:
    seen = parse_visibility("2,3", PCI, A100S)
    assert (seen.devices, seen.gpus) == (2, (2, 3))
    assert seen.reason == "GPUs 2-3 of 8: CUDA_VISIBLE_DEVICES=2,3"
    assert parse_visibility("3,1", PCI, A100S).gpus == (3, 1)  # CUDA enumerates 3 first


def test_fastest_first_on_one_model_assumes_the_bus_order_and_says_so() -> None:
    seen = parse_visibility("2,3", None, A100S)
    assert seen.gpus == (2, 3)
    assert "same model, NVIDIA A100-SXM4-80GB" in seen.reason
    assert "FASTEST_FIRST" in seen.reason


def test_fastest_first_on_two_models_knows_how_many_not_which() -> None:
    gpus = _two_models()
    seen = parse_visibility("1", None, gpus)
    assert (seen.devices, seen.gpus) == (1, None)
    assert "cannot be known" in seen.reason and "several models" in seen.reason
    assert parse_visibility("1", "FASTEST_FIRST", gpus).gpus is None
    assert parse_visibility("1", PCI, gpus).gpus == (1,)


def test_full_and_abbreviated_uuids_name_their_gpu() -> None:
    full = parse_visibility("GPU-1f9fb931-27a2-3212-2d3d-85e51c67fd81", None, A100S)
    assert full.gpus == (3,)
    # "enough digits from the beginning of the GPU UUID to uniquely identify that GPU"
    assert parse_visibility("GPU-1cd99017,GPU-52", None, A100S).gpus == (2, 1)
    # GPU-15d4…, GPU-1cd9… and GPU-1f9f… all start so: CUDA cannot tell which, none is seen
    ambiguous = parse_visibility("GPU-1", None, A100S)
    assert (ambiguous.devices, ambiguous.gpus) == (0, ())
    assert "ambiguous" in ambiguous.reason


def _h200_uuid() -> str:
    uuid = H200[0].uuid
    assert uuid is not None and uuid.startswith("GPU-")
    return uuid


# What the driver itself made of each value: cuInit(0) then cuDeviceGetCount, run under each
# on a machine with one H200 and driver 580.159.04 (a lent machine, 2026-11-28, CUDA_DEVICE_ORDER
# unset). "u" stands for that GPU's UUID (the capture's, tests/data/hosts/kvm-emeraldrapids-h200,
# is put in its place); 0 where cuInit failed (100, no device; 101 for "0,0", invalid device).
DRIVER_COUNTS = [
    ("0", 1), ("u", 1), ("u[:12]", 1), ("GPU-", 0), ("GPU-bbb", 0), ("0,0", 0), ("-1", 0),
    ("0,-1", 1), (" 0", 1), ("0abc", 1), ("NoDevFiles", 0), ("1", 0), ("1,0", 0), ("", 0),
    ("+0", 1), ("-0", 1), ("u.upper()", 1), ("u[4:]", 0), ("MIG-x", 0), ("0,", 1), (",0", 0),
]  # fmt: skip


@pytest.mark.parametrize(("template", "count"), DRIVER_COUNTS)
def test_the_parser_counts_what_the_h200_driver_counted(template: str, count: int) -> None:
    u = _h200_uuid()
    value = {"u": u, "u[:12]": u[:12], "u.upper()": u.upper(), "u[4:]": u[4:]}.get(
        template, template
    )
    seen = parse_visibility(value, None, H200)
    assert seen.devices == count, seen.reason
    assert seen.gpus == ((0,) if count else ())


def test_a_mig_uuid_names_that_device_of_its_gpu() -> None:
    mig = A100S[1].mig_devices[2]
    assert mig.uuid is not None
    seen = parse_visibility(mig.uuid, None, A100S)
    assert (seen.devices, seen.gpus, seen.mig_devices) == (1, (1,), (mig.uuid,))


def test_cuda_stops_at_the_first_entry_that_names_no_gpu() -> None:
    # The guide's own example: "0,2,-1,1 makes devices 0 and 2 visible"
    seen = parse_visibility("0,2,-1,1", PCI, A100S)
    assert seen.gpus == (0, 2)
    assert "CUDA stops at '-1'" in seen.reason
    assert parse_visibility("1,GPU-ffff,2", PCI, A100S).gpus == (1,)
    assert parse_visibility("4,8,5", PCI, A100S).gpus == (4,)  # 8: the node has 0-7


@pytest.mark.parametrize("value", ["", "-1", "NoDevFiles", "0,0", " ,1"])
def test_empty_an_invalid_first_entry_or_a_repeat_hides_every_gpu(value: str) -> None:
    seen = parse_visibility(value, PCI, A100S)
    assert (seen.devices, seen.gpus) == (0, ())
    assert "hides every GPU" in seen.reason
    assert parse_visibility("", None, A100S).reason == "CUDA_VISIBLE_DEVICES='' hides every GPU"


def test_a_uuid_a_capture_without_uuids_cannot_match_is_counted_not_refused() -> None:
    p4d = detect(P4D_HOST).gpus  # topo -m alone: no UUIDs to compare with
    seen = parse_visibility("GPU-1cd99017", PCI, p4d)
    assert (seen.devices, seen.gpus) == (1, None)


# -- detection ----------------------------------------------------------------------------


def test_a_snapshot_is_not_limited_by_the_callers_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert detect(P4D_HOST).gpu_visibility is None  # --root: its files only, as for affinity
    given = detect(P4D_HOST, environ={"CUDA_VISIBLE_DEVICES": "2,3", "CUDA_DEVICE_ORDER": PCI})
    assert len(given.gpus) == 8  # nvidia-smi's facts stay true for the node
    assert given.gpu_visibility is not None and given.gpu_visibility.gpus == (2, 3)
    assert "GPUs 2-3 of 8: CUDA_VISIBLE_DEVICES=2,3" in render_summary(given)


def test_hardware_saved_before_the_field_still_loads(tmp_path: Path) -> None:
    from hwtune.pipeline.request import PlanRequest, load_hardware

    hw = detect(P4D_HOST, environ={"CUDA_VISIBLE_DEVICES": "2,3", "CUDA_DEVICE_ORDER": PCI})
    data = json.loads(dumps_json(hw, "test"))
    saved = tmp_path / "hw.json"
    saved.write_text(json.dumps(data))
    assert load_hardware(PlanRequest({}, hardware_file=str(saved))).gpu_visibility == (
        hw.gpu_visibility
    )
    del data["gpu_visibility"]
    saved.write_text(json.dumps(data))
    assert load_hardware(PlanRequest({}, hardware_file=str(saved))).gpu_visibility is None


# -- the plan -----------------------------------------------------------------------------


def _p4d(value: str, order: str | None = PCI) -> Hardware:
    environ = {"CUDA_VISIBLE_DEVICES": value}
    if order is not None:
        environ["CUDA_DEVICE_ORDER"] = order
    return detect(P4D_HOST, environ=environ)


def test_the_plan_uses_the_two_visible_gpus_of_eight() -> None:
    profile = plan(_p4d("2,3"), knowledge=KNOWLEDGE)
    assert profile.instance.gpus == (2, 3)
    assert profile.distribution is not None
    assert profile.distribution.gpus == (2, 3)
    assert profile.distribution.strategy.value == "MirroredStrategy"
    assert "GPUs 2-3 of 8: CUDA_VISIBLE_DEVICES=2,3" in profile.distribution.strategy.reason
    halves = [plan(_p4d("2,3"), knowledge=KNOWLEDGE, instances=2, instance=k) for k in (0, 1)]
    assert [p.env["CUDA_VISIBLE_DEVICES"].value for p in halves] == ["2", "3"]
    assert all(
        p.distribution and p.distribution.strategy.value == "OneDeviceStrategy" for p in halves
    )


def test_an_unknowable_pair_is_two_gpus_and_no_gpu_is_named() -> None:
    # FASTEST_FIRST on GPUs whose model the capture does not name: which two is unknown.
    profile = plan(_p4d("2,3", order=None), knowledge=KNOWLEDGE)
    assert len(profile.instance.gpus) == 2
    assert profile.distribution is not None and len(profile.distribution.gpus) == 2
    left = {item.name: item.reason for item in profile.left_out}
    assert "CUDA_DEVICE_ORDER" not in profile.env  # bus order would re-point the caller's 2,3
    assert "cannot be known" in left["CUDA_DEVICE_ORDER"]
    two = plan(_p4d("2,3", order=None), knowledge=KNOWLEDGE, instances=2, instance=1)
    assert "CUDA_VISIBLE_DEVICES" not in two.env


@pytest.mark.parametrize("value", ["", "-1", "NoDevFiles"])
def test_a_variable_hiding_every_gpu_gives_the_cpu_plan(value: str) -> None:
    hidden = _p4d(value)
    profile = plan(hidden, knowledge=KNOWLEDGE)
    cpu = plan(dataclasses.replace(hidden, gpus=(), gpu_visibility=None), knowledge=KNOWLEDGE)
    assert profile.instance.gpus == () and profile.distribution is None
    assert {k: v.value for k, v in profile.env.items()} == {k: v.value for k, v in cpu.env.items()}
    assert (profile.precision.eligible, profile.precision.enabled) == (
        cpu.precision.eligible,
        cpu.precision.enabled,
    )
    assert profile.data_format.value == cpu.data_format.value
    left = {item.name: item.reason for item in profile.left_out}
    shown = value or repr(value)
    assert left["TF_GPU_THREAD_MODE"].startswith(
        f"left out: CUDA_VISIBLE_DEVICES={shown} hides every GPU"
    )


# -- exec ---------------------------------------------------------------------------------


def _mixed_node(tmp_path: Path, value: str) -> Hardware:
    """The 8 × A100 node whose GPU 0 is in MIG mode, seen under CUDA_VISIBLE_DEVICES=`value`."""
    hw = hardware(tmp_path, EPYC, topo=A100_TOPO, listing=MIXED_MIG_LIST)
    return dataclasses.replace(hw, gpu_visibility=parse_visibility(value, None, hw.gpus))


def test_copies_share_out_only_the_callers_gpus_by_uuid(tmp_path: Path) -> None:
    hw = _mixed_node(tmp_path, "2,3")
    uuids = {gpu.index: gpu.uuid for gpu in hw.gpus}
    profile = plan(hw, knowledge=KNOWLEDGE, instances=2)
    copies = [env_for_instance(profile, k, hardware=hw)["CUDA_VISIBLE_DEVICES"] for k in (0, 1)]
    assert copies == [uuids[2], uuids[3]]
    one = plan(hw, knowledge=KNOWLEDGE)  # one instance: the caller's list stays as it is
    assert "CUDA_VISIBLE_DEVICES" not in env_for_instance(one, 0, hardware=hw)


def test_a_copys_share_replaces_the_callers_list_only_when_it_comes_from_it(
    tmp_path: Path,
) -> None:
    hw = _mixed_node(tmp_path, "2,3")
    caller = {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert divides_callers_gpus(hw, caller) and divides_callers_gpus(hw, {})
    assert not divides_callers_gpus(hw, {"CUDA_VISIBLE_DEVICES": "4"})
    planned = env_for_instance(
        plan(hw, knowledge=KNOWLEDGE, instances=2, instance=1), 1, hardware=hw
    )
    forced, _ = merge_environment(caller, planned, force=("CUDA_VISIBLE_DEVICES",))
    assert forced["CUDA_VISIBLE_DEVICES"] == hw.gpus[3].uuid


def test_no_gpu_is_named_when_which_ones_the_caller_has_cannot_be_known(tmp_path: Path) -> None:
    hw = _p4d("2,3", order=None)
    profile = plan(hw, knowledge=KNOWLEDGE, instances=2)
    assert "CUDA_VISIBLE_DEVICES" not in env_for_instance(profile, 1, hardware=hw)


def test_exec_keeps_its_copies_inside_the_callers_gpus(tmp_path: Path) -> None:
    """`hwtune exec --instances 2` under CUDA_VISIBLE_DEVICES=2,3, planning from a model
    detected under it: copy 0 runs on GPU 2 and copy 1 on GPU 3, by UUID. Before, both were
    planned on GPUs 0-7 and kept the caller's 2,3."""
    hw = _mixed_node(tmp_path, "2,3")
    saved = tmp_path / "hw.json"
    saved.write_text(dumps_json(hw, "test"))
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "CUDA_VISIBLE_DEVICES": "2,3",
    }
    result = subprocess.run(
        [
            *(PYTHON, "-m", "hwtune", "exec", "--hardware", str(saved), "--instances", "2"),
            *("--no-pin", "--numa-policy", "none", "--", "sh", "-c"),
            'echo "$HWTUNE_INSTANCE $CUDA_VISIBLE_DEVICES"',
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    seen = sorted(line.split("] ", 1)[1] for line in result.stdout.splitlines())
    assert seen == [f"0 {hw.gpus[2].uuid}", f"1 {hw.gpus[3].uuid}"]


def test_the_configure_cache_sees_a_change_of_device_order() -> None:
    """CUDA_DEVICE_ORDER decides which GPUs the caller's indices name, so a profile cached
    under one order is not reused under the other."""
    from hwtune.apply.fingerprint import fingerprint

    caller = {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert (
        fingerprint(caller)["gpu_env"]
        != fingerprint({**caller, "CUDA_DEVICE_ORDER": PCI})["gpu_env"]
    )


# -- a Slurm step under ConstrainDevices ----------------------------------------------------


def _constrained(value: str = "0,1") -> Hardware:
    """A Slurm step given GPUs 2 and 3 of the four-GPU box under ConstrainDevices=yes: NVML
    counts all four and refuses handles on 0 and 1 (NVML_ERROR_NO_PERMISSION, as the NVML
    reference says of nvmlDeviceGetCount_v2), and Slurm sets CUDA_VISIBLE_DEVICES in the
    cgroup's local numbering, 0,1 (src/plugins/gres/common/gres_common.c)."""
    import pynvml

    from hwtune.probes import nvml
    from tests.plan_builders import make_hardware
    from tests.test_gpu_nvml import FakeNvml, four_gpu_box

    closed = pynvml.NVML_ERROR_NO_PERMISSION
    faults = {"nvmlDeviceGetHandleByIndex:0": closed, "nvmlDeviceGetHandleByIndex:1": closed}
    report = nvml.probe_nvml(IssueLog(), library=FakeNvml(four_gpu_box(), faults))
    assert report is not None and [g.index for g in report.gpus] == [2, 3]
    hw = make_hardware(sockets=2, cores_per_socket=4, gpus=report.gpus)
    return dataclasses.replace(hw, gpu_visibility=parse_visibility(value, PCI, hw.gpus))


def test_a_constrained_slurm_steps_ranks_are_given_cudas_own_numbers(tmp_path: Path) -> None:
    """Each of two ranks owns one of the step's GPUs 2 and 3, which CUDA in that cgroup calls
    0 and 1. Before, the ranks were told CUDA_VISIBLE_DEVICES=2 and 3: numbers CUDA does not
    have there, so it showed them no GPU."""
    from hwtune.pipeline.request import PlanRequest, profile_for

    hw = _constrained()
    assert hw.gpu_visibility is not None and hw.gpu_visibility.gpus == (2, 3)
    named = []
    for local in (0, 1):
        environ = {
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
            "CUDA_VISIBLE_DEVICES": "0,1",
            "CUDA_DEVICE_ORDER": PCI,
            "SLURM_LOCALID": str(local),
            "SLURM_NODEID": "0",
            "SLURM_STEP_TASKS_PER_NODE": "2",
        }
        profile = profile_for(PlanRequest(environ, hardware=hw)).profile
        assert profile.instance.gpus == (2 + local,)
        setting = profile.env["CUDA_VISIBLE_DEVICES"]
        assert f"owns GPU {2 + local}" in setting.reason and "CUDA numbers it" in setting.reason
        named.append(setting.value)
    assert named == ["0", "1"]


def test_exec_names_cudas_numbers_where_no_uuid_is_known() -> None:
    """`hwtune exec --instances 2` in such a step, planning from a capture without UUIDs (the
    p4d `topo -m`, which NVML in the cgroup would show as GPUs 2 and 3 alone)."""
    whole = detect(P4D_HOST)
    step = tuple(gpu for gpu in whole.gpus if gpu.index in (2, 3))
    assert not any(gpu.uuid for gpu in step)
    hw = dataclasses.replace(whole, gpus=step, gpu_visibility=parse_visibility("0,1", PCI, step))
    profile = plan(hw, knowledge=KNOWLEDGE, instances=2)
    copies = [env_for_instance(profile, k, hardware=hw)["CUDA_VISIBLE_DEVICES"] for k in (0, 1)]
    assert copies == ["0", "1"]
    # With every GPU open the numbers stay nvidia-smi's indices.
    halves = [plan(_p4d("2,3"), knowledge=KNOWLEDGE, instances=2, instance=k) for k in (0, 1)]
    assert [p.env["CUDA_VISIBLE_DEVICES"].value for p in halves] == ["2", "3"]


# -- rules about the GPUs of this process, not of the node --------------------------------


def _snapshot_node(tmp_path: Path, value: str, *, idle_gpu0: bool = False) -> Hardware:
    """The 8 × A100 node (GPU 0 in MIG mode) as a snapshot that recorded CUDA_VISIBLE_DEVICES=
    `value` in bus order; `idle_gpu0`: GPU 0 as right after `nvidia-smi -mig 1`, in MIG mode
    with no MIG device yet (MIG User Guide, "Getting Started"), which `-L` cannot show."""
    from hwtune.probes.cuda_visible_snapshot import SNAPSHOT_NAME
    from tests.gpu_roots import root

    dest = root(tmp_path, EPYC, topo=A100_TOPO, listing=MIXED_MIG_LIST)
    recorded = {"CUDA_VISIBLE_DEVICES": value, "CUDA_DEVICE_ORDER": PCI}
    (dest / SNAPSHOT_NAME).write_text(json.dumps(recorded))
    hw = detect(dest)
    assert hw.gpu_visibility is not None and hw.gpus[0].mig_enabled
    if idle_gpu0:
        gpus = (dataclasses.replace(hw.gpus[0], mig_devices=()), *hw.gpus[1:])
        hw = dataclasses.replace(hw, gpus=gpus)
    return hw


def test_an_idle_mig_gpu_the_variable_hides_is_not_warned_about(tmp_path: Path) -> None:
    profile = plan(_snapshot_node(tmp_path, "2,3", idle_gpu0=True), knowledge=KNOWLEDGE)
    assert profile.instance.gpus == (2, 3)
    assert not [w for w in profile.warnings if "MIG mode without MIG devices" in w]


def test_an_idle_mig_gpu_the_process_sees_is_still_warned_about(tmp_path: Path) -> None:
    profile = plan(_snapshot_node(tmp_path, "0,2", idle_gpu0=True), knowledge=KNOWLEDGE)
    assert profile.instance.gpus == (2,)
    assert [w for w in profile.warnings if w.startswith("GPU 0 is in MIG mode without")]


def test_the_build_lists_every_gpu_of_the_node_and_says_so(tmp_path: Path) -> None:
    """docs/planner.md: "every GPU host gets a CUDA build" with "the GPUs' compute
    capabilities": a build made on the node serves its jobs, whichever GPUs they are given."""
    hw = _snapshot_node(tmp_path, "2,3")
    bazel = plan(hw, knowledge=KNOWLEDGE).bazel
    whole = plan(dataclasses.replace(hw, gpu_visibility=None), knowledge=KNOWLEDGE).bazel
    assert bazel is not None and whole is not None
    assert bazel.configure_env == whole.configure_env  # the same capabilities
    (caps,) = [r for r in bazel.reasons if "COMPUTE_CAPABILITIES=" in r]
    assert "all 8 GPUs of the node" in caps
    assert "GPUs 2-3 of 8: CUDA_VISIBLE_DEVICES=2,3" in caps
    (unlimited,) = [r for r in whole.reasons if "COMPUTE_CAPABILITIES=" in r]
    assert "the detected GPUs' compute capabilities" in unlimited


def test_no_ptx_jit_note_for_a_visible_gpu_tensorflow_ignores(tmp_path: Path) -> None:
    """Two RTX PRO 6000 Blackwell (compute capability 12.0, beyond TF 2.21's CUDA 12.5), the
    first in MIG mode with no MIG device: TensorFlow runs on the second alone, so only its
    PTX is JIT-compiled at start-up."""
    hw = hardware(tmp_path, HASWELL, xml=BLACKWELL_XML)
    blackwell = hw.gpus[0]
    idle = dataclasses.replace(blackwell, mig_enabled=True, mig_devices=())
    other = dataclasses.replace(blackwell, index=1, uuid=None, pci_bus_id=None)
    profile = plan(dataclasses.replace(hw, gpus=(idle, other)), knowledge=KNOWLEDGE)
    assert profile.instance.gpus == (1,)
    jit = [w for w in profile.warnings if "JIT-compiled" in w]
    assert len(jit) == 1 and jit[0].startswith("GPU 1 ("), jit
