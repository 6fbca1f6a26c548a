"""`nvidia-smi -q -x` (XML) and `nvidia-smi topo -m` (matrix text): read and parse.

These are what `hwtune snapshot` saves and what `detect --root DIR` reads; on the live machine
they are the fallback when NVML cannot be loaded. Parsing is pure and never raises for bad
input: every problem becomes an issue naming the file and line, and what could be read is kept.

XML safety: the real captures open with `<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v11.dtd">`,
an external DTD reference that is never fetched. A DOCTYPE with an internal subset, or any
entity declaration, is refused before a single entity could expand (the "billion laughs" and
XXE attacks), the approach of defusedxml; and no external entity is ever resolved.
The shape is bounded as it is parsed: nesting past MAX_XML_DEPTH or more than
MAX_XML_ELEMENTS elements and attributes is refused before another node is built.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from hwtune.models.cpulist import MAX_NUMA_NODES, CpuListError, parse_cpulist
from hwtune.models.digits import is_ascii_digits, within_u64
from hwtune.models.hardware import Gpu, GpuLink, MigDevice
from hwtune.models.words import plural
from hwtune.probes.issues import IssueLog
from hwtune.probes.root import read_bytes

XML_NAME = "nvidia-smi-q.xml"
TOPO_NAME = "nvidia-smi-topo.txt"

# `nvidia-smi -q -x` writes ~18 KB per GPU (the Tesla T4 capture in tests/data/gpu is 18,621
# bytes) plus a few hundred bytes per process; 16 MiB is several hundred times a full 8-GPU
# node and bounds what a hostile or corrupt file can make us hold.
MAX_XML_BYTES = 16 << 20
# `topo -m` is one row of ~6-character cells per GPU and NIC: 2 KB for 8 GPUs (the p4d capture
# is 1,514 bytes), ~400 KB for a 256x256 matrix.
MAX_TOPO_BYTES = 4 << 20
# More GPUs than any single OS image exposes today (DGX-2: 16; an NVL72 rack is 18 nodes of 4);
# a bound so that a hostile file of 100,000 empty <gpu/> elements cannot blow up the report.
MAX_GPUS = 256
# The tree is built one node per element (~250 bytes each), so the shape is bounded too, not
# only the size: 16 MiB of nested <a> cost 2 GB and 12 s, of sibling <a/> 1 GB. The real
# captures in tests/data/gpu nest at most 7 levels (telegraf-a100-sxm4-80gb-mig-v12.smi:
# nvidia_smi_log/gpu/mig_devices/mig_device/device_attributes/shared/...) and hold 270 to 298
# elements for their one GPU (telegraf-tesla-t4-xml.smi: 298, two of them in each of its two
# <process_info>, 7 a process). Depth 32 is 4 times the deepest; 1,000 elements (an attribute
# counts as one) per GPU is over 3 times the largest with room for 100 processes on each of
# MAX_GPUS GPUs, and the budget is the document's: 256,000, which a real 8-GPU node does not
# approach with 30,000 processes. At that limit a refusal costs under 1 s and ~90 MB.
MAX_XML_DEPTH = 32
MAX_XML_ELEMENTS_PER_GPU = 1000
MAX_XML_ELEMENTS = MAX_XML_ELEMENTS_PER_GPU * MAX_GPUS


@dataclass(frozen=True, slots=True)
class SmiLog:
    """What `nvidia-smi -q -x` says; GPUs come without compute capability (it is not printed)."""

    gpus: tuple[Gpu, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None


@dataclass(frozen=True, slots=True)
class TopoRow:
    index: int
    links: tuple[GpuLink, ...] = ()
    cpu_affinity: tuple[int, ...] = ()
    numa_node: int | None = None


@dataclass(frozen=True, slots=True)
class TopoMatrix:
    rows: tuple[TopoRow, ...] = field(default_factory=tuple)


# ---------------------------------------------------------------------------- XML


class XmlRefused(ValueError):
    """An XML document refused before or while parsing; `line` is 1-based when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


