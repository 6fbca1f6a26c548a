"""`hwtune plan` and `hwtune explain` end to end, in-process, with real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hwtune.models.convert import dump
from hwtune.models.hardware import Hardware
from tests.conftest import DATA, run_cli
from tests.plan_builders import make_hardware, p4d_hardware, tf_info

JSON_KEYS = {
    "env",
    "threads",
    "jit",
    "precision",
    "data_format",
    "tf_data",
    "distribution",
    "bazel",
    "left_out",
}


def clean_environ(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No HWTUNE_* from the caller, and a private XDG_CONFIG_HOME."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HWTUNE_")}
    environ["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    environ.update(extra)
    return environ


def save(hw: Hardware, tmp_path: Path, name: str = "hw.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(dump(hw)))
    return str(path)


def test_plan_json_contract(tmp_path: Path) -> None:
    hw = save(make_hardware(tensorflow=tf_info()), tmp_path)
    result = run_cli(["plan", "--hardware", hw, "--json"], clean_environ(tmp_path))
    assert result.exit_status == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) >= JSON_KEYS
    # The thread counts are stored once, in `threads`; `hwtune env` derives the variables.
    assert "TF_NUM_INTRAOP_THREADS" not in data["env"]
    assert data["threads"]["intra_op"]["value"] == 2
    assert set(data["threads"]) == {"intra_op", "inter_op", "openmp"}
    assert (
        data["precision"]["eligible"] == ["mixed_bfloat16"]
        and data["precision"]["enabled"] is None
    )
    assert data["distribution"] is None
    assert set(data["bazel"]) >= {"tf_version", "options", "bazelrc"}
    assert isinstance(data["bazel"]["options"], list) and data["bazel"]["bazelrc"].startswith(
        "# hwtune"
    )
    left = {item["name"]: item["reason"] for item in data["left_out"]}
    assert left["KMP_AFFINITY"].startswith("left out: this TensorFlow runs oneDNN on its Eigen")
    assert "KMP_AFFINITY" not in data["env"]


def test_plan_json_gpu(tmp_path: Path) -> None:
    hw = save(p4d_hardware(), tmp_path)
    result = run_cli(
        ["plan", "--hardware", hw, "--json", "--instances", "2", "--instance", "1"],
        clean_environ(tmp_path),
    )
    data = json.loads(result.stdout)
    assert data["distribution"]["cross_device_ops"]["value"] == "NcclAllReduce"
    assert data["env"]["CUDA_VISIBLE_DEVICES"]["value"] == "4,5,6,7"
    assert data["instance"]["numa_nodes"] == [1]


def test_plan_table(tmp_path: Path) -> None:
    hw = save(make_hardware(tensorflow=tf_info()), tmp_path)
    result = run_cli(["plan", "--hardware", hw], clean_environ(tmp_path))
    assert result.exit_status == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["SETTING", "VALUE", "REASON"]
    assert any(line.startswith("KMP_AFFINITY") and "(left out)" in line for line in lines)
    assert any(line.startswith("threads.intra_op") for line in lines)


def test_plan_from_a_captured_root(tmp_path: Path) -> None:
    root = DATA / "hosts" / "utillinux-x86_64-epyc_7451"
    if not root.is_dir():
        pytest.skip("host capture not present")
    environ = clean_environ(tmp_path)
    result = run_cli(
        ["plan", "--root", str(root), "--json", "--instances", "8", "--instance", "3"], environ
    )
    assert result.exit_status == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["instance"]["numa_nodes"] == [3]
    assert data["threads"]["intra_op"]["value"] == 6
    strict = run_cli(["plan", "--root", str(root), "--strict"], environ)
    assert strict.exit_status == 3  # the capture has no /proc/meminfo: a partial probe


def test_overrides_reach_the_profile(tmp_path: Path) -> None:
    config = tmp_path / "xdg" / "hwtune" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('mode = "latency"\n[env]\nTF_CPP_MIN_LOG_LEVEL = "2"\n')
    hw = save(make_hardware(cores_per_socket=8), tmp_path)
    environ = clean_environ(tmp_path, HWTUNE_INTRA_OP="3")
    result = run_cli(["plan", "--hardware", hw, "--json", "--set", "FOO=bar"], environ)
    data = json.loads(result.stdout)
    assert data["intent"]["mode"] == "latency"
    assert data["env"]["TF_CPP_MIN_LOG_LEVEL"] == {
        "value": "2",
        "reason": f"set by the user ({config})",
        "source": "user",
    }
    assert data["env"]["FOO"]["reason"] == "set by the user (--set)"
    assert data["threads"]["intra_op"] == {
        "value": 3,
        "reason": "set by the user (HWTUNE_INTRA_OP)",
        "source": "user",
    }
    flag = run_cli(["plan", "--hardware", hw, "--json", "--mode", "throughput"], environ)
    assert json.loads(flag.stdout)["intent"]["mode"] == "throughput"


def test_errors_exit_1_with_file_key_and_hint(tmp_path: Path) -> None:
    config = tmp_path / "xdg" / "hwtune" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[threads]\nintra = 2\n")
    hw = save(make_hardware(), tmp_path)
    result = run_cli(["plan", "--hardware", hw], clean_environ(tmp_path))
    assert result.exit_status == 1
    assert f"{config} at 'threads.intra': unknown key" in result.stderr
    assert "hint: did you mean 'intra_op'?" in result.stderr
    config.unlink()
    too_many = run_cli(["plan", "--hardware", hw, "--instances", "5"], clean_environ(tmp_path))
    assert too_many.exit_status == 1 and "5 instances need 5 physical cores" in too_many.stderr
    missing = run_cli(["plan", "--hardware", str(tmp_path / "nope.json")], clean_environ(tmp_path))
    assert missing.exit_status == 1 and "cannot read" in missing.stderr
    usage = run_cli(["plan", "--mode", "fast"], clean_environ(tmp_path))
    assert usage.exit_status == 2


def test_explain(tmp_path: Path) -> None:
    hw = save(make_hardware(tensorflow=tf_info()), tmp_path)
    environ = clean_environ(tmp_path)
    result = run_cli(["explain", "KMP_AFFINITY", "--hardware", hw], environ)
    assert result.exit_status == 0
    assert "left out: this TensorFlow runs oneDNN on its Eigen thread pool" in result.stdout
    result = run_cli(
        ["explain", "threads.intra_op", "--hardware", hw, "--mode", "latency"], environ
    )
    assert result.stdout.startswith("threads.intra_op = 2")
    result = run_cli(["explain", "KMP_AFINITY", "--hardware", hw], environ)
    assert result.exit_status == 1 and "did you mean KMP_AFFINITY?" in result.stderr


def test_plan_this_machine(tmp_path: Path) -> None:
    result = run_cli(["plan", "--json"], clean_environ(tmp_path))
    assert result.exit_status == 0, result.stderr
    data = json.loads(result.stdout)
    assert 1 <= data["threads"]["intra_op"]["value"] <= (os.cpu_count() or 1)


def test_tuned_results_apply_only_to_the_workload_named(tmp_path: Path) -> None:
    store = pytest.importorskip("hwtune.pipeline.measured")
    hw = save(make_hardware(cores_per_socket=8, smt=2), tmp_path)
    environ = clean_environ(tmp_path, HWTUNE_TUNED_DIR=str(tmp_path / "tuned"))
    first = json.loads(run_cli(["plan", "--hardware", hw, "--json"], environ).stdout)
    assert first["threads"]["intra_op"]["source"] == "rule"
    record = {
        "fingerprint": first["fingerprint"],
        "workload": "builtin:cnn",
        "mode": "throughput",
        "ratio": 1.31,
        "ratio_interval": [1.18, 1.45],
        "created": "2026-01-02T03:04:05+00:00",
        "settings": {"threads.intra_op": 12, "instances": 1},
    }
    store.save_result(record, environ)
    # A benchmark's result never changes a job that does not name it.
    other = json.loads(run_cli(["plan", "--hardware", hw, "--json"], environ).stdout)
    assert other["threads"]["intra_op"]["source"] == "rule" and other["measurement"] is None
    named = ["plan", "--hardware", hw, "--json", "--workload", "builtin:cnn"]
    data = json.loads(run_cli(named, environ).stdout)
    assert data["threads"]["intra_op"] == {
        "value": 12,
        "reason": "measured: 1.31× over the rule's choice (95% interval 1.18-1.45×, "
        "re-measured side by side)",
        "source": "measured",
    }
    assert data["measurement"]["workload"] == "builtin:cnn"
    assert data["measurement"]["created"] == record["created"]
    by_variable = {**environ, "HWTUNE_WORKLOAD": "builtin:cnn"}
    table = run_cli(["plan", "--hardware", hw], by_variable)
    row = next(line for line in table.stdout.splitlines() if line.startswith("measured "))
    assert "builtin:cnn" in row and record["created"] in row and "1.31×" in row
    rules = run_cli([*named, "--no-measured"], environ)
    assert json.loads(rules.stdout)["threads"]["intra_op"]["source"] == "rule"
    (tmp_path / "tuned" / first["fingerprint"] / "builtin_cnn.json").write_text("{")
    broken = run_cli(named, environ)
    assert broken.exit_status == 0 and "tuned results ignored" in broken.stderr


def test_a_result_moved_into_another_machines_directory_is_not_applied_there(
    tmp_path: Path,
) -> None:
    """A result lies in <tuned dir>/<fingerprint>/, and before only that directory was
    checked: a file moved (or copied, as with a shared HWTUNE_TUNED_DIR) into another
    machine's directory was applied there as measured, 1.31× and all. Its own "fingerprint"
    now has to be the machine's; one that records none is ignored too."""
    store = pytest.importorskip("hwtune.pipeline.measured")
    environ = clean_environ(tmp_path, HWTUNE_TUNED_DIR=str(tmp_path / "tuned"))
    small = save(make_hardware(cores_per_socket=8, smt=2), tmp_path, "small.json")
    big = save(make_hardware(cores_per_socket=16, smt=2), tmp_path, "big.json")
    named = ["--json", "--workload", "builtin:cnn"]

    def plan(hw: str) -> tuple[dict[str, object], str]:
        result = run_cli(["plan", "--hardware", hw, *named], environ)
        assert result.exit_status == 0, result.stderr
        return json.loads(result.stdout), result.stderr

    there, _ = plan(small)
    here, _ = plan(big)
    assert there["fingerprint"] != here["fingerprint"]
    record = {
        "fingerprint": there["fingerprint"],
        "workload": "builtin:cnn",
        "mode": "throughput",
        "ratio": 1.31,
        "settings": {"threads.intra_op": 3, "instances": 1},
    }
    measured_there = store.save_result(record, environ)
    assert plan(small)[0]["measurement"] is not None  # where it was measured, it applies
    moved = tmp_path / "tuned" / str(here["fingerprint"]) / measured_there.name
    moved.parent.mkdir(mode=0o700)
    measured_there.rename(moved)
    data, said = plan(big)
    assert data["measurement"] is None and data["threads"]["intra_op"]["source"] == "rule"
    assert f"tuned results ignored: {moved}: measured on hardware" in said, said
    assert repr(there["fingerprint"]) in said and f"not this one ({here['fingerprint']})" in said
    unsaid = json.loads(moved.read_text())
    del unsaid["fingerprint"]
    moved.write_text(json.dumps(unsaid))
    data, said = plan(big)
    assert data["measurement"] is None and "records no hardware fingerprint" in said, said


