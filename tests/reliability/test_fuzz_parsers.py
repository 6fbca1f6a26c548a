"""Bad input, fuzzed: every parser ends in a result, a typed documented error, or an issue
that names the file it came from; never another exception.

Each test runs FUZZ_EXAMPLES inputs (a few hundred by default, 10,000 in the long run) mixed
from three kinds (tests/reliability/strategies.py): grammar-built near-valid input, real
captures with edits, and raw text or bytes. Where a parser sits behind a reader (the probes
read files under a root), the input is written to a file and the whole probe runs, so that the
"names the file" half of the contract is checked too.
"""

from __future__ import annotations

import functools
import json
import math
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwtune.errors import ApplyError, ConfigError, KnowledgeError, ModelError
from hwtune.models.cpulist import MAX_CPU, CpuListError, format_cpulist, parse_cpulist
from hwtune.models.hardware import CpuInfo, Gpu, Memory
from hwtune.probes.issues import IssueLog

from . import strategies as fz
from .conftest import Figures, check_issue_paths, fuzz_settings, secondary_settings

T = TypeVar("T")


def attempt(
    figures: Figures,
    action: Callable[[], T],
    errors: tuple[type[BaseException], ...] = (),
    *,
    stage: str | None = None,
) -> T | None:
    """Run `action`; a documented error counts (and must carry a message), anything else fails.

    Without `stage` the error is the input's final outcome ("typed error (X)"); with one it is
    a later stage's ("plan: PlanError"), and the input's outcome is counted by the caller."""
    try:
        value = action()
    except errors as err:
        assert str(err).strip(), f"{type(err).__name__} without a message"
        kind = type(err).__name__
        figures.count(f"{stage}: {kind}" if stage else f"typed error ({kind})")
        return None
    return value


def issues_name_files(
    figures: Figures, issues: IssueLog, *, problems: int = 0, path: str | None = None
) -> None:
    """No probe raised; and each of the parser's `problems` became an issue naming `path`."""
    check_issue_paths(figures, issues)
    if path is not None:
        named = sum(1 for i in issues if i.path == path)
        assert named >= problems, f"{problems} parse problems but {named} issues name {path}"
    figures.count("result with issues" if len(issues) else "result")


def write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data)


# ---------------------------------------------------------------------------- CPU lists


@fuzz_settings
@given(text=fz.fuzz_text(fz.structured_cpulist(), ("0-3,8-11\n", "0,2,4-7:2", "0-63:1/2\n")))
def test_cpulist(text: str, figures: Figures) -> None:
    figures.count("inputs")
    cpus = attempt(figures, lambda: parse_cpulist(text), (CpuListError,))
    if cpus is None:
        return
    assert list(cpus) == sorted(set(cpus)) and all(0 <= c < MAX_CPU for c in cpus)
    assert parse_cpulist(format_cpulist(cpus)) == cpus  # the kernel's own format reads back
    figures.count("result")


# ---------------------------------------------------------------------------- /proc/cpuinfo


@fuzz_settings
@given(data=st.data())
def test_proc_cpuinfo(
    data: st.DataObject, figures: Figures, cpuinfo_seeds: list[str], tmp_path: Path
) -> None:
    from hwtune.probes.cpu import probe_cpu
    from hwtune.probes.cpuinfo import cpuinfo_topology, parse_cpuinfo

    text = data.draw(fz.fuzz_text(fz.structured_cpuinfo(), cpuinfo_seeds), label="cpuinfo")
    figures.count("inputs")
    facts = parse_cpuinfo(text)
    lines = text.count("\n") + 1
    assert all(1 <= p.line <= lines for p in facts.problems), facts.problems
    cpuinfo_topology(facts, IssueLog())
    write(tmp_path / "proc" / "cpuinfo", text)
    issues = IssueLog()
    info = probe_cpu(tmp_path, issues)
    assert isinstance(info, CpuInfo)
    issues_name_files(figures, issues, problems=len(facts.problems), path="proc/cpuinfo")
    figures.note(seeds=len(cpuinfo_seeds))


# ---------------------------------------------------------------------------- lscpu