class _Node:
    """A minimal element tree: only what the nvidia-smi schema needs (tags, text, children)."""

    __slots__ = ("attrs", "children", "tag", "text_parts")

    def __init__(self, tag: str, attrs: dict[str, str]) -> None:
        self.tag = tag
        self.attrs = attrs
        self.children: list[_Node] = []
        self.text_parts: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self.text_parts).strip()

    def find(self, path: str) -> _Node | None:
        node: _Node | None = self
        for tag in path.split("/"):
            node = next((c for c in node.children if c.tag == tag), None) if node else None
        return node

    def findall(self, tag: str) -> list[_Node]:
        return [c for c in self.children if c.tag == tag]

    def findtext(self, path: str) -> str | None:
        node = self.find(path)
        return node.text if node is not None else None


def parse_xml_tree(data: bytes) -> _Node:
    """Parse `data` with expat, refusing any DTD internal subset or entity declaration, and
    any document nested deeper than MAX_XML_DEPTH or with more than MAX_XML_ELEMENTS elements
    and attributes (refused at the first element past the limit, before its node is made).

    Raises XmlRefused (with the line) for hostile or malformed input.
    """
    from xml.parsers import expat

    # expat hands over a start tag's attributes only once the whole tag is read, as one dict:
    # one `<a` with a million attributes costs 400 MB before the handler below can count
    # them. Every attribute has its "=", so more "=" than the budget refuses it unparsed (an
    # "=" in text counts too: real output has two in the XML declaration, one per GPU, and a
    # few in each process's command line: six in each of two Chromium and Electron GPU
    # processes of tests/data/gpu/telegraf-geforce-gt-1030-v11.smi).
    if (signs := data.count(b"=")) > MAX_XML_ELEMENTS:
        raise XmlRefused(
            f"refused: {signs} '=' signs, more than the {MAX_XML_ELEMENTS} elements and "
            "attributes allowed"
        )
    parser = expat.ParserCreate()
    # Adjacent character data in one call, not one per line or entity: 16 MiB of newlines
    # would otherwise be millions of one-character strings in a node's text_parts.
    parser.buffer_text = True
    root = _Node("#document", {})
    stack = [root]
    counted = [0]

    def refuse(what: str) -> None:
        raise XmlRefused(
            f"refused: {what} (entity declarations are not allowed)", parser.CurrentLineNumber
        )

    def doctype(name: str, sysid: str | None, pubid: str | None, internal: int) -> None:
        if internal:
            refuse(f"DOCTYPE {name} has an internal subset")

    def entity(name: str, *_args: object) -> None:
        refuse(f"entity {name!r} declared")

    def start(tag: str, attrs: dict[str, str]) -> None:
        if len(stack) > MAX_XML_DEPTH:  # the stack holds the document node and the parents
            raise XmlRefused(
                f"refused: elements nested more than {MAX_XML_DEPTH} deep "
                "(nvidia-smi -q -x nests fewer than 10)",
                parser.CurrentLineNumber,
            )
        counted[0] += 1 + len(attrs)
        if counted[0] > MAX_XML_ELEMENTS:
            raise XmlRefused(
                f"refused: more than {MAX_XML_ELEMENTS} elements and attributes "
                f"({MAX_XML_ELEMENTS_PER_GPU} for each of up to {MAX_GPUS} GPUs)",
                parser.CurrentLineNumber,
            )
        node = _Node(tag, attrs)
        stack[-1].children.append(node)
        stack.append(node)

    def end(tag: str) -> None:
        stack.pop()

    def text(data: str) -> None:
        stack[-1].text_parts.append(data)

    parser.StartDoctypeDeclHandler = doctype
    parser.EntityDeclHandler = entity
    parser.UnparsedEntityDeclHandler = entity

    def external(*_args: object) -> int:
        refuse("external entity reference")
        return 0

    # Without a handler expat would skip external entity references; refusing is clearer.
    parser.ExternalEntityRefHandler = external
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = text
    try:
        parser.Parse(data, True)
    except XmlRefused:
        raise
    except expat.ExpatError as err:
        raise XmlRefused(f"malformed XML: {expat.errors.messages[err.code]}", err.lineno) from None
    except (LookupError, ValueError) as err:
        # An encoding expat lacks is looked up among Python's codecs (pyexpat's unknown-encoding
        # handler), which raises rather than reporting an ExpatError: LookupError for a name
        # that is no codec or no text codec (encoding="bogus", "hex", "rot13"), ValueError for
        # multi-byte ones ("shift_jis", "utf-32", "utf-7"), UnicodeError ("idna"). nvidia-smi
        # writes UTF-8 with no encoding declaration.
        raise XmlRefused(
            f"the XML declaration names an encoding expat cannot read: {str(err)[:80]}",
            parser.CurrentLineNumber,
        ) from None
    return root


