"""Every reason and source reads true on the user's machine and cites what users can open.

A figure measured on the project's machines names where ("on a 2-vCPU EPYC VM, TF 2.21"),
never "here"; no reason, knowledge source, comment or doc cites the project's private notes
(anchors.md, tf-build.md, style.md, ../shared); test skip messages and the README carry no
machine paths or placeholders.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hwtune.models.convert import dump
from hwtune.planner import plan
from hwtune.probes import detect
from tests.conftest import DATA, REPO
from tests.test_plan_invariants import KNOWLEDGE

# The private notes, and the labels of their source list ("[S13]", "§5").
PRIVATE = re.compile(r"anchors\.md|tf-build\.md|style\.md|\.\./shared|\[S\d+\]|§\d")
HERE = re.compile(r"\bhere\b", re.IGNORECASE)
MACHINE_PATH = re.compile(r"/work/|/root/|/home/[a-z]")
PLACEHOLDER = re.compile(
    r"\bTODO\b|\bXXX\b|\bFIXME\b|<your[-_ ]|<placeholder>|/path/to/", re.IGNORECASE
)


def _strings_under(data: Any, keys: tuple[str, ...], found: str = "") -> Iterator[tuple[str, str]]:
    """(where, text) for every string under one of `keys`, at any depth."""
    if isinstance(data, dict):
        for key, value in data.items():
            inside = key in keys or any(found.endswith(k) for k in keys)
            if inside and isinstance(value, str):
                yield f"{found}.{key}", value
            else:
                yield from _strings_under(value, keys, f"{found}.{key}")
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _strings_under(value, keys, f"{found}[{index}]")


@pytest.mark.parametrize(
    "table", sorted((REPO / "hwtune" / "knowledge" / "data").glob("*.json")), ids=lambda p: p.name
)
def test_knowledge_sources_cite_public_material(table: Path) -> None:
    data = json.loads(table.read_text(encoding="utf-8"))
    bad = [
        (where, text)
        for where, text in _strings_under(data, ("source", "_doc"))
        if PRIVATE.search(text) or HERE.search(text)
    ]
    assert not bad, bad[:3]


def _hosts() -> list[Path]:
    hosts = DATA / "hosts"
    return sorted(p for p in hosts.iterdir() if p.is_dir()) if hosts.is_dir() else []


@pytest.mark.parametrize("root", _hosts(), ids=lambda p: p.name)
def test_every_reason_reads_true_on_the_users_machine(root: Path) -> None:
    hw = detect(root, gpus=True, tensorflow=True)
    reasons: list[tuple[str, str]] = []
    for model in ("unknown", "dense", "conv"):
        for precision in ("eligible", "auto", "off"):
            profile = plan(hw, knowledge=KNOWLEDGE, model=model, precision=precision)
            reasons += _strings_under(dump(profile), ("reason", "notes", "basis", "bazelrc"))
    reasons += _strings_under(dump(hw), ("basis", "reason"))
    assert reasons
    bad = sorted({text for _, text in reasons if PRIVATE.search(text) or HERE.search(text)})
    assert not bad, bad[:3]


def _text_files() -> Iterator[Path]:
    yield REPO / "README.md"
    yield from sorted((REPO / "docs").glob("*.md"))
    yield from sorted((REPO / "hwtune").rglob("*.py"))
    yield from sorted((REPO / "bazel_templates").glob("*.tmpl"))


def test_no_code_comment_or_doc_cites_private_notes() -> None:
    bad = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in _text_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert not bad, bad[:5]


def test_readme_has_no_machine_paths_or_placeholders() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert not MACHINE_PATH.findall(text)
    assert not PLACEHOLDER.findall(text)


def _skip_reasons(path: Path) -> Iterator[tuple[int, str]]:
    """The source text of every skip reason in a test file: pytest.skip(), skipif(reason=)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        if name.endswith(("skip", "skipif", "importorskip")):
            for arg in [*node.args, *(k.value for k in node.keywords if k.arg == "reason")]:
                if isinstance(arg, (ast.Constant, ast.JoinedStr)):
                    yield node.lineno, ast.unparse(arg)


def test_skip_messages_carry_no_machine_paths() -> None:
    """A skip message names what is missing, not where it was looked for on one machine: no
    literal machine path, and no interpolated path variable (SHARED_HW, a home directory)."""
    bad = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for line, reason in _skip_reasons(path):
            if MACHINE_PATH.search(reason) or re.search(
                r"\{[^}]*(HW|home|HOME|dir|path)\b", reason
            ):
                bad.append(f"{path.relative_to(REPO)}:{line}: {reason}")
    assert not bad, bad


def test_the_bazelrc_header_names_the_file_apply_writes() -> None:
    from hwtune.apply.render import BAZELRC_FILE

    hw = detect(DATA / "hosts" / _hosts()[0].name, gpus=True, tensorflow=True)
    profile = plan(hw, knowledge=KNOWLEDGE, tf_version="2.21")
    assert profile.bazel is not None
    header = [line for line in profile.bazel.bazelrc.splitlines() if line.startswith("#")]
    assert any(f"writes it as {BAZELRC_FILE}" in line for line in header), header[:4]
    assert any(f"--bazelrc={BAZELRC_FILE}" in line for line in header), header
