"""models.convert: strict loading names the file and key; pydantic agrees on the same classes."""

from __future__ import annotations

import json

import pytest
from pydantic import TypeAdapter

from hwtune.errors import ModelError
from hwtune.models.convert import dump, load
from hwtune.models.hardware import CpuInfo, Gpu, Hardware, Limits, NumaNode, ProbeIssue
from hwtune.models.profile import Setting


def sample_hardware() -> Hardware:
    return Hardware(
        cpu=CpuInfo(arch="x86_64", vendor="AuthenticAMD", flags=("avx2", "fma"), logical_cpus=2),
        numa=(NumaNode(id=0, cpus=(0, 1), memory_bytes=1 << 30),),
        limits=Limits(affinity_cpus=(0, 1), usable_cpus=(0, 1), cpu_quota=1.5, effective_cpus=1),
        gpus=(Gpu(index=0, name="Tesla T4", compute_capability="7.5", nvlink_peers=()),),
        issues=(ProbeIssue(probe="cpu", reason="partial", path="proc/cpuinfo", line=3),),
    )


def test_dump_load_round_trip() -> None:
    hw = sample_hardware()
    data = json.loads(json.dumps(dump(hw)))
    assert load(Hardware, data, "x.json") == hw


def test_pydantic_validates_what_dump_produces() -> None:
    hw = sample_hardware()
    assert TypeAdapter(Hardware).validate_python(dump(hw)) == hw


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"cpu": {"arch": "sparc"}}, "at 'cpu.arch'"),
        ({"cpu": {"flagz": []}}, "did you mean 'flags'"),
        ({"limits": {"effective_cpus": True}}, "expected int, got bool"),
        ({"limits": {"effective_cpus": "2"}}, "expected int"),
        ({"numa": [{"cpus": [0]}]}, "at 'numa[0].id': missing required key"),
        ({"numa": {"id": 0}}, "expected a list"),
        ({"gpus": [{"index": 0, "name": None}]}, "at 'gpus[0].name'"),
    ],
)
def test_load_errors_name_file_and_key(data: dict[str, object], fragment: str) -> None:
    with pytest.raises(ModelError) as err:
        load(Hardware, data, "snap/hardware.json")
    assert str(err.value).startswith("snap/hardware.json")
    assert fragment in str(err.value)


def test_union_scalar_setting() -> None:
    assert load(Setting, {"value": 2, "reason": "r"}, "f").value == 2
    assert load(Setting, {"value": None, "reason": "r", "source": "user"}, "f").source == "user"
    with pytest.raises(ModelError):
        load(Setting, {"value": [1], "reason": "r"}, "f")