# re.ASCII: a str pattern's \d also matches Unicode digits, which nvidia-smi never prints.
_SIZE_RE = re.compile(r"^(\d{1,18}(?:\.\d{1,18})?)\s*(B|KiB|MiB|GiB|TiB)$", re.ASCII)
_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def parse_size(text: str | None) -> int | None:
    """nvidia-smi sizes ("15360 MiB") to bytes; "N/A" and anything else to None, and so is a
    size of 2**64 bytes or more (up to 10^30 matched: more digits than --hardware reads)."""
    m = _SIZE_RE.match((text or "").strip())
    if not m:
        return None
    size = int(float(m.group(1)) * _UNITS[m.group(2)])
    return size if within_u64(size) else None


def _memory(node: _Node, path: str, issues: IssueLog, what: str) -> int | None:
    """The fb_memory_usage/total of a GPU or MIG device; a size that matched but is beyond
    2**64 bytes is an issue naming the file, not a silent unknown."""
    text = node.findtext("fb_memory_usage/total")
    size = parse_size(text)
    if size is None and text is not None and _SIZE_RE.match(text.strip()):
        issues.add(
            "nvidia-smi", f"{what} memory {text.strip()[:40]!r} is beyond 2**64 bytes", path=path
        )
    return size


def _int_or_none(text: str | None) -> int | None:
    t = (text or "").strip()
    return int(t) if is_ascii_digits(t) and len(t) <= 18 else None


def _node_or_none(text: str | None) -> int | None:
    """A NUMA node id below MAX_NUMA_NODES (the most a kernel has), else unknown."""
    node = _int_or_none(text)
    return node if node is not None and node < MAX_NUMA_NODES else None


def _known(text: str | None) -> str | None:
    """None for the placeholders nvidia-smi prints where a value does not apply."""
    t = (text or "").strip()
    return None if t in ("", "N/A", "None", "[N/A]", "Unknown Error") else t


def _mig_enabled(gpu: _Node) -> bool | None:
    current = gpu.findtext("mig_mode/current_mig")
    if current is None:
        return None  # drivers before MIG (R450) print no <mig_mode> at all
    # "N/A" is a GPU that cannot be partitioned: MIG is not enabled on it.
    return current.strip() == "Enabled"


def _mig_devices(gpu: _Node, path: str, issues: IssueLog) -> tuple[MigDevice, ...]:
    devices = []
    block = gpu.find("mig_devices")
    for pos, dev in enumerate(block.findall("mig_device") if block is not None else []):
        index = _int_or_none(dev.findtext("index"))
        devices.append(
            MigDevice(
                index=pos if index is None else index,
                uuid=_known(dev.findtext("uuid")),
                # -q -x names no MIG profile ("1g.10gb"); `nvidia-smi -L` and NVML do.
                memory_bytes=_memory(dev, path, issues, f"MIG device {pos}"),
                gpu_instance_id=_int_or_none(dev.findtext("gpu_instance_id")),
                compute_instance_id=_int_or_none(dev.findtext("compute_instance_id")),
            )
        )
    return tuple(devices)


# Output as nvidia-smi writes it: "<" first (no byte-order mark, so not UTF-16) and an XML
# declaration, if any, that names no encoding (UTF-8 by the XML spec).
_UNDECLARED_UTF8_RE = re.compile(rb"\A\s*<(?!\?xml[^>]*\bencoding\s*=)")
# Characters XML 1.0 forbids in a document (production [2] Char): C0 controls but tab, LF, CR.
_NOT_XML_CHAR_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")


