"""deploy/: the Kubernetes DaemonSet (schema-valid, wired to NFD) and the Slurm TaskProlog."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hwtune.apply.nfd import DEFAULT_DIR, PREFIX
from tests.conftest import REPO
from tests.daemon_harness import build_host
from tests.nfd_rules import is_dns1123_subdomain, is_qualified_name, is_valid_label_value

MANIFEST = REPO / "deploy" / "kubernetes" / "hwtune-nfd-daemonset.yaml"
PROLOG = REPO / "deploy" / "slurm" / "hwtune-task-prolog.sh"


def _documents() -> list[dict[str, Any]]:
    yaml = pytest.importorskip("yaml", reason="PyYAML (pulled in by kubernetes-validate) absent")
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


def test_daemonset_is_valid_against_the_kubernetes_schema() -> None:
    validate = pytest.importorskip(
        "kubernetes_validate",
        reason="kubernetes-validate (bundles the Kubernetes OpenAPI schemas) is not installed",
    )
    version = validate.latest_version()
    for document in _documents():
        # strict: unknown fields are errors too, as `kubectl apply --validate=strict` has them
        validate.validate(document, version, strict=True)


def test_daemonset_schema_check_catches_a_mistake() -> None:
    validate = pytest.importorskip(
        "kubernetes_validate",
        reason="kubernetes-validate (bundles the Kubernetes OpenAPI schemas) is not installed",
    )
    broken = _documents()[0]
    broken["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []  # typo'd key
    with pytest.raises(validate.ValidationError):
        validate.validate(broken, validate.latest_version(), strict=True)


def test_daemonset_runs_the_daemon_into_nfd_features_d() -> None:
    (daemonset,) = _documents()
    assert daemonset["kind"] == "DaemonSet"
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    argv = container["command"] + container["args"]
    assert argv[:3] == ["hwtune", "daemon", "--nfd"]
    assert f"--nfd-dir={DEFAULT_DIR}" in argv
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["features-d"] == DEFAULT_DIR
    assert volumes["features-d"]["hostPath"]["path"] == DEFAULT_DIR
    assert "cpu" not in container["resources"].get("limits", {})  # see the manifest's comment


def test_daemonset_names_and_selector_follow_kubernetes_rules() -> None:
    """What the schema does not check and the API server does: names are DNS-1123 (object
    a subdomain, container and volumes labels), labels are valid, the selector matches the
    pod template (apps/v1 rejects a DaemonSet whose selector does not), every mount names a
    volume, and the features.d hostPath is the directory nfd-worker reads."""
    (daemonset,) = _documents()
    assert not is_dns1123_subdomain(daemonset["metadata"]["name"])
    pod = daemonset["spec"]["template"]
    for key, value in {**daemonset["metadata"]["labels"], **pod["metadata"]["labels"]}.items():
        assert not is_qualified_name(key) and not is_valid_label_value(value), key
    selector = daemonset["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    spec = pod["spec"]
    volumes = {v["name"] for v in spec["volumes"]}
    for name in volumes | {c["name"] for c in spec["containers"]}:
        assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
    for container in spec["containers"]:
        assert {m["name"] for m in container["volumeMounts"]} <= volumes
    (host,) = [v["hostPath"] for v in spec["volumes"] if "hostPath" in v]
    assert host["path"].rstrip("/") == DEFAULT_DIR and host["type"] == "DirectoryOrCreate"


def test_older_nfd_masters_are_told_to_allow_the_label_namespace() -> None:
    """nfd-master before v0.13 publishes only feature.node.kubernetes.io and drops the rest
    (node-feature-discovery PR #1051 made other namespaces the default; issues #384, #424):
    the manifest and the docs name the flag that keeps hwtune's labels."""
    flag = f"-extra-label-ns={PREFIX}"
    assert flag in MANIFEST.read_text()
    assert flag in (REPO / "docs" / "daemon.md").read_text()


def _fake_install(tmp_path: Path, root: Path) -> Path:
    """An `hwtune` executable for the prolog: this interpreter, planning for the host tree."""
    tool = tmp_path / "bin" / "hwtune"
    tool.parent.mkdir()
    tool.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m hwtune "$@" --root "{root}"\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return tool


def _run_prolog(tool: Path, tmp_path: Path, **task_env: str) -> list[str]:
    # slurmstepd gives the prolog the task's environment and no PATH of its own choosing.
    env = {
        "HWTUNE": str(tool),
        "PYTHONPATH": str(REPO),
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "PATH": "/usr/bin:/bin",
        **task_env,
    }
    done = subprocess.run(
        ["/bin/sh", str(PROLOG)], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_task_prolog_exports_each_ranks_slice(tmp_path: Path) -> None:
    host = build_host(tmp_path / "root", gpus=0)
    tool = _fake_install(tmp_path, host.root)
    config = tmp_path / "xdg" / "hwtune" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[env]\nJOB_NOTE = "two words"\n')

    alone = _run_prolog(
        tool, tmp_path, SLURM_LOCALID="0", SLURM_NTASKS_PER_NODE="1", SLURM_STEP_ID="0"
    )
    rank0 = _run_prolog(
        tool, tmp_path, SLURM_LOCALID="0", SLURM_NTASKS_PER_NODE="2", SLURM_STEP_ID="0"
    )
    rank1 = _run_prolog(
        tool, tmp_path, SLURM_LOCALID="1", SLURM_NTASKS_PER_NODE="2", SLURM_STEP_ID="0"
    )
    for lines in (alone, rank0, rank1):
        assert lines, "no export lines"
        # What slurmstepd's _proc_stdout accepts: "export NAME=value", the value literal.
        for line in lines:
            assert re.fullmatch(r"export [A-Za-z_][A-Za-z0-9_]*=[^\n]*", line), line
        assert "export JOB_NOTE=two words" in lines  # no shell quoting around the value

    def intra(lines: list[str]) -> int:
        return int(
            next(ln for ln in lines if ln.startswith("export TF_NUM_INTRAOP_THREADS=")).split(
                "=", 1
            )[1]
        )

    assert intra(alone) == 24  # 2 sockets x 12 cores
    assert intra(rank0) == intra(rank1) == 12  # each rank gets its own half


def test_task_prolog_is_silent_without_hwtune(tmp_path: Path) -> None:
    assert _run_prolog(tmp_path / "nowhere" / "hwtune", tmp_path, SLURM_LOCALID="0") == []
    assert os.access(PROLOG, os.X_OK)
