"""Knowledge values are data (issue 15 item 6): every field is checked against its grammar
when a table loads, so an override cannot write new directives into a rendered file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hwtune.errors import KnowledgeError
from hwtune.knowledge import DATA_DIR, clear_cache
from hwtune.planner.knowledge import load_knowledge
from tests.conftest import REPO
from tests.daemon_harness import build_host

INJECTED = "\ntry-import /tmp/planted.bazelrc\nbuild --run_under=/tmp/planted"


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    clear_cache()


def _override(directory: Path, table: str, key: str, **changes: Any) -> Path:
    shipped = json.loads((DATA_DIR / f"{table}.json").read_text())
    entry = next(e for e in shipped["entries"] if e["key"] == key)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{table}.json"
    path.write_text(json.dumps({"entries": [{**entry, **changes}]}))
    return path


@pytest.mark.parametrize(
    ("table", "key", "field", "value"),
    [
        ("compilers", "znver4", "flag", "-march=znver4" + INJECTED),
        ("compilers", "znver4", "flag", "-march=znver4 --run_under=/tmp/planted"),
        ("compilers", "znver4", "flag", "--run_under=/tmp/planted"),
        (
            "tensorflow_versions",
            "2.19",
            "pip_target",
            "//tensorflow/tools/pip_package:wheel" + INJECTED,
        ),
        ("tensorflow_versions", "2.19", "pip_target", "//x:wheel --run_under=/tmp/planted"),
        ("tensorflow_versions", "2.19", "configs", ["cuda", "cuda\nbuild --run_under=/tmp/p"]),
        ("tensorflow_versions", "2.19", "cc_env", ["CC_OPT_FLAGS", "LD_PRELOAD=/tmp/x"]),
        ("tensorflow_versions", "2.19", "bazel", "7.4.1 --host_jvm_args=-x"),
        ("tensorflow_versions", "2.19", "source", "release notes\nbuild --run_under=/tmp/p"),
        ("cuda_versions", "12.5", "min_driver", "555.42\t"),
        (
            "tensorflow_versions",
            "2.21",
            "bazelrc_repo_env",
            [{"name": "USE_PYWRAP_RULES", "value": "True" + INJECTED, "source": "x"}],
        ),
    ],
)
def test_a_value_outside_its_grammar_names_file_and_field(
    tmp_path: Path, table: str, key: str, field: str, value: Any
) -> None:
    path = _override(tmp_path, table, key, **{field: value})
    with pytest.raises(KnowledgeError) as caught:
        load_knowledge(extra_dirs=(tmp_path,))
    message = caught.value.message
    assert str(path) in message and f"field '{field}" in message, message
    assert "\n" not in message  # the excerpt is escaped: one line


def test_gpu_patterns_are_bounded(tmp_path: Path) -> None:
    from hwtune.knowledge import load_table
    from hwtune.probes.gpu import GpuEntry

    path = _override(tmp_path, "gpus", "A100", patterns=["A100|" * 100])
    with pytest.raises(KnowledgeError, match="field 'patterns\\[0\\]'") as caught:
        load_table("gpus", GpuEntry, (tmp_path,))
    assert str(path) in caught.value.message


def test_shipped_tables_fit_their_grammar() -> None:
    knowledge = load_knowledge(extra_dirs=())  # raises if any shipped value does not
    assert knowledge.tf_versions and knowledge.compilers


def test_apply_refuses_an_override_that_would_inject_bazelrc_lines(tmp_path: Path) -> None:
    root = build_host(tmp_path / "root").root
    knowledge = tmp_path / "knowledge"
    _override(
        knowledge,
        "tensorflow_versions",
        "2.19",
        pip_target="//tensorflow/tools/pip_package:wheel" + INJECTED,
    )
    out = tmp_path / "out"
    env = {**os.environ, "HWTUNE_KNOWLEDGE_DIR": str(knowledge), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hwtune",
            "apply",
            "--root",
            str(root),
            "--tf-version",
            "2.19",
            "--output",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    bazelrc = out / "tensorflow.bazelrc"
    assert not (bazelrc.exists() and "try-import" in bazelrc.read_text()), bazelrc.read_text()
    assert done.returncode != 0, done.stdout
    assert "pip_target" in done.stderr and "tensorflow_versions.json" in done.stderr, done.stderr
