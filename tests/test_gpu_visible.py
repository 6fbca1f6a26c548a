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
from pathlib import Path

import pytest

from hwtune.models.convert import dumps_json
from hwtune.models.hardware import Gpu, Hardware
from hwtune.planner import plan
from hwtune.probes import detect
from hwtune.probes.cuda_visible import parse_visibility
from hwtune.probes.issues import IssueLog
from hwtune.probes.nvidia_smi import parse_smi_xml
from hwtune.probes.nvidia_smi_list import parse_smi_list
from hwtune.probes.report import render_summary
from tests.gpu_roots import (
    BLACKWELL_XML,
    MIG_LIST,
    P4D_HOST,
    T4_XML,
)
from tests.test_plan_invariants import KNOWLEDGE

A100S = tuple(parse_smi_list(MIG_LIST.read_text(), "nvidia-smi-L.txt", IssueLog()))
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