def test_an_explicit_model_beats_a_measurement_of_another_kind(tmp_path: Path) -> None:
    store = pytest.importorskip("hwtune.pipeline.measured")
    hw = save(make_hardware(cores_per_socket=8, smt=2), tmp_path)
    environ = clean_environ(tmp_path, HWTUNE_TUNED_DIR=str(tmp_path / "tuned"))
    first = json.loads(run_cli(["plan", "--hardware", hw, "--json"], environ).stdout)
    settings = {"threads.intra_op": 1, "jit.level": "off", "instances": 2}
    record = {
        "fingerprint": first["fingerprint"],
        "workload": "train",
        "mode": "throughput",
        "model": "conv",
        "ratio": 1.95,
        "settings": settings,
    }
    store.save_result(record, environ)
    base = ["plan", "--hardware", hw, "--json", "--workload", "train"]
    dense = run_cli([*base, "--model", "dense"], environ)
    data = json.loads(dense.stdout)
    assert data["jit"]["level"]["source"] == "rule" and data["measurement"] is None
    assert "measured with model conv" in dense.stderr
    # Its instance count is for `exec`: plan keeps one instance and the measured threads,
    # which were measured for two copies, stay out too.
    conv = run_cli([*base, "--model", "conv"], environ)
    data = json.loads(conv.stdout)
    assert data["intent"]["instances"] == 1
    assert data["threads"]["intra_op"]["source"] == "rule"
    assert data["jit"]["level"]["source"] == "measured"
    assert "measured for 2 instances, planning 1" in conv.stderr