@fuzz_settings
@given(data=st.data())
def test_lscpu(
    data: st.DataObject, figures: Figures, lscpu_seeds: list[str], tmp_path: Path
) -> None:
    from hwtune.probes.cpu import probe_cpu
    from hwtune.probes.lscpu import lscpu_topology, parse_lscpu

    text = data.draw(
        st.one_of(
            fz.fuzz_text(fz.structured_lscpu(), lscpu_seeds),
            st.recursive(
                st.none() | st.integers() | st.text(max_size=8),
                lambda inner: (
                    st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4)
                ),
                max_leaves=12,
            ).map(lambda v: json.dumps({"lscpu": v})),
        ),
        label="lscpu",
    )
    figures.count("inputs")
    facts = parse_lscpu(text)
    lscpu_topology(facts, IssueLog())
    write(tmp_path / "lscpu.txt", text)
    issues = IssueLog()
    assert isinstance(probe_cpu(tmp_path, issues), CpuInfo)
    issues_name_files(figures, issues, problems=len(facts.problems), path="lscpu.txt")
    figures.note(seeds=len(lscpu_seeds))


# ---------------------------------------------------------------------------- cgroup v1 / v2

_V1_CGROUP = (
    "12:cpu,cpuacct:/job/step\n11:memory:/job/step\n10:cpuset:/job/step\n1:name=systemd:/x\n"
)
_V1_MOUNTS = (
    "30 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
    "31 25 0:28 / /sys/fs/cgroup/memory rw shared:10 - cgroup cgroup rw,memory\n"
    "32 25 0:29 / /sys/fs/cgroup/cpuset rw shared:11 - cgroup cgroup rw,cpuset\n"
)
_V2_CGROUP = "0::/job/step\n"
_V2_MOUNTS = "35 25 0:30 / /sys/fs/cgroup rw shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
_V1_FILES = (
    "cpu.cfs_quota_us",
    "cpu.cfs_period_us",
    "memory.limit_in_bytes",
    "cpuset.cpus",
    "cpuset.effective_cpus",
)
_V2_FILES = ("cpu.max", "memory.max", "cpuset.cpus", "cpuset.cpus.effective")


@fuzz_settings
@given(
    cgroup=fz.fuzz_text(fz.structured_proc_cgroup(), (_V1_CGROUP, _V2_CGROUP)),
    mountinfo=fz.fuzz_text(fz.structured_mountinfo(), (_V1_MOUNTS, _V2_MOUNTS)),
)
def test_proc_cgroup_and_mountinfo(cgroup: str, mountinfo: str, figures: Figures) -> None:
    from hwtune.probes.cgroup_text import parse_mountinfo, parse_proc_cgroup

    figures.count("inputs")
    issues = IssueLog()
    parse_proc_cgroup(cgroup, issues)
    parse_mountinfo(mountinfo, issues)
    for issue in issues:
        assert issue.path in ("proc/self/cgroup", "proc/self/mountinfo") and issue.line, issue
    issues_name_files(figures, issues)


@fuzz_settings
@given(
    version=st.sampled_from((1, 2)),
    contents=st.dictionaries(
        st.tuples(st.sampled_from(("job/step", "job")), st.sampled_from(_V1_FILES + _V2_FILES)),
        st.one_of(fz.cgroup_value(), st.binary(max_size=12)),
        max_size=6,
    ),
    status=fz.fuzz_text(
        st.builds("Name:\tx\nCpus_allowed_list:\t{}\n".format, fz.structured_cpulist()),
        ("Name:\tpython\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\n",),
    ),
)
def test_cgroup_limit_files(
    version: int,
    contents: dict[tuple[str, str], str | bytes],
    status: str,
    figures: Figures,
    tmp_path: Path,
) -> None:
    """Interface files (cpu.max, cfs quota/period, memory limits, cpusets) along the chain."""
    from hwtune.probes.limits import probe_limits

    figures.count("inputs")
    root = tmp_path / f"v{version}"
    write(root / "proc/self/cgroup", _V1_CGROUP if version == 1 else _V2_CGROUP)
    write(root / "proc/self/mountinfo", _V1_MOUNTS if version == 1 else _V2_MOUNTS)
    write(root / "proc/self/status", status)
    controllers = ("cpu,cpuacct", "memory", "cpuset") if version == 1 else ("",)
    written: list[Path] = []
    for (directory, name), value in contents.items():
        for controller in controllers:
            path = root / "sys/fs/cgroup" / controller / directory / name
            write(path, value)
            written.append(path)
    issues = IssueLog()
    try:
        limits = probe_limits(
            root,
            issues,
            CpuInfo(logical_cpus=4, online_cpus=(0, 1, 2, 3)),
            Memory(total_bytes=8 << 30),
            live=False,
        )
    finally:
        for path in written:
            path.unlink()
    assert limits.effective_cpus >= 1
    assert limits.cpu_quota is None or (math.isfinite(limits.cpu_quota) and limits.cpu_quota >= 0)
    assert limits.memory_bytes is None or limits.memory_bytes >= 0
    issues_name_files(figures, issues)