def scrub_xml_bytes(data: bytes) -> tuple[bytes, int | None]:
    """`data` with bytes that are not UTF-8, and characters XML forbids, made U+FFFD; and the
    1-based line of the first one (None when there was none: `data` comes back unchanged).

    cwltool's maintainers saw `nvidia-smi -q -x`, run concurrently, write
    "<process_name>\\xff...\\xff</process_name> (or other arbitrary bytes)", which expat
    refuses as "not well-formed (invalid token)" (common-workflow-language/cwltool PR #1910):
    one process's name cost every GPU of the file. A document that declares an encoding is
    left to expat, and so is one that does not start with "<" (UTF-16, a byte-order mark).
    """
    if not _UNDECLARED_UTF8_RE.match(data):
        return data, None
    lines: list[int] = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        text = data.decode("utf-8", errors="replace")
        lines.append(data.count(b"\n", 0, err.start) + 1)
    if control := _NOT_XML_CHAR_RE.search(text):
        lines.append(text.count("\n", 0, control.start()) + 1)
    if not lines:
        return data, None
    return _NOT_XML_CHAR_RE.sub("\ufffd", text).encode("utf-8"), min(lines)


def parse_smi_xml(data: bytes, path: str, issues: IssueLog) -> SmiLog:
    """Parse `nvidia-smi -q -x` output; problems become issues naming `path`."""
    data, garbled = scrub_xml_bytes(data)
    if garbled is not None:
        issues.add(
            "nvidia-smi",
            "bytes that are not UTF-8 text, or control characters, replaced by U+FFFD "
            "(the first on this line) and the rest read",
            path=path,
            line=garbled,
        )
    try:
        doc = parse_xml_tree(data)
    except XmlRefused as err:
        issues.add("nvidia-smi", str(err), path=path, line=err.line)
        return SmiLog()
    log = doc.find("nvidia_smi_log")
    if log is None:
        top = doc.children[0].tag if doc.children else "nothing"
        issues.add("nvidia-smi", f"not nvidia-smi -q -x output: root element is {top}", path=path)
        return SmiLog()
    gpus: list[Gpu] = []
    elements = log.findall("gpu")
    if len(elements) > MAX_GPUS:
        issues.add(
            "nvidia-smi", f"{len(elements)} <gpu> elements; kept the first {MAX_GPUS}", path=path
        )
    # The index is the position: nvidia-smi lists GPUs in PCI bus order, which is also the
    # order of its own indices (and of `topo -m`'s GPUn); <minor_number> is the /dev node.
    for index, gpu in enumerate(elements[:MAX_GPUS]):
        name = _known(gpu.findtext("product_name"))
        if name is None:
            issues.add("nvidia-smi", f"GPU {index} has no <product_name>", path=path)
        gpus.append(
            Gpu(
                index=index,
                name=name or f"GPU {index}",
                uuid=_known(gpu.findtext("uuid")),
                architecture=_known(gpu.findtext("product_architecture")),
                memory_bytes=_memory(gpu, path, issues, f"GPU {index}"),
                pci_bus_id=_known(gpu.findtext("pci/pci_bus_id")) or _known(gpu.attrs.get("id")),
                numa_node=_node_or_none(
                    gpu.findtext("numa_node") or gpu.findtext("pci/numa_node")
                ),
                mig_enabled=_mig_enabled(gpu),
                mig_devices=_mig_devices(gpu, path, issues),
            )
        )
    attached = _int_or_none(log.findtext("attached_gpus"))
    if attached is not None and attached != len(elements):
        issues.add(
            "nvidia-smi",
            f"<attached_gpus> says {attached} but {len(elements)} <gpu> "
            "elements are present (file truncated?)",
            path=path,
        )
    return SmiLog(
        gpus=tuple(gpus),
        driver_version=_known(log.findtext("driver_version")),
        cuda_version=_known(log.findtext("cuda_version")),
    )


# ---------------------------------------------------------------------------- topo -m

# The header's column names. Three of them contain spaces ("GPU NUMA ID" is three words), so
# the header cannot be split on whitespace; device columns (GPU0, NIC0, mlx5_0…) have none.
_TRAILING_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_HEADER_TOKEN_RE = re.compile("|".join(re.escape(c) for c in _TRAILING_COLUMNS) + r"|\S+")
# Newer drivers underline the header with terminal escapes even when writing to a file.
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Bounded digit counts: a longer number is not a GPU index or link count, and int() refuses
# strings over 4300 digits with a bare ValueError. ASCII digits only, as above.
_GPU_RE = re.compile(r"^GPU(\d{1,9})$", re.ASCII)
_NVLINK_RE = re.compile(r"^NV(\d{1,9})$", re.ASCII)