def test_a_hardware_file_is_not_taken_for_the_build_host(tmp_path: Path) -> None:
    """`detect --json` on a Sapphire Rapids server says "root": "/"; planned on a CI machine
    with --hardware, tools built with its -march would die with SIGILL on the build host."""
    saved = make_hardware()
    assert saved.root == "/"
    result = run_cli(
        ["plan", "--hardware", save(saved, tmp_path), "--json"], clean_environ(tmp_path)
    )
    assert result.exit_status == 0, result.stderr
    bazel = json.loads(result.stdout)["bazel"]
    assert not any(option.startswith("--host_copt") for option in bazel["options"])
    assert any("--root or --hardware" in reason for reason in bazel["reasons"])


def _hardware_with(tmp_path: Path, change: dict[str, object]) -> str:
    """make_hardware() saved with the dotted keys of `change` (a number indexes a list) set to
    the given values."""
    data = dump(make_hardware())
    for dotted, value in change.items():
        *parents, last = dotted.split(".")
        node = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[last] = value
    path = tmp_path / "hw.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("limits.effective_cpus", -4, "-4 is negative"),
        ("limits.effective_cpus", 0, "0 is below 1, where detect floors it"),
        ("limits.effective_cpus", 64, "64 is more than the 2 usable CPUs"),
        ("limits.memory_bytes", 0, "0 bytes"),
        ("limits.memory_limit_bytes", 0, "0 bytes"),
        ("memory.total_bytes", 0, "0 bytes"),
        ("limits.usable_cpus", [9], "CPU 9 is usable but not in cpu.online_cpus"),
        ("limits.cpu_quota", 0, "0.0 CPUs is no quota"),
        ("cpu.physical_cores", -1, "-1 is negative"),
        ("numa.0.memory_bytes", -1, "-1 is negative"),
        ("cpu.online_cpus", [0, 70000], "CPU 70000 is beyond 65535"),
    ],
)
def test_a_hardware_file_with_impossible_values_is_refused(
    key: str, value: object, said: str, tmp_path: Path
) -> None:
    """Before: exit 0 and a plan of one thread, a RAM budget of 0, or pinning to CPU 9."""
    hw = _hardware_with(tmp_path, {key: value})
    result = run_cli(["plan", "--hardware", hw], clean_environ(tmp_path))
    assert result.exit_status == 1, result.stderr
    where = key.replace(".0.", "[0].") + ("[1]" if key == "cpu.online_cpus" else "")
    assert f"--hardware {hw} at '{where}': {said}" in result.stderr, result.stderr
    assert "hint: give a file written by `hwtune detect --json`" in result.stderr