# ---------------------------------------------------------------------------- memory, NUMA


@fuzz_settings
@given(
    meminfo=fz.fuzz_text(
        st.lists(
            st.builds(
                "{}: {} {}".format,
                st.sampled_from(
                    ("MemTotal", "MemAvailable", "Hugepagesize", "HugePages_Total", "X")
                ),
                fz.cgroup_value(),
                st.sampled_from(("kB", "", "MB", "kB kB")),
            )
        ).map("\n".join),
        (
            "MemTotal:       24568708 kB\nMemFree:  1 kB\nMemAvailable:   20000000 kB\n"
            "HugePages_Total:       0\nHugepagesize:       2048 kB\n",
        ),
    ),
    thp=fz.fuzz_text(
        st.sampled_from(("always [madvise] never", "[always] madvise never", "")),
        ("always [madvise] never\n",),
    ),
    node_files=st.dictionaries(
        st.tuples(
            st.sampled_from(("node0", "node1", "node7", "nodeX")),
            st.sampled_from(("cpulist", "meminfo", "distance")),
        ),
        st.one_of(
            fz.structured_cpulist(),
            fz.cgroup_value(),
            st.builds("Node 0 MemTotal:  {} kB".format, fz.cgroup_value()),
        ),
        max_size=6,
    ),
)
def test_meminfo_thp_numa(
    meminfo: str,
    thp: str,
    node_files: dict[tuple[str, str], str],
    figures: Figures,
    tmp_path: Path,
) -> None:
    from hwtune.probes.memory import probe_memory
    from hwtune.probes.numa import probe_numa

    figures.count("inputs")
    root = tmp_path / "m"
    write(root / "proc/meminfo", meminfo)
    write(root / "sys/kernel/mm/transparent_hugepage/enabled", thp)
    paths = []
    for (node, name), value in node_files.items():
        paths.append(root / "sys/devices/system/node" / node / name)
        write(paths[-1], value)
    issues = IssueLog()
    try:
        memory = probe_memory(root, issues)
        probe_numa(root, issues, CpuInfo(logical_cpus=2, online_cpus=(0, 1), sockets=1))
    finally:
        for path in paths:
            path.unlink()
    assert memory.total_bytes is None or memory.total_bytes >= 0
    issues_name_files(figures, issues)


# ---------------------------------------------------------------------------- nvidia-smi


@fuzz_settings
@given(data=st.data())
def test_nvidia_smi_xml(data: st.DataObject, figures: Figures, smi_xml_seeds: list[bytes]) -> None:
    from hwtune.probes.nvidia_smi import MAX_GPUS, parse_smi_xml

    blob = data.draw(
        st.one_of(
            fz.structured_smi_xml(), fz.mutated_bytes(smi_xml_seeds), st.binary(max_size=300)
        ),
        label="xml",
    )
    figures.count("inputs")
    issues = IssueLog()
    log = parse_smi_xml(blob, "nvidia-smi-q.xml", issues)
    assert len(log.gpus) <= MAX_GPUS
    for issue in issues:
        assert issue.path == "nvidia-smi-q.xml", issue
    figures.count("result with issues" if len(issues) else "result")
    figures.note(seeds=len(smi_xml_seeds))


def _laughs(levels: int = 9) -> str:
    entities = ['<!ENTITY lol "lol">'] + [
        f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">'
        for i in range(1, levels + 1)
    ]
    return f"<!DOCTYPE nvidia_smi_log [{''.join(entities)}]>"