def _is_header(tokens: list[str]) -> bool:
    # The header names GPU0 first and has no "X" (self) cell, which every matrix row has.
    return bool(tokens) and tokens[0] == "GPU0" and "X" not in tokens


def _link(peer: int, cell: str) -> GpuLink:
    # "SOC" is what drivers before R384 printed for today's "SYS".
    kind = "SYS" if cell == "SOC" else cell
    m = _NVLINK_RE.match(kind)
    return GpuLink(peer=peer, kind=kind, nvlinks=int(m.group(1)) if m else 0)


def parse_topo(text: str, path: str, issues: IssueLog) -> TopoMatrix:
    """Parse `nvidia-smi topo -m`: per GPU row its links, CPU affinity and NUMA node."""
    columns: list[str] | None = None
    rows: list[TopoRow] = []
    seen: dict[int, int] = {}  # GPU index -> the line of its row
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = _ANSI_RE.sub("", raw)
        tokens = line.split()
        if not tokens:
            continue
        if columns is not None and tokens[0] in ("Legend:", "NIC"):
            break  # the legend ("Legend:", "NIC Legend:") follows the matrix: done
        if columns is None:
            if _is_header(tokens):
                columns = _HEADER_TOKEN_RE.findall(line)
            continue
        m = _GPU_RE.match(tokens[0])
        if not m:
            continue  # a NIC row (NIC0, mlx5_0): GPUs' links to NICs are not modelled
        index = int(m.group(1))
        if index in seen:
            # nvidia-smi prints each GPU once; a second row (two captures pasted together)
            # would silently replace the first one's links in merge_topo.
            issues.add(
                "nvidia-smi",
                f"GPU{index} has a second row: kept the first (line {seen[index]})",
                path=path,
                line=lineno,
            )
            continue
        seen[index] = lineno
        row = _parse_row(index, columns, line, path, lineno, issues)
        if row is not None:
            rows.append(row)
        if len(rows) > MAX_GPUS:
            issues.add(
                "nvidia-smi",
                f"more than {MAX_GPUS} GPU rows; kept the first",
                path=path,
                line=lineno,
            )
            rows.pop()
            break
    if columns is None:
        issues.add("nvidia-smi", "no GPU0 header line: not nvidia-smi topo -m output", path=path)
    elif not rows:
        issues.add("nvidia-smi", "header found but no GPU rows (file truncated?)", path=path)
    return TopoMatrix(rows=tuple(rows))


def _trailing_by_tabs(text: str, devices: int, trailing: Sequence[str]) -> dict[str, str] | None:
    """The trailing cells of a tab-separated row in which a trailing cell is empty, or None.

    Split on whitespace, an empty cell vanishes and the row looks one cell short: a GB200
    tray's `topo -m` prints an empty CPU Affinity for GPU2 and GPU3, whose NUMA Affinity is 1
    ("GPU2\t…\tNODE\t\t1\t\tN/A", tests/data/gpu/aiconfigurator-gb200-4gpu.topo). nvidia-smi
    writes one tab after each cell and pads some trailing cells with a second one
    ("0-35\t0\t\tN/A" under CPU Affinity, NUMA Affinity and GPU NUMA ID in that capture), so
    padding follows a value and the field right after the device cells is the first trailing
    column, empty or not; the other values follow in order.
    """
    fields = [f.strip() for f in text.split("\t")][1:]  # [0] is the row's own name
    cells, rest = fields[:devices], fields[devices:]
    if len(cells) < devices or not all(cells) or not rest or not trailing:
        return None
    values = [rest[0], *(f for f in rest[1:] if f)]
    if len(values) != len(trailing):
        return None
    return dict(zip(trailing, values, strict=True))