@pytest.mark.parametrize(
    ("change", "key", "said"),
    [
        ({}, "limits.effective_cpus", "100000000 CPUs is beyond 65536"),
        ({"cpu.logical_cpus": 10**8}, "cpu.logical_cpus", "100000000 CPUs is beyond 65536"),
        (
            {"cpu.logical_cpus": 4, "limits.effective_cpus": 8},
            "limits.effective_cpus",
            "8 is more than the 4 logical CPUs",
        ),
        (
            {"cpu.online_cpus": [0, 1], "limits.effective_cpus": 3},
            "limits.effective_cpus",
            "3 is more than the 2 online CPUs",
        ),
    ],
)
def test_a_hardware_file_with_more_effective_cpus_than_it_has_is_refused(
    change: dict[str, object], key: str, said: str, tmp_path: Path
) -> None:
    """No CPU list and a huge count: before, the planner laid out range(10^8) CPUs (8.6 GB and
    over a minute) and planned millions of threads; now a one-line refusal naming the key."""
    sparse: dict[str, object] = {
        "limits.usable_cpus": [],
        "limits.affinity_cpus": [],
        "cpu.online_cpus": [],
        "cpu.logical_cpus": None,
        "cpu.topology": [],
        "numa": [],
        "limits.effective_cpus": 100_000_000,
    }
    hw = _hardware_with(tmp_path, {**sparse, **change})
    result = run_cli(["plan", "--hardware", hw], clean_environ(tmp_path))
    assert result.exit_status == 1, result.stderr
    assert f"--hardware {hw} at '{key}': {said}" in result.stderr, result.stderr


