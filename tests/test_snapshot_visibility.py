"""A snapshot records CUDA_VISIBLE_DEVICES, so `detect --root` on it sees the GPUs the process
that took it could see, as the live detect did (before, a snapshot taken under Slurm's or a
user's `CUDA_VISIBLE_DEVICES` planned on every GPU of the node). The GPU side is the H200
node's capture (tests/data/hosts/kvm-emeraldrapids-h200: one GPU, UUID from nvidia-smi)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hwtune.planner import plan
from hwtune.probes import detect
from hwtune.probes.cuda_visible_snapshot import SNAPSHOT_NAME
from hwtune.probes.snapshot import take_snapshot
from tests.conftest import DATA

H200 = DATA / "hosts" / "kvm-emeraldrapids-h200"


def h200_copy(tmp_path: Path, recorded: object | None) -> Path:
    """The H200 capture, with `recorded` as its snapshot's variables file (None: no file)."""
    root = tmp_path / "h200"
    shutil.copytree(H200, root, symlinks=True)  # sysfs links, kept as links
    if recorded is not None:
        text = recorded if isinstance(recorded, str) else json.dumps(recorded)
        (root / SNAPSHOT_NAME).write_text(text)
    return root


def test_snapshot_records_the_variables_of_the_process_that_took_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-5e2f")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    manifest = take_snapshot(tmp_path / "snap", tensorflow=False)
    recorded = json.loads((tmp_path / "snap" / SNAPSHOT_NAME).read_text())
    assert recorded == {"CUDA_VISIBLE_DEVICES": "GPU-5e2f", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert manifest["captures"]["cuda_visible_devices"] == f"recorded in {SNAPSHOT_NAME}"
    assert SNAPSHOT_NAME in manifest["files"]


def test_nothing_is_recorded_when_the_variable_is_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # an order alone limits nothing
    manifest = take_snapshot(tmp_path / "snap", tensorflow=False)
    assert not (tmp_path / "snap" / SNAPSHOT_NAME).exists()
    assert manifest["captures"]["cuda_visible_devices"] == "unset: every GPU visible"


def test_detect_on_the_snapshot_sees_what_the_process_saw(tmp_path: Path) -> None:
    hidden = detect(h200_copy(tmp_path, {"CUDA_VISIBLE_DEVICES": ""}), tensorflow=False)
    assert len(hidden.gpus) == 1  # nvidia-smi lists it either way
    assert hidden.gpu_visibility is not None and hidden.gpu_visibility.gpus == ()
    assert not plan(hidden).instance.gpus  # the CPU plan, as the live process got
    uuid = hidden.gpus[0].uuid
    assert uuid
    named = detect(h200_copy(tmp_path / "b", {"CUDA_VISIBLE_DEVICES": uuid[:8]}), tensorflow=False)
    assert named.gpu_visibility is not None and named.gpu_visibility.gpus == (0,)


def test_a_snapshot_without_the_file_sees_every_gpu(tmp_path: Path) -> None:
    hw = detect(h200_copy(tmp_path, None), tensorflow=False)
    assert hw.gpu_visibility is None and len(hw.gpus) == 1


@pytest.mark.parametrize(
    "bad",
    [
        "{not json",
        '["CUDA_VISIBLE_DEVICES", "0"]',
        '{"CUDA_VISIBLE_DEVICES": 0}',
        '{"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}',
        '{"CUDA_VISIBLE_DEVICES": "0", "LD_PRELOAD": "x.so"}',
    ],
)
def test_a_damaged_file_is_an_issue_naming_it_and_is_not_used(tmp_path: Path, bad: str) -> None:
    hw = detect(h200_copy(tmp_path, bad), tensorflow=False)
    assert hw.gpu_visibility is None
    issue = next(i for i in hw.issues if i.path == SNAPSHOT_NAME)
    assert issue.probe == "gpu" and issue.reason.startswith("not used: ")


def test_explain_escapes_control_characters_the_snapshot_recorded(tmp_path: Path) -> None:
    """Before: `plan` escaped a recorded CUDA_DEVICE_ORDER of "\\x1b[2J..." (clear screen) in
    its table, but `explain` wrote the ESC raw into the reason it printed."""
    from tests.conftest import run_cli
    from tests.daemon_harness import build_host

    order = "\x1b[2J\x1b[31mFAKE\rline"
    root = build_host(tmp_path / "root", gpus=2).root  # two T4s: the order note is said
    recorded = {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": order}
    (root / SNAPSHOT_NAME).write_text(json.dumps(recorded))
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)}
    said = run_cli(["explain", "--root", str(root), "CUDA_VISIBLE_DEVICES"], environ)
    assert said.exit_status == 0, said.stderr
    assert "CUDA_DEVICE_ORDER=\\x1b[2J\\x1b[31mFAKE\\rline" in said.stdout, said.stdout
    assert "\x1b" not in said.stdout and "\r" not in said.stdout
