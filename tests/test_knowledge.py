"""Knowledge loader: shipped tables validate; user entries add or replace; errors name files."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from hwtune.errors import KnowledgeError
from hwtune.knowledge import DATA_DIR, _read_entries, clear_cache, load_table


@dataclass(frozen=True, slots=True)
class Fruit:
    key: str
    colour: str
    source: str


def write_table(directory: Path, entries: object) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "fruit.json").write_text(json.dumps({"_doc": "test", "entries": entries}))


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    clear_cache()


def test_shipped_tables_are_valid_json_with_keys_and_sources() -> None:
    tables = sorted(DATA_DIR.glob("*.json"))
    for path in tables:
        for entry in _read_entries(path):
            assert isinstance(entry, dict) and entry.get("key"), f"{path.name}: entry without key"
            assert entry.get("source"), f"{path.name}: {entry['key']} has no source"


def test_user_directory_adds_and_replaces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = tmp_path / "shipped"
    write_table(shipped, [{"key": "apple", "colour": "red", "source": "s"}])
    monkeypatch.setattr("hwtune.knowledge.DATA_DIR", shipped)
    user = tmp_path / "user"
    write_table(
        user,
        [
            {"key": "apple", "colour": "green", "source": "me"},
            {"key": "kiwi", "colour": "brown", "source": "me"},
        ],
    )
    got = load_table("fruit", Fruit, extra_dirs=(user,))
    assert [(f.key, f.colour) for f in got] == [("apple", "green"), ("kiwi", "brown")]


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "line 1: invalid JSON"),
        ('{"entries": {}}', "expected an object with an 'entries' list"),
        ('{"entries": [{"key": "a", "colour": 3, "source": "s"}]}', "entries[0] at 'colour'"),
        ('{"entries": [{"key": "a", "color": "r", "source": "s"}]}', "did you mean 'colour'"),
        # json keeps the last of two equal keys; the first one's value was lost without a word
        (
            '{"entries": [{"key": "a", "colour": "r", "colour": "g", "source": "s"}]}',
            "invalid JSON: key 'colour' given twice in one object",
        ),
    ],
)
def test_bad_user_file_names_file_and_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str, fragment: str
) -> None:
    shipped = tmp_path / "shipped"
    write_table(shipped, [])
    monkeypatch.setattr("hwtune.knowledge.DATA_DIR", shipped)
    user = tmp_path / "user"
    user.mkdir()
    (user / "fruit.json").write_text(content)
    with pytest.raises(KnowledgeError) as err:
        load_table("fruit", Fruit, extra_dirs=(user,))
    assert str(user / "fruit.json") in str(err.value)
    assert fragment in str(err.value)


def test_cpu_tables_validate_and_cite_public_sources() -> None:
    """arm_parts, microarchitectures, compilers: typed loads, parseable ids, public sources."""
    from hwtune.planner.knowledge import CompilerTarget
    from hwtune.probes.arm_parts import ArmPart, parse_key
    from hwtune.probes.microarch import CpuIdentity, MicroarchEntry, compiler_name, identify

    parts = load_table("arm_parts", ArmPart, extra_dirs=())
    assert len({parse_key(part.key) for part in parts}) == len(parts)
    entries = load_table("microarchitectures", MicroarchEntry, extra_dirs=())
    identify(CpuIdentity(arch="x86_64"), entries)  # parents, ids and cycles check out
    compilers = {c.key: c for c in load_table("compilers", CompilerTarget, extra_dirs=())}
    for entry in entries:
        target = compilers.get(entry.key)
        assert target is not None, f"{entry.key}: no compiler target"
        assert target.flag.endswith(f"={compiler_name(entry)}"), entry.key
        assert target.arch == entry.arch, entry.key
    for name in ("arm_parts", "microarchitectures", "compilers"):
        for raw in _read_entries(DATA_DIR / f"{name}.json"):
            # Sources a user can open: never the project's private notes.
            for private in ("tf-build.md", "anchors.md", "[S"):
                assert private not in raw["source"], f"{name}: {raw['key']}: {private}"


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_a_knowledge_dir_that_is_no_directory_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    named = tmp_path / "knowledge"
    if kind == "file":
        named.write_text("")
    monkeypatch.setenv("HWTUNE_KNOWLEDGE_DIR", str(named))
    with pytest.raises(KnowledgeError, match=r"HWTUNE_KNOWLEDGE_DIR=.*knowledge: "):
        load_table("microarchitectures", Fruit)


def test_a_table_that_is_no_regular_file_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory or a dangling link named like a table is refused, not silently skipped."""
    shipped = tmp_path / "shipped"
    write_table(shipped, [])
    monkeypatch.setattr("hwtune.knowledge.DATA_DIR", shipped)
    user = tmp_path / "user"
    (user / "fruit.json").mkdir(parents=True)
    with pytest.raises(KnowledgeError, match=r"fruit.json: cannot read: a directory"):
        load_table("fruit", Fruit, extra_dirs=(user,))
    (user / "fruit.json").rmdir()
    (user / "fruit.json").symlink_to(tmp_path / "gone.json")
    with pytest.raises(KnowledgeError, match=r"a symbolic link to .*gone.json.*does not exist"):
        load_table("fruit", Fruit, extra_dirs=(user,))