def test_the_planner_lays_out_no_more_cpus_than_linux_numbers() -> None:
    """An unchecked model (built in code, not read from a file) is capped too."""
    from dataclasses import replace

    from hwtune.models.cpulist import MAX_CPU
    from hwtune.planner.instances import usable_cpus

    hw = make_hardware()
    hw = replace(
        hw,
        cpu=replace(hw.cpu, online_cpus=(), logical_cpus=None, topology=()),
        limits=replace(hw.limits, usable_cpus=(), effective_cpus=10**8),
    )
    assert len(usable_cpus(hw)) == MAX_CPU


@pytest.mark.parametrize(
    ("text", "said"),
    [("1e999", " at 'limits.cpu_quota': inf is not a finite number"), ("NaN", ": invalid JSON")],
)
def test_a_hardware_file_with_a_non_finite_number_is_refused(
    text: str, said: str, tmp_path: Path
) -> None:
    hw = _hardware_with(tmp_path, {"limits.cpu_quota": 1.5})
    Path(hw).write_text(Path(hw).read_text().replace('"cpu_quota": 1.5', f'"cpu_quota": {text}'))
    result = run_cli(["plan", "--hardware", hw], clean_environ(tmp_path))
    assert result.exit_status == 1 and f"--hardware {hw}{said}" in result.stderr, result.stderr


def test_a_hardware_file_with_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    hw = _hardware_with(tmp_path, {"limits.cpu_quota": 1.5})
    text = Path(hw).read_text().replace('"cpu_quota": 1.5', '"cpu_quota": 1.5, "cpu_quota": 8')
    Path(hw).write_text(text)
    result = run_cli(["plan", "--hardware", hw], clean_environ(tmp_path))
    assert result.exit_status == 1, result.stderr
    assert f"--hardware {hw}: invalid JSON: key 'cpu_quota' given twice" in result.stderr


@pytest.mark.parametrize("version", [999, 2, 0, -1])
def test_a_hardware_file_of_another_schema_version_is_refused(
    version: int, tmp_path: Path
) -> None:
    """A newer model is named as newer, before any key it added is reported as unknown."""
    data = {**dump(make_hardware()), "schema_version": version, "added_later": 1}
    (tmp_path / "hw.json").write_text(json.dumps(data))
    result = run_cli(["plan", "--hardware", str(tmp_path / "hw.json")], clean_environ(tmp_path))
    assert result.exit_status == 1
    said = "is newer than this hwtune reads (1)" if version > 1 else "is not one any hwtune wrote"
    assert f"schema_version {version} {said}" in result.stderr, result.stderr


def test_unknown_values_stay_accepted_in_a_hardware_file(tmp_path: Path) -> None:
    """null is how the probes say "unknown": never refused."""
    change: dict[str, object] = {
        "limits.memory_bytes": None,
        "limits.memory_limit_bytes": None,
        "limits.cpu_quota": None,
        "memory.total_bytes": None,
        "cpu.physical_cores": None,
        "cpu.sockets": None,
    }
    result = run_cli(
        ["plan", "--hardware", _hardware_with(tmp_path, change), "--json"],
        clean_environ(tmp_path),
    )
    assert result.exit_status == 0, result.stderr


