"""MIG slices, devices and GPU memory on real captures (issue 14, items 3, 8 and 9).

`nvidia-smi -L` of an 8 × A100-SXM4-80GB node in MIG mode (4 × 1g.20gb per GPU, and a mixed
4g.40gb/2g.20gb/1g.20gb layout) with that node's `topo -m`; `nvidia-smi -q -x` of an A100-80GB
with four 1g.20gb devices (no UUIDs: -q -x does not print them); the T4 and p4d composites.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from hwtune.errors import PlanError
from hwtune.planner import plan
from hwtune.probes import detect
from hwtune.probes.issues import IssueLog
from hwtune.probes.nvidia_smi_list import parse_smi_list
from tests.apply_profiles import PYTHON
from tests.conftest import run_cli
from tests.gpu_roots import (
    A100_MIG_XML,
    A100_TOPO,
    EPYC,
    HASWELL,
    MIG_LIST,
    MIXED_MIG_LIST,
    P4D_HOST,
    hardware,
    t4_under_cuda_11,
)
from tests.gpu_roots import (
    root as gpu_root,
)
from tests.test_plan_invariants import KNOWLEDGE
from tests.test_runtime import clean_env, needs_tf  # noqa: F401 - the fixture is used below

MIB = 1 << 20


def test_nvidia_smi_list_gives_every_mig_uuid_and_profile() -> None:
    issues = IssueLog()
    gpus = parse_smi_list(MIG_LIST.read_text(), "nvidia-smi-L.txt", issues)
    assert list(issues) == []
    assert [g.index for g in gpus] == list(range(8))
    assert [m.profile for m in gpus[0].mig_devices] == ["1g.20gb"] * 4
    assert gpus[0].mig_devices[1].uuid == "MIG-d0bccf56-229a-5d45-8240-5be37f8c109e"
    assert gpus[7].uuid == "GPU-2545335d-3baa-188c-36b5-f645e39e1923"


def test_a_list_from_another_machine_is_not_merged(tmp_path: Path) -> None:
    hw = hardware(tmp_path, HASWELL, xml=A100_MIG_XML, listing=MIG_LIST)
    assert all(m.uuid is None for m in hw.gpus[0].mig_devices)  # the XML's GPU keeps its own
    assert any("another machine" in i.reason for i in hw.issues)


def test_each_instance_gets_its_own_mig_slice_by_uuid(tmp_path: Path) -> None:
    hw = hardware(tmp_path, EPYC, topo=A100_TOPO, listing=MIG_LIST)
    expected = [m.uuid for m in hw.gpus[0].mig_devices]
    seen = []
    for k in range(4):
        profile = plan(hw, knowledge=KNOWLEDGE, instances=4, instance=k)
        seen.append(profile.env["CUDA_VISIBLE_DEVICES"].value)
        assert profile.distribution is not None
        assert profile.distribution.strategy.value == "OneDeviceStrategy"
        assert profile.distribution.cross_device_ops.value == "none"
        assert profile.instance.gpu_memory_bytes == 20 * 10**9  # 1g.20gb, not the 80 GB GPU
        assert profile.gpu_memory is not None and "1g.20gb" in profile.gpu_memory.reason
    assert seen == expected


def test_one_instance_on_a_mig_node_is_one_slice_not_a_mirrored_strategy(tmp_path: Path) -> None:
    profile = plan(hardware(tmp_path, EPYC, topo=A100_TOPO, listing=MIG_LIST), knowledge=KNOWLEDGE)
    assert profile.distribution is not None
    assert profile.distribution.strategy.value == "OneDeviceStrategy"
    assert "CUDA_VISIBLE_DEVICES" not in profile.env


def test_slices_without_known_uuids_are_not_split(tmp_path: Path) -> None:
    hw = hardware(tmp_path, HASWELL, xml=A100_MIG_XML)
    with pytest.raises(PlanError) as caught:
        plan(hw, knowledge=KNOWLEDGE, instances=4)
    assert "UUID" in caught.value.message and "nvidia-smi -L" in (caught.value.hint or "")
    single = plan(hw, knowledge=KNOWLEDGE)  # one process is fine: it gets the first slice
    assert single.instance.gpu_memory_bytes == 19968 * MIB  # the slice's own memory


def test_instances_sharing_a_slice_get_growth_and_a_limit(tmp_path: Path) -> None:
    hw = hardware(tmp_path, EPYC, topo=A100_TOPO, listing=MIXED_MIG_LIST)
    # 3 MIG devices on GPU 0 plus 7 whole GPUs = 10 units for 12 instances: 0 and 1 share one.
    first = plan(hw, knowledge=KNOWLEDGE, instances=12, instance=0)
    second = plan(hw, knowledge=KNOWLEDGE, instances=12, instance=1)
    device = first.env["CUDA_VISIBLE_DEVICES"].value
    assert (
        device
        == second.env["CUDA_VISIBLE_DEVICES"].value
        == (
            "MIG-5efd26fe-37b7-5950-8ea2-a3720583947d"  # the 4g.40gb slice
        )
    )
    assert first.env["TF_FORCE_GPU_ALLOW_GROWTH"].value == "true"
    share = 40 * 10**9 // 2
    assert first.gpu_memory is not None
    assert first.gpu_memory.value == (share - 1536 * MIB) // MIB  # MinSystemMemory for CC 8.x
    assert "driver's CUDA version is unknown" in next(
        i.reason for i in first.left_out if i.name == "TF_GPU_ALLOCATOR"
    )


def test_two_instances_on_one_t4_share_it_with_a_limit_and_the_async_allocator(
    tmp_path: Path,
) -> None:
    hw = detect(t4_under_cuda_11(tmp_path))  # the capture's driver (CUDA 11.7) needs CUDA 11
    profile = plan(hw, knowledge=KNOWLEDGE, instances=2, instance=1)
    assert profile.env["CUDA_VISIBLE_DEVICES"].value == "0"
    assert profile.env["TF_FORCE_GPU_ALLOW_GROWTH"].value == "true"
    assert profile.env["TF_GPU_ALLOCATOR"].value == "cuda_malloc_async"
    assert "release threshold" in profile.env["TF_GPU_ALLOCATOR"].reason
    assert profile.gpu_memory is not None
    assert profile.gpu_memory.value == (15360 * MIB // 2 - 1050 * MIB) // MIB


def _apply(tmp_path: Path, host: Path, *args: str) -> Path:
    out = tmp_path / "out"
    result = run_cli(["apply", "--root", str(host), "--output", str(out), *args])
    assert result.exit_status == 0, result.stderr
    return out


def _parse_config_proto(text: str) -> dict[str, object]:
    """Parse tf_config.pbtxt with TensorFlow's own protobuf classes, in a subprocess."""
    code = textwrap.dedent(
        """
        import json, sys
        from google.protobuf import text_format
        from tensorflow.core.protobuf import config_pb2
        proto = text_format.Parse(sys.stdin.read(), config_pb2.ConfigProto())
        gpu = proto.gpu_options
        print(json.dumps({"visible": gpu.visible_device_list, "growth": gpu.allow_growth,
                          "fraction": gpu.per_process_gpu_memory_fraction}))
        """
    )
    done = subprocess.run(
        [PYTHON, "-c", code], input=text, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    parsed: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return parsed


@needs_tf
def test_env_and_config_proto_agree_on_devices(tmp_path: Path) -> None:
    out = _apply(tmp_path, P4D_HOST, "--instances", "2", "--instance", "1")
    assert 'CUDA_VISIBLE_DEVICES="4,5,6,7"' in (out / "hwtune.env").read_text()
    pbtxt = (out / "tf_config.pbtxt").read_text()
    assert _parse_config_proto(pbtxt)["visible"] == ""  # TensorFlow renumbers 4-7 as 0-3
    assert "renumbers" in pbtxt


@needs_tf
def test_config_proto_caps_an_instance_sharing_a_gpu(tmp_path: Path) -> None:
    out = _apply(tmp_path, t4_under_cuda_11(tmp_path), "--instances", "2", "--instance", "1")
    parsed = _parse_config_proto((out / "tf_config.pbtxt").read_text())
    limit = (15360 * MIB // 2 - 1050 * MIB) // MIB
    assert parsed["growth"] is True
    assert abs(float(str(parsed["fraction"])) - limit / 15360) < 1e-3


CONFIGURE_LIMIT = textwrap.dedent(
    """
    import json
    from hwtune.apply.runtime import ConfigureReport
    report = ConfigureReport({"gpu_memory_limit_mb": 6630}, cached=True, cache_path="",
                             strict=False)
    report.apply_tensorflow()
    print(json.dumps(report.tensorflow))
    """
)


@needs_tf
def test_configure_applies_the_limit_to_every_gpu_tensorflow_sees(
    clean_env: dict[str, str],  # noqa: F811 - the fixture from test_runtime
) -> None:
    done = subprocess.run(
        [PYTHON, "-c", CONFIGURE_LIMIT],
        capture_output=True,
        text=True,
        env=clean_env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    # This machine's TensorFlow sees no GPU: configure() says so instead of pretending.
    assert seen["gpu_memory"] == "not applied (6630 MiB): TensorFlow sees no GPU"


def test_the_cached_payload_carries_the_limit(tmp_path: Path) -> None:
    from hwtune.apply.cache import payload_from_planned
    from hwtune.pipeline.request import Planned

    hw = detect(t4_under_cuda_11(tmp_path))
    profile = plan(hw, knowledge=KNOWLEDGE, instances=2, instance=1)
    assert profile.gpu_memory is not None
    payload = payload_from_planned(Planned(hardware=hw, profile=profile))
    assert payload["gpu_memory_limit_mb"] == profile.gpu_memory.value == 6630


def test_the_live_fallback_asks_nvidia_smi_for_mig_uuids(tmp_path: Path) -> None:
    import pynvml

    from hwtune.probes.gpu import probe_gpus
    from tests.test_gpu_nvml import FakeNvml
    from tests.test_gpu_smi import fake_nvidia_smi

    exe = fake_nvidia_smi(
        tmp_path,
        f'case "$1" in\n -q) cat "{A100_MIG_XML}";;\n'
        f' -L) cat "{MIG_LIST}";;\n *) exit 2;;\nesac\n',
    )
    lib = FakeNvml([], {"nvmlInit": pynvml.NVML_ERROR_UNINITIALIZED})
    issues = IssueLog()
    report = probe_gpus(tmp_path, issues, live=True, nvml_library=lib, nvidia_smi=exe)
    assert report.gpus[0].mig_enabled
    # -L was run and read: its GPU 0 is another A100 than the XML's, so nothing is mixed up
    assert any("another machine" in issue.reason for issue in issues)


def test_exec_gives_each_instance_its_mig_slice(tmp_path: Path) -> None:
    from hwtune.apply.launch import env_for_instance

    hw = hardware(tmp_path, EPYC, topo=A100_TOPO, listing=MIG_LIST)
    profile = plan(hw, knowledge=KNOWLEDGE, instances=4)
    seen = [env_for_instance(profile, k, hardware=hw)["CUDA_VISIBLE_DEVICES"] for k in range(4)]
    assert seen == [m.uuid for m in hw.gpus[0].mig_devices]  # not the parent GPU's UUID


def test_r450_and_r460_drivers_name_mig_devices_by_gpu_uuid_and_instance_ids(
    tmp_path: Path,
) -> None:
    """The naming rule on the captured MIG devices; the driver branch is the rule's input."""
    from hwtune.planner.gpu_units import mig_name

    gpu = hardware(tmp_path, HASWELL, xml=A100_MIG_XML).gpus[0]
    first = gpu.mig_devices[0]  # GPU instance 3, compute instance 0; no UUID in -q -x
    assert mig_name(gpu, first, "460.32.03") == f"MIG-{gpu.uuid}/3/0"
    assert mig_name(gpu, first, "535.54.03") is None  # R470+: only the MIG-<UUID> form works


# Compute instances of one GPU instance, as `nvidia-smi -L` lists them: NVIDIA MIG User Guide,
# "MIG Device Names", the R470+ example (GPU 6 of an 8 × A100-SXM4-40GB).
COMPUTE_INSTANCES_LIST = """\
GPU 6: A100-SXM4-40GB (UUID: GPU-bb40ed7d-cbbb-d92c-50ac-24803cda52c5)
  MIG 1c.7g.40gb Device 0: (UUID: MIG-66dd01d7-8cdb-5a13-a45d-c6eb0ee11810)
  MIG 2c.7g.40gb Device 1: (UUID: MIG-03c649cb-e6ae-5284-8e94-4b1cf767e06c)
  MIG 3c.7g.40gb Device 2: (UUID: MIG-8abf68e0-2808-525e-9133-ba81701ed6d3)
"""


def test_compute_instances_of_one_gpu_instance_share_its_memory(tmp_path: Path) -> None:
    listing = tmp_path / "ci.L"
    listing.write_text(COMPUTE_INSTANCES_LIST)
    hw = hardware(tmp_path, EPYC, listing=listing)
    limits = set()
    for k in range(3):
        profile = plan(hw, knowledge=KNOWLEDGE, instances=3, instance=k)
        assert profile.env["TF_FORCE_GPU_ALLOW_GROWTH"].value == "true"
        assert profile.gpu_memory is not None
        limit = profile.gpu_memory.value
        assert isinstance(limit, int) and 0 < limit * MIB < 40 * 10**9 // 3
        limits.add(limit)
    assert len(limits) == 1


def test_the_captured_gpu_instances_do_not_share_memory(tmp_path: Path) -> None:
    """The A100 capture's four 1g.20gb devices are four GPU instances (ids 3-6): alone each."""
    hw = hardware(tmp_path, HASWELL, xml=A100_MIG_XML)
    hw = dataclasses.replace(
        hw,
        gpus=tuple(
            dataclasses.replace(
                g,
                mig_devices=tuple(
                    dataclasses.replace(m, uuid=f"MIG-{i}") for i, m in enumerate(g.mig_devices)
                ),
            )
            for g in hw.gpus
        ),
    )
    profile = plan(hw, knowledge=KNOWLEDGE, instances=4, instance=1)
    assert "TF_FORCE_GPU_ALLOW_GROWTH" not in profile.env
    assert profile.gpu_memory is not None and "alone" in profile.gpu_memory.reason


def test_mig_mode_without_devices_says_why_the_gpu_is_not_used(tmp_path: Path) -> None:
    """The A100 capture with its MIG devices removed: the state right after `nvidia-smi -mig 1`
    (MIG User Guide, "Getting Started"), which -q -x prints as <mig_devices>None</mig_devices>."""
    text = A100_MIG_XML.read_text()
    start, end = text.index("<mig_devices>"), text.index("</mig_devices>")
    idle = tmp_path / "idle.xml"
    idle.write_text(text[:start] + "<mig_devices>\n            None\n        " + text[end:])
    profile = plan(hardware(tmp_path, HASWELL, xml=idle), knowledge=KNOWLEDGE)
    reasons = {item.name: item.reason for item in profile.left_out}
    for name in ("CUDA_VISIBLE_DEVICES", "TF_FORCE_GPU_ALLOW_GROWTH"):
        assert "in MIG mode without MIG devices" in reasons[name], reasons[name]
    assert all(reason.strip() != "left out:" for reason in reasons.values())


@pytest.mark.parametrize("driver", ["450.51.06", "455.45.01", "465.19.01"])
def test_drivers_before_r470_name_mig_devices_by_gpu_uuid(tmp_path: Path, driver: str) -> None:
    from hwtune.planner.gpu_units import mig_name

    gpu = hardware(tmp_path, HASWELL, xml=A100_MIG_XML).gpus[0]
    assert mig_name(gpu, gpu.mig_devices[0], driver) == f"MIG-{gpu.uuid}/3/0"
    assert mig_name(gpu, gpu.mig_devices[0], "470.42.01") is None


@pytest.mark.parametrize("profile", ["1g.10gb+me", "1g.10gb-me", "1g.10gb+gfx", "1g.10gb+me.all"])
def test_media_and_graphics_profiles_keep_their_nominal_memory(profile: str) -> None:
    """Profile names from `nvidia-smi mig -lgip` (A100/H100: +me; Blackwell: +gfx, -me)."""
    from hwtune.models.hardware import MigDevice
    from hwtune.planner.gpu_units import _mig_memory

    assert _mig_memory(MigDevice(0, profile=profile))[0] == 10 * 10**9


@pytest.mark.parametrize("topo", [None, A100_TOPO])
def test_detect_says_nvlink_is_unknown_when_no_link_was_read(tmp_path: Path, topo: Path) -> None:
    """The 8 x A100 node's `nvidia-smi -L` alone tells no links: detect said "none between
    these GPUs (peer traffic goes over PCIe)", where its real `topo -m` shows NV12 everywhere."""
    root = gpu_root(tmp_path, EPYC, topo=topo, listing=MIXED_MIG_LIST)
    result = run_cli(["detect", "--root", str(root)])
    nvlink = [line for line in result.stdout.splitlines() if line.startswith("NVLink")]
    assert len(nvlink) == 1, result.stdout
    if topo is None:
        assert "unknown" in nvlink[0] and "PCIe" not in nvlink[0], nvlink
    else:
        assert "cliques {0,1,2,3,4,5,6,7}" in nvlink[0], nvlink


def test_a_listed_name_nvidia_smi_could_not_read_is_no_name(tmp_path: Path) -> None:
    """`nvidia-smi -L` prints a failed name query as NVML's error string (nvidia-docker#464:
    "Unknown Error" as the product name); the list alone made it the GPU's name."""
    text = MIXED_MIG_LIST.read_text().replace("NVIDIA A100-SXM4-80GB", "Unknown Error", 1)
    listing = tmp_path / "mixed.L"
    listing.write_text(text)
    gpus = hardware(tmp_path, EPYC, listing=listing).gpus
    assert gpus[0].name == "GPU 0" and gpus[1].name == "NVIDIA A100-SXM4-80GB"