ENTITY_ATTACKS = {
    # 10^9 "lol"s (3 GB) from 1 KB, if entities expanded
    "billion laughs": _laughs() + "<nvidia_smi_log><gpu><product_name>&lol9;</product_name>"
    "</gpu></nvidia_smi_log>",
    # one 50 KB entity referenced 50,000 times: 2.5 GB, no nesting for a limit to catch
    "quadratic blowup": '<!DOCTYPE nvidia_smi_log [<!ENTITY a "' + "A" * 50_000 + '">]>'
    "<nvidia_smi_log><gpu><product_name>" + "&a;" * 50_000 + "</product_name></gpu>"
    "</nvidia_smi_log>",
    "external entity (XXE)": '<!DOCTYPE nvidia_smi_log [<!ENTITY xxe SYSTEM "file://{secret}">]>'
    "<nvidia_smi_log><gpu><product_name>&xxe;</product_name></gpu></nvidia_smi_log>",
    "parameter entity": '<!DOCTYPE nvidia_smi_log [<!ENTITY % p SYSTEM "file://{secret}"> %p;]>'
    "<nvidia_smi_log/>",
    "external DTD defining an entity": '<!DOCTYPE nvidia_smi_log SYSTEM "file://{dtd}">'
    "<nvidia_smi_log><gpu><product_name>&secret;</product_name></gpu></nvidia_smi_log>",
    "entity in an attribute": '<!DOCTYPE nvidia_smi_log [<!ENTITY xxe SYSTEM "file://{secret}">]>'
    '<nvidia_smi_log><gpu id="&xxe;"><product_name>x</product_name></gpu></nvidia_smi_log>',
    "unparsed entity": '<!DOCTYPE nvidia_smi_log [<!NOTATION n SYSTEM "x">'
    '<!ENTITY u SYSTEM "file://{secret}" NDATA n>]><nvidia_smi_log/>',
}


@pytest.mark.parametrize("attack", sorted(ENTITY_ATTACKS))
def test_xml_entity_attacks(attack: str, tmp_path: Path, figures: Figures) -> None:
    """XML is safe against entity expansion: refused before anything expands or is fetched.
    No timing is asserted; an expansion would show as the secret or the laughs in the result,
    or as gigabytes of memory."""
    from hwtune.probes.nvidia_smi import parse_smi_xml

    secret = tmp_path / "secret"
    secret.write_text("SECRET-CONTENTS")
    dtd = tmp_path / "evil.dtd"
    dtd.write_text('<!ENTITY secret "SECRET-CONTENTS">')
    document = ENTITY_ATTACKS[attack].format(secret=secret, dtd=dtd)
    issues = IssueLog()
    log = parse_smi_xml(
        ('<?xml version="1.0"?>\n' + document).encode(), "nvidia-smi-q.xml", issues
    )
    everything = repr(log) + repr(list(issues))
    assert "SECRET-CONTENTS" not in everything and "lollol" not in everything
    assert all(issue.path == "nvidia-smi-q.xml" for issue in issues)
    if attack != "external DTD defining an entity":  # no declaration to refuse: just unused
        assert any("refused" in issue.reason for issue in issues), list(issues)
        figures.count("refused, nothing expanded")
    else:
        figures.count("external DTD not fetched")
    figures.count("inputs")


@fuzz_settings
@given(data=st.data())
def test_nvidia_smi_topo(data: st.DataObject, figures: Figures, topo_seeds: list[str]) -> None:
    from hwtune.probes.nvidia_topo import merge_topo, parse_topo

    text = data.draw(fz.fuzz_text(fz.structured_topo(), topo_seeds), label="topo")
    figures.count("inputs")
    issues = IssueLog()
    topo = parse_topo(text, "nvidia-smi-topo.txt", issues)
    gpus = tuple(Gpu(index=i, name=f"GPU {i}") for i in range(8))
    merge_topo(gpus, topo, issues)
    for issue in issues:
        assert issue.path == "nvidia-smi-topo.txt", issue
    figures.count("result with issues" if len(issues) else "result")


# ---------------------------------------------------------------------------- config and overrides


@fuzz_settings
@given(
    text=fz.fuzz_text(
        fz.structured_toml(),
        (
            'mode = "latency"\ninstances = 2\n[threads]\nintra_op = 8\ninter_op = 1\n'
            '[env]\nTF_CPP_MIN_LOG_LEVEL = "2"\n',
            'precision = "auto"\ntf_version = "2.19"\njit = "off"\n'
            'data_format = "channels_last"\n',
        ),
    )
)
def test_toml_config(text: str, figures: Figures, planned_hardware: Any) -> None:
    """A config file: Overrides or ConfigError naming the file; then it plans and renders."""
    from hwtune.apply.render import render_all
    from hwtune.errors import PlanError
    from hwtune.pipeline.config import parse_config_text
    from hwtune.planner import plan

    figures.count("inputs")
    try:
        overrides = parse_config_text(text, "/etc/hwtune/config.toml")
    except ConfigError as err:
        assert "/etc/hwtune/config.toml" in err.message, err.message
        figures.count("typed error (ConfigError)")
        return
    figures.count("result")
    profile = attempt(
        figures,
        lambda: plan(planned_hardware, overrides=overrides),
        (PlanError,),
        stage="plan refused",
    )
    if profile is None:
        return
    if (
        attempt(
            figures,
            lambda: render_all(profile, planned_hardware),
            (ApplyError,),
            stage="render refused",
        )
        is not None
    ):
        figures.count("planned and rendered")