@pytest.mark.parametrize("root", [None, "utillinux-x86_64-epyc_7451", "epyc7451-p4d-8xa100-gpu"])
def test_what_detect_writes_is_read_back(root: str | None, tmp_path: Path) -> None:
    """The checks refuse only what no probe writes: `detect --json` of this machine and of
    captured ones plans from --hardware."""
    argv = ["detect", "--json"]
    if root is not None:
        if not (DATA / "hosts" / root).is_dir():
            pytest.skip("host capture not present")
        argv += ["--root", str(DATA / "hosts" / root)]
    environ = clean_environ(tmp_path)
    detected = run_cli(argv, environ)
    (tmp_path / "hw.json").write_text(detected.stdout)
    result = run_cli(["plan", "--hardware", str(tmp_path / "hw.json")], environ)
    assert result.exit_status == 0, result.stderr


def test_a_setting_measured_for_other_instances_claims_no_speed_up(tmp_path: Path) -> None:
    """A result measured as two copies (1.83×), planned as one: its XLA pick still applies,
    but with the ratio in its reason the plan claimed a speed-up nobody measured for one copy
    running it without the rest of that combination. Planned as two, the claim holds."""
    store = pytest.importorskip("hwtune.pipeline.measured")
    hw = save(make_hardware(cores_per_socket=8, smt=2), tmp_path)
    environ = clean_environ(tmp_path, HWTUNE_TUNED_DIR=str(tmp_path / "tuned"))
    first = json.loads(run_cli(["plan", "--hardware", hw, "--json"], environ).stdout)
    record = {
        "fingerprint": first["fingerprint"],
        "workload": "train",
        "mode": "throughput",
        "ratio": 1.83,
        "settings": {"threads.intra_op": 1, "jit.level": "off", "instances": 2},
    }
    store.save_result(record, environ)
    base = ["plan", "--hardware", hw, "--json", "--workload", "train"]
    planned_one = json.loads(run_cli(base, environ).stdout)
    one = planned_one["jit"]["level"]
    assert one["source"] == "measured" and "1.83×" not in one["reason"]
    assert "measured for 2 instances; applied to 1" in one["reason"]
    # The measured row and --json's measurement claimed the 1.83× too: no ratio for one copy.
    assert planned_one["measurement"]["ratio"] is None
    assert planned_one["measurement"]["instances"] == 2
    table = run_cli(["plan", "--hardware", hw, "--workload", "train"], environ)
    measured_row = next(ln for ln in table.stdout.splitlines() if ln.startswith("measured "))
    assert "1.83" not in measured_row, measured_row
    assert "measured for 2 instances; speed-up not claimed for 1" in measured_row
    planned_two = json.loads(run_cli([*base, "--instances", "2"], environ).stdout)
    two = planned_two["jit"]["level"]
    assert two["source"] == "measured" and "1.83× over the rule's choice" in two["reason"]
    assert planned_two["measurement"]["ratio"] == 1.83
    assert planned_two["measurement"]["instances"] == 2
    table = run_cli(["plan", "--hardware", hw, "--workload", "train", "--instances", "2"], environ)
    assert "1.83× over the rule's choice" in table.stdout
    # Both validate against the profile schema `hwtune schema profile` prints.
    from hwtune.commands.schema import json_schema

    jsonschema = pytest.importorskip("jsonschema")
    for planned in (planned_one, planned_two):
        jsonschema.validate(planned, json_schema("profile"))