@pytest.mark.parametrize(
    ("host", "table", "issue"),
    [
        ("utillinux-x86_64-epyc_7451", "microarchitectures", "microarchitecture unknown: "),
        ("archspec-amazon-graviton2", "arm_parts", "Arm core name unknown: "),
    ],
)
def test_a_bad_user_table_costs_detect_only_what_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str, table: str, issue: str
) -> None:
    """The CPU's counts and flags survive; the issue names the user's file."""
    from hwtune.probes import detect

    root = Path(__file__).parent / "data" / "hosts" / host
    if not root.is_dir():
        pytest.skip(f"tests/data/hosts/{host} is not in this checkout")
    good = detect(root, gpus=False, tensorflow=False)
    (tmp_path / f"{table}.json").write_text('{"entries": [{"key": 1}]}')
    monkeypatch.setenv("HWTUNE_KNOWLEDGE_DIR", str(tmp_path))
    clear_cache()
    bad = detect(root, gpus=False, tensorflow=False)
    said = [i.reason for i in bad.issues if i.reason.startswith(issue)]
    assert said and str(tmp_path / f"{table}.json") in said[0], bad.issues
    assert not any("failed unexpectedly" in i.reason for i in bad.issues), bad.issues
    assert bad.cpu.flags == good.cpu.flags and bad.cpu.logical_cpus == good.cpu.logical_cpus
    assert bad.cpu.vendor == good.cpu.vendor


def test_both_tables_give_a_target_the_same_oldest_compilers() -> None:
    """microarchitectures.json and compilers.json each carry the first GCC and Clang that
    accept a -march name, and a fix reached one table only: graniterapids-d's GCC went to 13.3
    in compilers.json (Ubuntu's gcc 13.3.0 accepts it) while the other kept 14, and pantherlake's
    Clang read 20 there against 18 (LLVM 18's release notes: "-march=pantherlake ... now
    supported")."""
    tables = {
        name: {raw["key"]: raw for raw in _read_entries(DATA_DIR / f"{name}.json")}
        for name in ("microarchitectures", "compilers")
    }
    micro, compilers = tables["microarchitectures"], tables["compilers"]
    differ = [
        f"{key}: gcc {micro[key].get('gcc')} / {compilers[key].get('gcc_min')}, "
        f"clang {micro[key].get('clang')} / {compilers[key].get('clang_min')}"
        for key in sorted(micro.keys() & compilers.keys())
        if (micro[key].get("gcc"), micro[key].get("clang"))
        != (compilers[key].get("gcc_min"), compilers[key].get("clang_min"))
    ]
    assert not differ


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a directory whatever its mode")
def test_a_knowledge_dir_that_cannot_be_read_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its tables looked absent (lexists fails with EACCES) and were skipped in silence."""
    named = tmp_path / "knowledge"
    write_table(named, [])
    named.chmod(0)
    monkeypatch.setenv("HWTUNE_KNOWLEDGE_DIR", str(named))
    try:
        with pytest.raises(KnowledgeError, match=r"HWTUNE_KNOWLEDGE_DIR=.*: cannot be read"):
            load_table("microarchitectures", Fruit)
    finally:
        named.chmod(0o755)