@fuzz_settings
@given(
    sets=st.lists(
        st.one_of(st.builds("{}={}".format, fz.env_name(), fz.env_value()), fz.env_value()),
        max_size=4,
    ),
    environ=st.dictionaries(
        st.one_of(
            st.sampled_from(
                (
                    "HWTUNE_MODE",
                    "HWTUNE_INSTANCES",
                    "HWTUNE_INTRA_OP",
                    "HWTUNE_PRECISION",
                    "HWTUNE_TF_VERSION",
                    "HWTUNE_JIT",
                    "HWTUNE_MDOE",
                    "HWTUNE_INSTANCE",
                    "HWTUNE_DATA_FORMAT",
                )
            ),
            fz.env_name(),
        ),
        st.one_of(
            st.sampled_from(("latency", "2", " 3 ", "0", "-1", "auto", "on", "2.19")),
            fz.env_value(),
        ),
        max_size=4,
    ),
    flags=st.fixed_dictionaries(
        {},
        optional={
            "mode": st.sampled_from(("latency", "throughput", "bogus")),
            "instances": st.integers(-2, 5),
            "precision": st.sampled_from(("off", "x")),
        },
    ),
)
def test_override_values(
    sets: list[str], environ: dict[str, str], flags: dict[str, Any], figures: Figures
) -> None:
    """--set NAME=VALUE, HWTUNE_* and flags: Overrides or ConfigError; then every env format
    either holds each value exactly or refuses it with ApplyError."""
    from hwtune.apply.marker import MARKER
    from hwtune.apply.render import ENV_FORMATS, EnvEntry, render_env_entries
    from hwtune.pipeline.config import overrides_from_environ, parse_sets, with_flags

    figures.count("inputs")

    def merged() -> Any:
        return with_flags(overrides_from_environ(environ).merged(parse_sets(sets)), **flags)

    overrides = attempt(figures, merged, (ConfigError,))
    if overrides is None:
        return
    figures.count("result")
    entries = [EnvEntry(name, overrides.env[name]) for name in sorted(overrides.env)]
    for fmt in ENV_FORMATS:
        text = attempt(
            figures,
            functools.partial(render_env_entries, entries, fmt),
            (ApplyError,),
            stage=f"{fmt} refused",
        )
        if text is None:
            continue
        if fmt == "json":
            assert json.loads(text) == overrides.env
        elif fmt == "sh":  # POSIX single quotes, read back by a POSIX-mode lexer
            words = shlex.split(text, comments=True)
            got = dict(w.split("=", 1) for w in words if w != "export")
            got.pop(MARKER, None)  # hwtune's own mark of what it wrote (apply/marker.py)
            assert got == overrides.env
        elif fmt == "dotenv":  # docker reads lines split at "\n" only (bufio.ScanLines)
            got = dict(
                line.split("=", 1)
                for line in text.split("\n")
                if line and not line.startswith("#")
            )
            got.pop(MARKER, None)
            assert got == overrides.env
        figures.count(f"round-trip ({fmt})")


# ---------------------------------------------------------------------------- data files


def _mutate_json(draw: st.DrawFn, value: Any, depth: int = 0) -> Any:
    """Replace, drop or add one thing somewhere in a JSON document."""
    scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6)
    junk = st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
        ),
        max_leaves=6,
    )
    if depth > 6 or draw(st.integers(0, 4)) == 0:
        return draw(junk)
    if isinstance(value, dict) and value:
        key = draw(st.sampled_from(sorted(value)))
        action = draw(st.sampled_from(("descend", "descend", "drop", "add")))
        copy = dict(value)
        if action == "drop":
            del copy[key]
        elif action == "add":
            copy[draw(st.text(max_size=8))] = draw(junk)
        else:
            copy[key] = _mutate_json(draw, value[key], depth + 1)
        return copy
    if isinstance(value, list) and value:
        i = draw(st.integers(0, len(value) - 1))
        return [*value[:i], _mutate_json(draw, value[i], depth + 1), *value[i + 1 :]]
    return draw(junk)


