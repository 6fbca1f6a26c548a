"""The one live GPU capture: an NVIDIA H200 machine, read by `hwtune snapshot` and by NVML.

tests/data/hosts/kvm-emeraldrapids-h200 is `hwtune snapshot` of that machine, and
tests/data/gpu/h200-live-nvml-detect.json is live `hwtune detect --json` there a minute later,
which read the GPU through NVML (SOURCES.md beside each). The two paths to the same GPU must
give the same facts. The TensorFlow added for the plan is a fake site-packages whose
build_info.py is the one in the tensorflow 2.21.0 wheel (manylinux_2_27_x86_64), verbatim.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from hwtune.models.convert import dump
from hwtune.planner import plan
from hwtune.probes import detect
from hwtune.probes.issues import IssueLog
from hwtune.probes.tensorflow import save_tf_snapshot
from tests.conftest import DATA
from tests.test_plan_invariants import KNOWLEDGE
from tests.test_probe_tensorflow import make_site

H200_HOST = DATA / "hosts" / "kvm-emeraldrapids-h200"
LIVE_NVML = DATA / "gpu" / "h200-live-nvml-detect.json"
TF_2_21_BUILD_INFO = DATA / "gpu" / "tensorflow-2.21.0-cuda.build_info"
# Says which path read the facts, so it differs by design.
BASIS = "compute_capability_basis"


def _gpu_facts(model: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in gpu.items() if k != BASIS} for gpu in model["gpus"]]


def test_the_snapshot_reads_the_gpu_as_nvml_did_live() -> None:
    live = json.loads(LIVE_NVML.read_text())
    hw = detect(H200_HOST)
    captured = json.loads(json.dumps(dump(hw)))
    assert (live["gpu_source"], captured["gpu_source"]) == ("nvml", "nvidia-smi")
    assert _gpu_facts(captured) == _gpu_facts(live)
    assert captured["gpu_driver"] == live["gpu_driver"] == "580.159.04"
    assert captured["cuda_driver_version"] == live["cuda_driver_version"]
    (gpu,) = hw.gpus
    assert (gpu.name, gpu.compute_capability, gpu.architecture) == ("NVIDIA H200", "9.0", "Hopper")
    # One NUMA node: the GPU's sysfs numa_node reads -1 there, and the matrix says 0.
    assert gpu.numa_node == 0 and gpu.cpu_affinity == tuple(range(16))


def _with_tensorflow_2_21(tmp_path: Path) -> Path:
    root = tmp_path / "h200"
    # symlinks=True: the capture keeps sysfs's node0/cpuN <-> cpuN/node0 links, a cycle.
    shutil.copytree(H200_HOST, root, symlinks=True)
    site = make_site(
        tmp_path / "site",
        dist="tensorflow",
        version="2.21.0",
        build_info=TF_2_21_BUILD_INFO.read_text(),
    )
    save_tf_snapshot(root, IssueLog(), search_path=[str(site)])
    return root


def test_a_conv_model_on_the_h200_under_tensorflow_2_21(tmp_path: Path) -> None:
    """Driver CUDA 13.0 runs TF 2.21's CUDA 12.5.1 build; its compute_90 PTX covers sm_90."""
    hw = detect(_with_tensorflow_2_21(tmp_path))
    assert hw.tensorflow is not None and hw.tensorflow.cuda_version == "12.5.1"
    profile = plan(hw, knowledge=KNOWLEDGE, model="conv", precision="auto")
    assert profile.distribution is not None
    assert profile.distribution.strategy.value == "OneDeviceStrategy"
    assert profile.precision.enabled == "mixed_bfloat16"
    assert set(profile.precision.eligible) == {"mixed_float16", "mixed_bfloat16"}
    assert profile.data_format.value == "channels_last"
    assert "bfloat16 on ≥ 8.0" in profile.data_format.reason
    assert profile.env["CUDA_DEVICE_ORDER"].value == "PCI_BUS_ID"
    assert profile.env["TF_GPU_THREAD_MODE"].value == "gpu_private"
    assert profile.jit.level.value == "autoclustering"