@pytest.mark.parametrize(
    ("key", "where"),
    [
        ("numa.0.id", "numa[0].id"),
        ("cpu.topology.1.node", "cpu.topology[1].node"),
        ("gpus.0.numa_node", "gpus[0].numa_node"),
    ],
)
def test_a_numa_node_id_no_kernel_has_is_refused(key: str, where: str, tmp_path: Path) -> None:
    """Before: `exec --instances 2 --instance 1` with node 10^18 died with a MemoryError
    traceback (or "Exception occurred in preexec_fn") sizing the set_mempolicy(2) mask."""
    from tests.plan_builders import make_gpus

    data = dump(make_hardware(gpus=make_gpus(1)))
    *parents, last = key.split(".")
    node = data
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[last] = 10**18
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps(data))
    said = f"--hardware {hw} at '{where}': NUMA node {10**18} is beyond 1023"
    environ = clean_environ(tmp_path)
    planned = run_cli(["plan", "--hardware", str(hw)], environ)
    assert planned.exit_status == 1 and said in planned.stderr, planned.stderr
    argv = ["exec", "--hardware", str(hw), "--instances", "2", "--instance", "1", "--", "true"]
    launched = subprocess.run(
        [sys.executable, "-m", "hwtune", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
    )
    assert launched.returncode != 0 and said in launched.stderr, launched.stderr
    assert "Traceback" not in launched.stderr and "preexec_fn" not in launched.stderr


@pytest.mark.parametrize("node", [1024, 10**18, -1])
def test_set_mempolicy_refuses_a_node_no_kernel_has_before_sizing_a_mask(node: int) -> None:
    import errno

    from hwtune.apply.mempolicy import MPOL_BIND, set_mempolicy

    with pytest.raises(OSError) as raised:
        set_mempolicy(MPOL_BIND, [0, node])
    assert raised.value.errno == errno.EINVAL
    assert f"NUMA node {node} is not in 0-1023" in str(raised.value)


@pytest.mark.parametrize(
    ("change", "key", "said"),
    [
        (
            {"limits.cpu_quota": 0.5, "limits.effective_cpus": 2},
            "limits.effective_cpus",
            "2 is more than the cgroup quota of 0.5 CPUs allows (1: floored, at least 1)",
        ),
        (
            {"limits.cpu_quota": 1.9, "limits.effective_cpus": 2},
            "limits.effective_cpus",
            "2 is more than the cgroup quota of 1.9 CPUs allows (1: floored, at least 1)",
        ),
        (
            {"limits.affinity_cpus": [0], "limits.cpuset_cpus": [0]},
            "limits.usable_cpus",
            "CPU 1 is usable but not in limits.affinity_cpus",
        ),
        (
            {"limits.affinity_cpus": [0, 1], "limits.cpuset_cpus": [1]},
            "limits.usable_cpus",
            "CPU 0 is usable but not in limits.cpuset_cpus",
        ),
    ],
)
def test_a_hardware_file_whose_limits_contradict_each_other_is_refused(
    change: dict[str, object], key: str, said: str, tmp_path: Path
) -> None:
    """Before: 2 intra-op threads under a 0.5-CPU quota (detect under it plans 1), and 2
    threads pinned to CPUs 0-1 with CPU 0 alone allowed."""
    hw = _hardware_with(tmp_path, change)
    result = run_cli(["plan", "--hardware", hw], clean_environ(tmp_path))
    assert result.exit_status == 1, result.stderr
    assert f"--hardware {hw} at '{key}': {said}" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "change",
    [
        {"limits.cpu_quota": 0.5, "limits.effective_cpus": 1},
        {"limits.cpu_quota": 2.0, "limits.effective_cpus": 2},
        # online ∩ affinity ∩ cpuset empty: detect falls back to the online list
        {"limits.affinity_cpus": [5], "limits.cpuset_cpus": [6]},
    ],
)
def test_limits_as_detect_derives_them_stay_accepted(
    change: dict[str, object], tmp_path: Path
) -> None:
    hw = _hardware_with(tmp_path, change)
    result = run_cli(["plan", "--hardware", hw], clean_environ(tmp_path))
    assert result.exit_status == 0, result.stderr


def test_every_stderr_line_names_the_subcommand_and_its_kind(tmp_path: Path) -> None:
    """A driver warning on a GPU root read "hwtune: warning: …" where the other lines of the
    same run read "hwtune plan: note|warning: …": one form for every subcommand."""
    import re

    from tests.gpu_roots import T4_HOST

    environ = {k: v for k, v in os.environ.items() if not k.startswith("HWTUNE_")}
    environ["XDG_CACHE_HOME"] = str(tmp_path)
    for command in ("plan", "explain"):
        argv = [command, "--root", str(T4_HOST), *(["jit.level"] if command == "explain" else [])]
        done = run_cli(argv, environ)
        assert done.exit_status == 0, done.stderr
        lines = [line for line in done.stderr.splitlines() if not line.startswith("hint: ")]
        if command == "plan":
            assert any("NVIDIA driver" in line for line in lines), done.stderr
        for line in lines:
            assert re.match(rf"hwtune {command}: (note|warning): ", line), line