@st.composite
def mutated_json(draw: st.DrawFn, document: Any) -> Any:
    return _mutate_json(draw, document)


@secondary_settings
@given(data=st.data())
def test_hardware_and_profile_json(
    data: st.DataObject, figures: Figures, planned_hardware: Any
) -> None:
    """hardware.json / profile.json as `plan --hardware FILE` and the daemon read them back."""
    from hwtune.models.convert import dump, load
    from hwtune.models.hardware import Hardware
    from hwtune.models.profile import Profile
    from hwtune.planner import plan

    cls, document = data.draw(
        st.sampled_from(
            ((Hardware, dump(planned_hardware)), (Profile, dump(plan(planned_hardware))))
        )
    )
    mutated = data.draw(mutated_json(document), label="json")
    figures.count("inputs")
    where = f"{cls.__name__.lower()}.json"
    try:
        load(cls, mutated, where=where)
    except ModelError as err:
        assert where in err.message, err.message
        figures.count("typed error (ModelError)")
        return
    figures.count("result")


@secondary_settings
@given(data=st.data())
def test_knowledge_table(data: st.DataObject, figures: Figures, tmp_path: Path) -> None:
    """A user knowledge file ($HWTUNE_KNOWLEDGE_DIR/<table>.json): entries or KnowledgeError."""
    from hwtune.knowledge import DATA_DIR, clear_cache, load_table
    from hwtune.probes.gpu import GpuEntry
    from hwtune.probes.microarch import MicroarchEntry

    table, cls = data.draw(
        st.sampled_from((("microarchitectures", MicroarchEntry), ("gpus", GpuEntry)))
    )
    shipped = DATA_DIR / f"{table}.json"
    if not shipped.is_file():
        pytest.skip(f"{shipped.name} is not shipped yet")
    document = json.loads(shipped.read_text())
    raw = data.draw(
        st.one_of(
            mutated_json({"_doc": "x", "entries": document["entries"][:3]}).map(json.dumps),
            fz.mutated([json.dumps({"entries": document["entries"][:2]}, indent=1)]),
        ),
        label="knowledge",
    )
    figures.count("inputs")
    user = tmp_path / "knowledge"
    write(user / f"{table}.json", raw)
    clear_cache()
    try:
        load_table(table, cls, extra_dirs=(user,))
    except KnowledgeError as err:
        assert f"{table}.json" in err.message, err.message
        figures.count("typed error (KnowledgeError)")
        return
    finally:
        clear_cache()
    figures.count("result")


@secondary_settings
@given(data=st.data())
def test_tensorflow_install_files(data: st.DataObject, figures: Figures, tmp_path: Path) -> None:
    """METADATA, WHEEL, build_info.py and shared objects of an installed TensorFlow."""
    from hwtune.probes.tf_install import read_install

    site = tmp_path / "site"
    meta = site / "tensorflow_cpu-2.21.0.dist-info"
    package = site / "tensorflow"
    metadata = data.draw(
        fz.fuzz_text(
            st.just(""),
            (
                "Metadata-Version: 2.1\nName: tensorflow-cpu\nVersion: 2.21.0\n"
                "Summary: x\n\nbody\n",
            ),
        )
    )
    wheel = data.draw(
        fz.fuzz_text(
            st.just(""),
            (
                "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n"
                "Tag: cp311-cp311-manylinux_2_17_x86_64\n",
            ),
        )
    )
    build_info = data.draw(
        fz.fuzz_text(
            st.just(""),
            (
                "build_info = {'cpu_compiler': '/usr/bin/gcc', 'is_cuda_build': False, "
                "'is_rocm_build': False, 'is_tensorrt_build': False}\n",
                "import collections\n"
                "build_info = collections.OrderedDict([('is_cuda_build', True), "
                "('cuda_version', '12.3'), ('cudnn_version', '8')])\n",
            ),
        )
    )
    elf = data.draw(st.one_of(fz.mutated_bytes([_SMALL_ELF]), st.binary(max_size=80)))
    figures.count("inputs")
    write(meta / "METADATA", metadata)
    write(meta / "WHEEL", wheel)
    write(package / "__init__.py", "")
    write(package / "python/platform/build_info.py", build_info)
    write(package / "libtensorflow_framework.so.2", elf)
    install = read_install([str(site)], frozenset({"tensorflow", "tensorflow-cpu"}))
    assert install is not None
    for problem in install.problems:
        assert problem.path, problem
    figures.count("result with issues" if install.problems else "result")


