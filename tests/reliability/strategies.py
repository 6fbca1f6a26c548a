"""Hypothesis strategies for the parser fuzzers: near-valid input, mutated captures, raw noise.

Three kinds of input per parser, mixed by `fuzz_text` / `fuzz_bytes`:
- *structured*: built from the format's own grammar and vocabulary (keys nvidia-smi prints, the
  CPU-list grammar, cgroup line shapes), so most examples get deep into the parser;
- *mutated*: a real capture (tests/data, ../shared) with a few edits: a slice deleted,
  duplicated or truncated, lines swapped, hostile tokens inserted (huge numbers, NUL, U+FFFD,
  lone separators);
- *raw*: arbitrary text or bytes.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

from hypothesis import strategies as st

# Tokens that break naive parsers: numbers beyond any machine word or float, signs, separators
# without operands, encodings that are not text, and the spellings tools use for "nothing".
HOSTILE_TOKENS = (
    "",
    "0",
    "-1",
    "-0",
    "+1",
    "1e309",
    "nan",
    "inf",
    "0x1f",
    "0b1",
    "١٢",
    "٣",  # Arabic digits
    "9" * 30,
    "1" + "0" * 400,
    "9" * 5000,
    "-" + "9" * 40,
    "4294967296",
    "18446744073709551616",
    "max",
    "N/A",
    "[N/A]",
    "[Not Supported]",
    "Unknown Error",
    "-",
    ",",
    ":",
    "::",
    "/",
    "//",
    "0-",
    "-0",
    "3-1",
    "0-65536",
    "0-4294967295",
    "0-3:0/4",
    "0-3:5/4",
    "0-3:1/0",
    "1:2:3",
    "\x00",
    "\ufffd",
    "\t",
    "\r",
    "\r\n",
    "\n\n",
    " ",
    "\\",
    "\\040",
    "'",
    '"',
    "$(touch x)",
    "`id`",
    "<",
    ">",
    "&",
    "&amp;",
    "&lt;",
    "]]>",
    "<!--",
    "<![CDATA[x]]>",
    "\u202e",
    "\u00a0",
    "\U0001f600",
    "Ā" * 3,
    "²",
    "①",
    "1²",
    "０",
)

# Characters str.isdigit() accepts: superscripts and circled digits, which int() refuses with a
# bare ValueError, and other scripts' decimal digits (Arabic-Indic, Devanagari, fullwidth),
# which int() reads although no kernel file or tool writes them (hwtune/models/digits.py).
UNICODE_DIGITS = "²³¹⁰⁹①⑨٣٠۴९０９"


def _splice(number: int, digit: str, at: int) -> str:
    text = str(number)
    at %= len(text) + 1
    return text[:at] + digit + text[at:]


def unicode_number() -> st.SearchStrategy[str]:
    """A number with Unicode digits: only those ("٣٣"), or one among ASCII ones ("12²4")."""
    digit = st.sampled_from(UNICODE_DIGITS)
    return st.one_of(
        st.text(digit, min_size=1, max_size=3),
        st.builds(_splice, st.integers(0, 10**6), digit, st.integers(0, 8)),
    )


def number(values: st.SearchStrategy[int]) -> st.SearchStrategy[str]:
    """What a parser finds where a number belongs: mostly `values`, sometimes Unicode digits."""
    return st.one_of(values.map(str), values.map(str), unicode_number())


def _payload() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(HOSTILE_TOKENS),
        st.integers(-(2**70), 2**70).map(str),
        unicode_number(),
        st.text(max_size=12),
        st.text(string.digits + ",-:/ ", max_size=12),
    )


_MUTATIONS = ("delete", "insert", "replace", "duplicate", "truncate", "swap-lines", "drop-line")


@st.composite
def mutated(draw: st.DrawFn, seeds: Sequence[str], max_edits: int = 6) -> str:
    """A seed with up to `max_edits` edits at random places."""
    text = draw(st.sampled_from(list(seeds)))
    for _ in range(draw(st.integers(0, max_edits))):
        kind = draw(st.sampled_from(_MUTATIONS))
        size = len(text)
        start = draw(st.integers(0, size))
        end = draw(st.integers(start, min(size, start + 400)))
        if kind == "delete":
            text = text[:start] + text[end:]
        elif kind == "insert":
            text = text[:start] + draw(_payload()) + text[start:]
        elif kind == "replace":
            text = text[:start] + draw(_payload()) + text[end:]
        elif kind == "duplicate":
            text = text[:end] + text[start:end] + text[end:]
        elif kind == "truncate":
            text = text[:start]
        else:
            lines = text.split("\n")
            if len(lines) < 2:
                continue
            i = draw(st.integers(0, len(lines) - 1))
            j = draw(st.integers(0, len(lines) - 1))
            if kind == "swap-lines":
                lines[i], lines[j] = lines[j], lines[i]
            else:
                del lines[i]
            text = "\n".join(lines)
    return text


def fuzz_text(
    structured: st.SearchStrategy[str], seeds: Sequence[str] = ()
) -> st.SearchStrategy[str]:
    """Structured, mutated-capture and raw text, in that order of preference when shrinking."""
    parts = [structured]
    if seeds:
        parts.append(mutated(seeds))
    parts.append(st.text(max_size=300))
    return st.one_of(parts)


@st.composite
def mutated_bytes(draw: st.DrawFn, seeds: Sequence[bytes], max_edits: int = 6) -> bytes:
    data = bytearray(draw(st.sampled_from(list(seeds))))
    for _ in range(draw(st.integers(0, max_edits))):
        kind = draw(st.sampled_from(("flip", "delete", "insert", "truncate", "duplicate")))
        start = draw(st.integers(0, len(data)))
        end = draw(st.integers(start, min(len(data), start + 200)))
        if kind == "flip" and start < len(data):
            data[start] ^= draw(st.integers(1, 255))
        elif kind == "delete":
            del data[start:end]
        elif kind == "insert":
            data[start:start] = draw(st.binary(max_size=16))
        elif kind == "truncate":
            del data[start:]
        elif kind == "duplicate":
            data[end:end] = data[start:end]
    return bytes(data)


# ---------------------------------------------------------------------------- CPU lists


def _cpu_number() -> st.SearchStrategy[int]:
    return st.one_of(st.integers(0, 64), st.integers(0, 70_000))


@st.composite
def cpulist_item(draw: st.DrawFn) -> str:
    first = draw(_cpu_number())
    kind = draw(st.sampled_from(("single", "range", "group")))
    if kind == "single":
        return str(first)
    last = first + draw(st.integers(-2, 300))
    item = f"{first}-{last}"
    if kind == "group":
        item += f":{draw(st.integers(0, 9))}"
        if draw(st.booleans()):
            item += f"/{draw(st.integers(0, 9))}"
    return item


@st.composite
def structured_cpulist(draw: st.DrawFn) -> str:
    items = draw(st.lists(cpulist_item(), max_size=8))
    space = draw(st.sampled_from(("", " ", "\t")))
    return (space + "," + space).join(items) + draw(st.sampled_from(("", "\n", " \n", ",")))


# ---------------------------------------------------------------------------- /proc/cpuinfo

CPUINFO_KEYS = (
    "processor",
    "vendor_id",
    "cpu family",
    "model",
    "model name",
    "stepping",
    "microcode",
    "cpu MHz",
    "cache size",
    "physical id",
    "siblings",
    "core id",
    "cpu cores",
    "apicid",
    "flags",
    "bugs",
    "bogomips",
    "Features",
    "CPU implementer",
    "CPU architecture",
    "CPU variant",
    "CPU part",
    "CPU revision",
    "cpu",
    "clock",
    "revision",
    "timebase",
    "platform",
    "machine",
    "MMU",
    "Hardware",
    "isa",
    "uarch",
)
_FLAGS = (
    "fpu",
    "sse2",
    "avx",
    "avx2",
    "avx512f",
    "avx512_bf16",
    "amx_tile",
    "fma",
    "hypervisor",
    "asimd",
    "sve",
    "altivec",
    "vsx",
    "lm",
    "ht",
)


def _cpuinfo_value(key: str) -> st.SearchStrategy[str]:
    if key in ("flags", "Features"):
        return st.lists(st.sampled_from(_FLAGS), max_size=10).map(" ".join)
    if key in ("CPU implementer", "CPU part", "CPU variant"):
        return st.one_of(st.integers(0, 0xFFFF).map(hex), unicode_number(), _payload())
    if key == "vendor_id":
        return st.sampled_from(("GenuineIntel", "AuthenticAMD", "HygonGenuine", "", "Bogus"))
    if key == "revision":
        return st.sampled_from(("2.2 (pvr 004e 1202)", "pvr zzzz", "2.0 (pvr 0080 0100)", ""))
    return st.one_of(number(st.integers(-5, 300)), _payload())


@st.composite
def structured_cpuinfo(draw: st.DrawFn) -> str:
    blocks = []
    for number in range(draw(st.integers(0, 6))):
        lines = [f"processor\t: {draw(st.sampled_from((str(number), str(number * 7), 'x', '')))}"]
        for key in draw(st.lists(st.sampled_from(CPUINFO_KEYS), max_size=12)):
            gap = draw(st.sampled_from(("\t", " ", "")))
            lines.append(f"{key}{gap}: {draw(_cpuinfo_value(key))}")
        blocks.append("\n".join(lines))
    trailer = draw(st.lists(st.sampled_from(CPUINFO_KEYS), max_size=4))
    blocks.append("\n".join(f"{k}\t: {draw(_cpuinfo_value(k))}" for k in trailer))
    return "\n\n".join(blocks) + "\n"


# ---------------------------------------------------------------------------- lscpu

LSCPU_KEYS = (
    "Architecture",
    "CPU op-mode(s)",
    "Byte Order",
    "CPU(s)",
    "On-line CPU(s) list",
    "Off-line CPU(s) list",
    "Vendor ID",
    "Model name",
    "CPU family",
    "Model",
    "Thread(s) per core",
    "Core(s) per socket",
    "Core(s) per cluster",
    "Socket(s)",
    "Stepping",
    "CPU max MHz",
    "CPU min MHz",
    "BogoMIPS",
    "Flags",
    "Virtualization",
    "Hypervisor vendor",
    "L1d cache",
    "L1i cache",
    "L2 cache",
    "L3 cache",
    "NUMA node(s)",
    "NUMA node0 CPU(s)",
    "NUMA node1 CPU(s)",
    "NUMA node70000 CPU(s)",
    "NUMA node٣ CPU(s)",
    "NUMA node² CPU(s)",
)


def _lscpu_value(key: str) -> st.SearchStrategy[str]:
    if key.endswith("cache"):
        return st.one_of(
            st.builds(
                lambda n, u, i: f"{n} {u} ({i} instances)",
                number(st.integers(0, 10**6)),
                st.sampled_from(("KiB", "MiB", "GiB", "K", "B", "TiB")),
                number(st.integers(0, 10**6)),
            ),
            _payload(),
        )
    if "list" in key or (key.endswith("CPU(s)") and "NUMA" in key):
        return st.one_of(structured_cpulist(), _payload())
    if key == "Flags":
        return st.lists(st.sampled_from(_FLAGS), max_size=10).map(" ".join)
    return st.one_of(number(st.integers(-3, 5000)), _payload())


@st.composite
def structured_lscpu(draw: st.DrawFn) -> str:
    lines = []
    for key in draw(st.lists(st.sampled_from(LSCPU_KEYS), max_size=16)):
        indent = draw(st.sampled_from(("", "", "  ", "    ")))
        lines.append(f"{indent}{key}:{' ' * draw(st.integers(0, 20))}{draw(_lscpu_value(key))}")
    if draw(st.booleans()):
        columns = draw(
            st.sampled_from(
                (
                    "CPU,Core,Socket,Node,,L1d,L1i,L2,L3",
                    "CPU,Core,Socket,Node",
                    "CPU,MAXMHZ",
                    "CPU,Node",
                    "Core,CPU",
                    "CPU,Core,Socket,Node,,L1d,L1i,L2,L3,MAXMHZ,ONLINE",
                )
            )
        )
        lines.append("# The following is the parsable format, which can be fed to other")
        lines.append(f"# {columns}")
        width = columns.count(",") + 1
        cell = st.one_of(number(st.integers(0, 70)), st.just(""), _payload())
        for _ in range(draw(st.integers(0, 8))):
            lines.append(",".join(draw(cell) for _ in range(draw(st.integers(1, width + 1)))))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- cgroup

_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "name=systemd", "pids", "", "cpu,cpuacct")


@st.composite
def structured_proc_cgroup(draw: st.DrawFn) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 6))):
        hierarchy = draw(
            st.one_of(
                st.sampled_from(("0", "1", "12", "x", "", "-1", "99999999999999999999")),
                unicode_number(),
            )
        )
        controllers = draw(st.sampled_from(_CONTROLLERS))
        path = draw(
            st.sampled_from(
                (
                    "/",
                    "/a",
                    "/a/b",
                    "/docker/abc",
                    "",
                    "rel",
                    "/..",
                    "/../..",
                    "/a:b",
                    "/with space",
                    "/\\040x",
                )
            )
        )
        lines.append(f"{hierarchy}:{controllers}:{path}")
    return "\n".join(lines) + draw(st.sampled_from(("\n", "")))


@st.composite
def structured_mountinfo(draw: st.DrawFn) -> str:
    lines = []
    for n in range(draw(st.integers(0, 6))):
        root = draw(st.sampled_from(("/", "/a", "/docker/abc", "/..", "/a\\040b")))
        point = draw(
            st.sampled_from(
                (
                    "/sys/fs/cgroup",
                    "/sys/fs/cgroup/cpu,cpuacct",
                    "/sys/fs/cgroup/memory",
                    "/",
                    "/..",
                    "relative",
                )
            )
        )
        fstype = draw(st.sampled_from(("cgroup", "cgroup2", "tmpfs", "proc")))
        options = draw(
            st.sampled_from(
                (
                    "rw,cpu,cpuacct",
                    "rw,memory",
                    "rw,cpuset",
                    "rw",
                    "rw,nsdelegate",
                    "",
                    "rw,name=systemd",
                )
            )
        )
        optional = draw(st.sampled_from(("", "shared:5 ", "master:1 shared:2 ")))
        sep = draw(st.sampled_from(("- ", "- ", "")))
        lines.append(
            f"{20 + n} 19 0:{n} {root} {point} rw,nosuid {optional}{sep}{fstype} cgroup {options}"
        )
    return "\n".join(lines) + "\n"


def cgroup_value() -> st.SearchStrategy[str]:
    """What a cgroup interface file might hold: numbers, "max", lists, junk."""
    number = st.one_of(st.integers(-(2**64), 2**64), st.integers(-5, 200_000))
    return st.one_of(
        number.map(str),
        unicode_number(),
        st.builds(
            lambda a, b: f"{a} {b}",
            st.one_of(number.map(str), st.just("max"), unicode_number()),
            st.one_of(number.map(str), unicode_number()),
        ),
        st.just("max"),
        st.just("max 100000"),
        st.just(""),
        st.just("9223372036854771712"),
        structured_cpulist(),
        _payload(),
    )


# ---------------------------------------------------------------------------- nvidia-smi

SMI_TAGS = (
    "product_name",
    "uuid",
    "product_architecture",
    "pci",
    "pci_bus_id",
    "numa_node",
    "fb_memory_usage",
    "total",
    "mig_mode",
    "current_mig",
    "mig_devices",
    "mig_device",
    "index",
    "driver_version",
    "cuda_version",
    "attached_gpus",
    "minor_number",
    "processes",
)


def _xml_text() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(
            (
                "Tesla T4",
                "NVIDIA A100-SXM4-40GB",
                "15360 MiB",
                "1.5 GiB",
                "N/A",
                "Enabled",
                "Disabled",
                "00000000:07:00.0",
                "GPU-1234",
                "0",
                "-1",
                "9" * 40,
                "[N/A]",
                "Hopper",
                "",
            )
        ),
        unicode_number(),
        st.builds("{} MiB".format, unicode_number()),
        st.text(max_size=20),
    )


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _element(depth: int) -> st.SearchStrategy[str]:
    tag = st.sampled_from(SMI_TAGS)
    leaf = st.builds(lambda t, x: f"<{t}>{_escape(x)}</{t}>", tag, _xml_text())
    if depth == 0:
        return leaf
    children = st.lists(_element(depth - 1), max_size=4).map("".join)
    nested = st.builds(lambda t, c: f"<{t}>{c}</{t}>", tag, children)
    return st.one_of(leaf, nested)


@st.composite
def structured_smi_xml(draw: st.DrawFn) -> bytes:
    gpus = []
    for _ in range(draw(st.integers(0, 4))):
        attr = draw(st.sampled_from(("", ' id="00000000:07:00.0"', ' id="junk"', ' id=""')))
        body = "".join(draw(st.lists(_element(2), max_size=8)))
        gpus.append(f"<gpu{attr}>{body}</gpu>")
    head = "".join(draw(st.lists(_element(0), max_size=4)))
    doctype = draw(
        st.sampled_from(("", '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n'))
    )
    root = draw(st.sampled_from(("nvidia_smi_log", "nvidia_smi_log", "something_else")))
    text = f'<?xml version="1.0" ?>\n{doctype}<{root}>{head}{"".join(gpus)}</{root}>\n'
    return text.encode(draw(st.sampled_from(("utf-8", "utf-8", "latin-1"))), "replace")


@st.composite
def structured_topo(draw: st.DrawFn) -> str:
    n = draw(st.integers(0, 5))
    nics = draw(st.integers(0, 2))
    names = [f"GPU{i}" for i in range(n)] + [f"NIC{i}" for i in range(nics)]
    trailing = draw(
        st.sampled_from(
            (
                ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"],
                ["CPU Affinity", "NUMA Affinity"],
                ["CPU Affinity"],
                [],
            )
        )
    )
    header = "\t" + "\t".join(names + trailing)
    if draw(st.booleans()):
        header = "\x1b[4m" + header + "\x1b[0m"
    cell = st.sampled_from(
        (
            "X",
            "NV12",
            "NV1",
            "SYS",
            "NODE",
            "PHB",
            "PXB",
            "PIX",
            "SOC",
            "NV",
            "NV99999999999999999999",
            "??",
            "",
            "NV²",
            "NV٣",
            "NV1²",
        )
    )
    rows = []
    for name in names:
        cells = [draw(cell) for _ in names]
        cells.append(draw(st.one_of(structured_cpulist(), _payload())))
        cells.append(
            draw(st.one_of(st.sampled_from(("0", "1", "N/A", "-1", "0-1", "")), unicode_number()))
        )
        cells.append(draw(st.sampled_from(("N/A", "0", "x"))))
        # Now and then a row's GPU number is spelled with Unicode digits ("GPU٣").
        name = draw(
            st.one_of(st.just(name), st.just(name), st.builds("GPU{}".format, unicode_number()))
        )
        rows.append(name + "\t" + "\t".join(cells[: draw(st.integers(0, len(cells)))]))
    legend = draw(st.sampled_from(("\nLegend:\n\n  X    = Self\n", "", "\nNIC Legend:\n\n")))
    return header + "\n" + "\n".join(rows) + "\n" + legend


# ---------------------------------------------------------------------------- TOML config

CONFIG_KEYS = ("mode", "instances", "instance", "precision", "tf_version", "jit", "data_format")
_CONFIG_GOOD = {
    "mode": ("throughput", "latency"),
    "precision": ("off", "eligible", "auto"),
    "jit": ("off", "autoclustering", "on"),
    "data_format": ("channels_last", "channels_first"),
    "tf_version": ("2.19", "2.21.0", "3"),
}


def _toml_scalar() -> st.SearchStrategy[str]:
    import json

    return st.one_of(
        st.integers(-(2**63), 2**63 - 1).map(str),
        st.integers(-3, 10).map(str),
        st.sampled_from(
            (
                "true",
                "false",
                "1.5",
                "inf",
                "nan",
                "1979-05-27",
                "[]",
                "[1, 2]",
                "{}",
                "{a = 1}",
                "0x10",
                "1_000",
            )
        ),
        st.text(max_size=20).map(lambda s: json.dumps(s, ensure_ascii=True)),
        st.sampled_from([f'"{v}"' for values in _CONFIG_GOOD.values() for v in values]),
    )


@st.composite
def structured_toml(draw: st.DrawFn) -> str:
    lines = []
    for key in draw(
        st.lists(st.sampled_from((*CONFIG_KEYS, "modee", "threads", "unknown")), max_size=6)
    ):
        lines.append(f"{key} = {draw(_toml_scalar())}")
    if draw(st.booleans()):
        lines.append("[threads]")
        for key in draw(st.lists(st.sampled_from(("intra_op", "inter_op", "intra")), max_size=3)):
            lines.append(f"{key} = {draw(_toml_scalar())}")
    if draw(st.booleans()):
        lines.append("[env]")
        names = st.one_of(
            st.sampled_from(("KMP_BLOCKTIME", "OMP_NUM_THREADS", "A", "_x")),
            st.from_regex(r"[A-Za-z0-9_\-.]{1,8}", fullmatch=True),
        )
        for name in draw(st.lists(names, max_size=4, unique=True)):
            quoted = name if name.replace("_", "").isalnum() and name.isascii() else f'"{name}"'
            lines.append(f"{quoted} = {draw(_toml_scalar())}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- overrides


def env_name() -> st.SearchStrategy[str]:
    return st.one_of(
        st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True),
        st.sampled_from(("", "1X", "A-B", "A B", "É", "A=B", "HWTUNE_MODE", "KMP_BLOCKTIME")),
        st.text(max_size=8),
    )


def env_value() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(HOSTILE_TOKENS),
        st.text(max_size=40),
        st.text(st.characters(codec="utf-8"), max_size=40),
        st.binary(max_size=20).map(lambda b: b.decode("utf-8", "surrogateescape")),
    )