def _parse_row(
    index: int,
    columns: Sequence[str],
    text: str,
    path: str,
    line: int,
    issues: IssueLog,
) -> TopoRow | None:
    cells = text.split()[1:]
    devices = [c for c in columns if c not in _TRAILING_COLUMNS]
    trailing = [c for c in columns if c in _TRAILING_COLUMNS]
    if len(cells) < len(devices):
        issues.add(
            "nvidia-smi",
            f"GPU{index} row has {len(cells)} cells for {len(devices)} "
            "device columns (line cut short?)",
            path=path,
            line=line,
        )
        return None
    short = len(cells) < len(columns)  # a trailing cell missing: empty, or cut off
    by_tabs = _trailing_by_tabs(text, len(devices), trailing) if short else None
    trailing_cells: dict[str, str] = {}
    if by_tabs is not None:
        trailing_cells = by_tabs
    elif len(cells) != len(columns):
        issues.add(
            "nvidia-smi",
            f"GPU{index} row has {len(cells)} cells for {len(columns)} "
            "columns; reading the device columns only",
            path=path,
            line=line,
        )
    else:
        trailing_cells = dict(zip(trailing, cells[len(devices) :], strict=True))
    links = []
    for column, cell in zip(devices, cells, strict=False):
        peer = _GPU_RE.match(column)
        if peer and int(peer.group(1)) != index and cell != "X":
            links.append(_link(int(peer.group(1)), cell))
    cpus: tuple[int, ...] = ()
    affinity = trailing_cells.get("CPU Affinity", "N/A")
    if affinity not in ("", "N/A"):
        try:
            cpus = parse_cpulist(affinity)
        except CpuListError as err:
            issues.add("nvidia-smi", f"GPU{index} CPU Affinity: {err}", path=path, line=line)
    numa = trailing_cells.get("NUMA Affinity", "N/A")
    return TopoRow(
        index=index,
        links=tuple(links),
        cpu_affinity=cpus,
        numa_node=_node_or_none(numa),
    )


def merge_topo(gpus: Sequence[Gpu], topo: TopoMatrix, issues: IssueLog) -> tuple[Gpu, ...]:
    """Add links, NVLink peers, CPU affinity and NUMA node from `topo` to GPUs of the same index.

    With no XML (`gpus` empty) the matrix alone gives placeholder GPUs ("GPU 3").
    """
    by_index = {g.index: g for g in gpus}
    if by_index and set(by_index) != {r.index for r in topo.rows}:
        issues.add(
            "nvidia-smi",
            f"{XML_NAME} lists {plural(len(by_index), 'GPU')} but {TOPO_NAME} "
            f"{len(topo.rows)}; merged the indices both have",
            path=TOPO_NAME,
        )
    merged = dict(by_index)
    for row in topo.rows:
        base = by_index.get(row.index)
        if base is None and by_index:
            continue
        base = base or Gpu(index=row.index, name=f"GPU {row.index}")
        merged[row.index] = replace(
            base,
            links=row.links,
            nvlink_peers=tuple(sorted(link.peer for link in row.links if link.nvlinks)),
            cpu_affinity=row.cpu_affinity or base.cpu_affinity,
            numa_node=base.numa_node if row.numa_node is None else row.numa_node,
        )
    return tuple(merged[i] for i in sorted(merged))


# ---------------------------------------------------------------------------- I/O


def read_bounded(root: Path, limit: int, issues: IssueLog, name: str) -> bytes | None:
    """ROOT/name's bytes, or None (with an issue) when unreadable, larger than `limit`, not
    a regular file or reached through a link out of the root (`probes.root.read_bytes`)."""
    try:
        return read_bytes(root, name, limit)
    except OSError as err:
        issues.add("nvidia-smi", f"cannot read: {err.strerror or err}", path=name)
        return None


def read_smi_xml(root: Path, issues: IssueLog) -> SmiLog | None:
    """Parse ROOT/nvidia-smi-q.xml; None when the file is absent."""
    path = root / XML_NAME
    if not path.exists():
        return None
    data = read_bounded(root, MAX_XML_BYTES, issues, XML_NAME)
    return SmiLog() if data is None else parse_smi_xml(data, XML_NAME, issues)


def read_topo(root: Path, issues: IssueLog) -> TopoMatrix | None:
    """Parse ROOT/nvidia-smi-topo.txt; None when the file is absent."""
    path = root / TOPO_NAME
    if not path.exists():
        return None
    data = read_bounded(root, MAX_TOPO_BYTES, issues, TOPO_NAME)
    if data is None:
        return TopoMatrix()
    return parse_topo(data.decode("utf-8", errors="replace"), TOPO_NAME, issues)