def _small_elf() -> bytes:
    """A real shared object of this Python (a C extension module), the ELF parser's seed."""
    import importlib

    for name in ("_json", "_bisect", "_random", "math", "select", "_struct"):
        file = getattr(importlib.import_module(name), "__file__", None)
        if file and file.endswith(".so"):
            return Path(file).read_bytes()
    return b"\x7fELF" + bytes(60)


_SMALL_ELF = _small_elf()


@secondary_settings
@given(data=st.data())
def test_journal_manifest_and_cache(data: st.DataObject, figures: Figures, tmp_path: Path) -> None:
    """The files hwtune itself writes and reads back: journal manifests and the profile cache."""
    from hwtune.apply import cache, journal

    manifest = {
        "id": "1-1",
        "created": "x",
        "hwtune": "0",
        "complete": False,
        "files": [
            {"name": "hwtune.env", "existed": True, "new_sha256": "0" * 64, "backup": "link"}
        ],
    }
    text = data.draw(
        st.one_of(
            mutated_json(manifest).map(json.dumps),
            fz.mutated([json.dumps(manifest)]),
            st.text(max_size=50),
        )
    )
    figures.count("inputs")
    write(tmp_path / ".journal/1-1/manifest.json", text)
    entry = attempt(figures, lambda: journal.load(tmp_path, "1-1"), (ApplyError,))
    write(tmp_path / "cache.json", text)
    loaded = cache.load(str(tmp_path / "cache.json"), {"a": 1})
    assert loaded is None or isinstance(loaded, dict)
    figures.count("cache: " + ("used" if loaded is not None else "ignored, planned afresh"))
    if entry is not None:
        figures.count("result")


@secondary_settings
@given(
    environ=st.dictionaries(
        st.sampled_from(
            (
                "SLURM_LOCALID",
                "SLURM_NTASKS_PER_NODE",
                "SLURM_TASKS_PER_NODE",
                "SLURM_NODEID",
                "SLURM_STEP_ID",
                "LOCAL_RANK",
                "LOCAL_WORLD_SIZE",
                "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE",
                "MPI_LOCALRANKID",
                "MPI_LOCALNRANKS",
                "PMI_LOCAL_RANK",
                "PMI_LOCAL_SIZE",
            )
        ),
        st.one_of(
            st.sampled_from(("0", "1", "4", "2(x3),1", "2(x", "(x2)", "9999999", "", " 1 ")),
            fz.env_value(),
        ),
        max_size=5,
    )
)
def test_launcher_rank_variables(environ: dict[str, str], figures: Figures) -> None:
    from hwtune.pipeline.ranks import local_rank

    figures.count("inputs")
    try:
        rank = local_rank(environ)
    except ConfigError as err:
        assert err.message
        figures.count("typed error (ConfigError)")
        return
    if rank is not None:
        assert 0 <= rank.rank < rank.size
    figures.count("result")


@secondary_settings
@given(text=st.text(max_size=200), blob=st.binary(max_size=200))
def test_proc_readers_of_verify_and_tune(text: str, blob: bytes, figures: Figures) -> None:
    """`hwtune verify` reads /proc/PID/numa_maps (psutil reads the rest); the tuner reads metric
    lines."""
    from hwtune.apply.verify import parse_numa_policy
    from hwtune.tune.capture import parse_metrics

    figures.count("inputs")
    parse_numa_policy(text + blob.decode("utf-8", "replace"))
    parse_metrics(text + "\nhwtune-metric: x=" + text[:10])
    figures.count("result")


@pytest.fixture(scope="module")
def planned_hardware(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """This machine's Hardware as detected from its snapshot (a fixed, real input to plan)."""
    from hwtune.probes import detect
    from hwtune.probes.snapshot import take_snapshot

    dest = tmp_path_factory.mktemp("fuzz-machine") / "root"
    take_snapshot(dest, gpus=False, tensorflow=False)
    return detect(dest, tensorflow=False)


# ---------------------------------------------------------------------------- tuned results

_TUNED_KEYS = (
    "threads.intra_op",
    "threads.inter_op",
    "env.TF_ENABLE_ONEDNN_OPTS",
    "jit.level",
    "precision.enabled",
    "instances",
    "jit",
    "precision",
    "data_format",
    "env.TF_NUM_INTRAOP_THREADS",
    "env.KMP_BLOCKTIME",
    "env.LD_PRELOAD",
    "env.A=B",
    "tf_data.prefetch",
    "env.",
)


def _tuned_value() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(
            (
                "off",
                "on",
                "autoclustering",
                "mixed_float16",
                "mixed_bfloat16",
                "float32",
                "channels_first",
                "0",
                "1",
                "42",
                None,
                True,
                0,
                1,
                2,
                -1,
                2**16,
                2**16 + 1,
                10**400,
                1.5,
                float("nan"),
                float("inf"),
            )
        ),
        st.integers(-(2**70), 2**70),
        fz.env_value(),
        fz.unicode_number(),
        st.lists(st.integers(), max_size=3),
        st.dictionaries(st.text(max_size=4), st.none(), max_size=2),
    )


def _tuned_record(fingerprint: str) -> dict[str, Any]:
    """What hwtune/tune/tuner.py stores (abridged), for this machine's plan."""
    return {
        "schema": 1,
        "fingerprint": fingerprint,
        "workload": "builtin:cnn",
        "mode": "throughput",
        "model": "conv",
        "ratio": 1.31,
        "ratio_interval": [1.2, 1.4],
        "settings": {
            "threads.intra_op": 2,
            "threads.inter_op": 1,
            "env.TF_ENABLE_ONEDNN_OPTS": "1",
            "jit.level": "off",
            "precision.enabled": None,
            "instances": 1,
        },
        "trials": 12,
        "hwtune": "0.1.0",
    }


@fuzz_settings
@given(data=st.data())
def test_tuned_result_file(
    data: st.DataObject, figures: Figures, planned_hardware: Any, tmp_path: Path
) -> None:
    """A tuned result (hwtune/pipeline/measured.py) as `plan`, `apply`, `exec` and configure() load
    it: measured settings that plan and render, or TuneError naming the file (which they turn
    into a warning and plan with the rules); never another exception."""
    from hwtune.apply.render import render_all
    from hwtune.errors import TuneError
    from hwtune.pipeline.measured import measured_settings, read_result
    from hwtune.pipeline.request import PlanRequest, profile_for
    from hwtune.planner import plan

    fingerprint = plan(planned_hardware).fingerprint
    record = _tuned_record(fingerprint)
    settings = st.dictionaries(
        st.one_of(st.sampled_from(_TUNED_KEYS), st.text(max_size=12)), _tuned_value(), max_size=6
    )
    raw = data.draw(
        st.one_of(
            st.builds(lambda s: json.dumps({**record, "settings": s}), settings),
            mutated_json(record).map(json.dumps),
            fz.mutated([json.dumps(record, indent=2)]),
            st.sampled_from(
                (
                    json.dumps({**record, "ratio": 10**400}),
                    json.dumps({**record, "ratio": -1}),
                    json.dumps(record).replace("1.31", "9" * 5000),
                    "[" * 100_000,
                    json.dumps({**record, "schema": True}),
                    json.dumps(record)[:40],
                )
            ),
            st.binary(max_size=300),
            st.binary(max_size=40).map(lambda b: json.dumps(record).encode() + b),
        ),
        label="tuned result",
    )
    figures.count("inputs")
    path = tmp_path / "tuned" / fingerprint / "builtin_cnn.json"
    write(path, raw)
    environ = {"HWTUNE_TUNED_DIR": str(tmp_path / "tuned"), "XDG_CONFIG_HOME": str(tmp_path)}
    try:
        measured = measured_settings(read_result(path))
    except TuneError as err:
        assert str(path) in err.message, err.message
        figures.count("typed error (TuneError)")
    else:
        figures.count("result" if measured else "result (nothing for this machine and mode)")
    # As `plan`, `apply`, `exec` and configure() use it: the rule profile when the result
    # cannot be used (a TuneError, or a PlanError such as more instances than cores).
    rules = plan(planned_hardware)
    request = PlanRequest(environ, hardware=planned_hardware, workload="builtin:cnn")
    planned = profile_for(request)
    profile = planned.profile
    ignored = "; ".join(n for n in planned.notes if n.startswith("tuned results ignored"))
    if ignored:
        assert str(path) in ignored and profile == rules, ignored
        figures.count("planned with the rules, a warning naming the file")
    else:
        figures.count("planned with the measured settings" if measured else "planned")
    render_all(profile, planned_hardware)
    figures.count("planned and rendered")
