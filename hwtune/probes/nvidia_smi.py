"""`nvidia-smi -q -x` (XML): read and parse (`nvidia-smi topo -m` is nvidia_topo.py's).

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
from dataclasses import dataclass
from pathlib import Path

from hwtune.models.cpulist import MAX_NUMA_NODES
from hwtune.models.digits import is_ascii_digits, within_u64
from hwtune.models.hardware import Gpu, MigDevice
from hwtune.probes.issues import IssueLog, excerpt
from hwtune.probes.root import read_bytes

XML_NAME = "nvidia-smi-q.xml"
TOPO_NAME = "nvidia-smi-topo.txt"

# `nvidia-smi -q -x` writes ~18 KB per GPU (the Tesla T4 capture in tests/data/gpu is 18,621
# bytes) plus a few hundred bytes per process; 16 MiB is several hundred times a full 8-GPU
# node and bounds what a hostile or corrupt file can make us hold.
MAX_XML_BYTES = 16 << 20
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


def node_or_none(text: str | None) -> int | None:
    """A NUMA node id below MAX_NUMA_NODES (the most a kernel has), else unknown."""
    node = _int_or_none(text)
    return node if node is not None and node < MAX_NUMA_NODES else None


# What nvidia-smi prints in place of a value, compared in lower case: "N/A" where a field does
# not apply (`-q`, `-q -x`), "None" for an empty list (<mig_devices>None</mig_devices>), and,
# where NVML's query fails, NVML's error string (nvml.h `nvmlErrorString`: "Not Supported",
# "Insufficient Permissions", "GPU is lost", "Unknown Error", "Requested functionality has been
# deprecated"), bracketed in `--query-gpu --format=csv` ("[Not Supported]", "[N/A]"). Seen in
# real output: "Product Name : Unknown Error" (`nvidia-smi -q`, driver 375.26,
# NVIDIA/nvidia-docker#464); "[Not Supported]" and later "[N/A]" in CSV (enkore/i3pystatus
# PR #776); "<display_mode>Requested functionality has been deprecated</display_mode>"
# (`-q -x`, driver 591.74, 1Panel-dev/1Panel#11910). "Unknown" (nvml.h's
# NVML_DEVICE_ARCH_UNKNOWN) names no architecture and no product. Kept as text, a placeholder
# stood in for the value: an architecture "Not Supported" stopped the gpus name table from
# giving the real one (`probes.gpu.identify` fills only what is missing).
NOT_REPORTED = frozenset(
    form
    for text in (
        "n/a",
        "none",
        "unknown",
        "not supported",
        "insufficient permissions",
        "gpu is lost",
        "unknown error",
        "requested functionality has been deprecated",
    )
    for form in (text, f"[{text}]")
)


def known(text: str | None) -> str | None:
    """`text` stripped, or None when it is empty or one of nvidia-smi's NOT_REPORTED forms."""
    t = (text or "").strip()
    return None if not t or t.lower() in NOT_REPORTED else t


# The longest string NVML hands nvidia-smi for these fields: 96 bytes with the NUL (nvml.h:
# NVML_DEVICE_NAME_V2_BUFFER_SIZE, NVML_DEVICE_UUID_V2_BUFFER_SIZE; the driver version's buffer
# is 80, the PCI bus id's 32). A 15 MB <product_name> was matched against every pattern of the
# gpus table (11 s) and written whole into `detect --json`, where escaped non-ASCII made it
# larger than `plan --hardware` reads.
MAX_VALUE_BYTES = 95


class _Values:
    """`known` text of one file, each value bounded by MAX_VALUE_BYTES: a longer one is an
    issue naming the file, and unknown."""

    def __init__(self, path: str, issues: IssueLog) -> None:
        self.path = path
        self.issues = issues

    def __call__(self, text: str | None, what: str) -> str | None:
        value = known(text)
        if value is not None and len(value.encode()) > MAX_VALUE_BYTES:
            self.issues.add(
                "nvidia-smi",
                f"{what} is {len(value)} characters long, longer than any value NVML gives "
                f"({MAX_VALUE_BYTES} bytes): {excerpt(value, 40)} not used",
                path=self.path,
            )
            return None
        return value


def _mig_enabled(gpu: _Node) -> bool | None:
    current = gpu.findtext("mig_mode/current_mig")
    if current is None:
        return None  # drivers before MIG (R450) print no <mig_mode> at all
    # "N/A" is a GPU that cannot be partitioned: MIG is not enabled on it.
    return current.strip() == "Enabled"


def _mig_devices(gpu: _Node, path: str, issues: IssueLog) -> tuple[MigDevice, ...]:
    devices = []
    value = _Values(path, issues)
    block = gpu.find("mig_devices")
    for pos, dev in enumerate(block.findall("mig_device") if block is not None else []):
        index = _int_or_none(dev.findtext("index"))
        devices.append(
            MigDevice(
                index=pos if index is None else index,
                uuid=value(dev.findtext("uuid"), f"MIG device {pos} <uuid>"),
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
    value = _Values(path, issues)
    for index, gpu in enumerate(elements[:MAX_GPUS]):
        name = value(gpu.findtext("product_name"), f"GPU {index} <product_name>")
        if known(gpu.findtext("product_name")) is None:
            issues.add("nvidia-smi", f"GPU {index} has no <product_name>", path=path)
        bus_id = value(gpu.findtext("pci/pci_bus_id"), f"GPU {index} <pci_bus_id>")
        gpus.append(
            Gpu(
                index=index,
                name=name or f"GPU {index}",
                uuid=value(gpu.findtext("uuid"), f"GPU {index} <uuid>"),
                architecture=value(
                    gpu.findtext("product_architecture"), f"GPU {index} <product_architecture>"
                ),
                memory_bytes=_memory(gpu, path, issues, f"GPU {index}"),
                pci_bus_id=bus_id or value(gpu.attrs.get("id"), f"GPU {index} <gpu id=...>"),
                numa_node=node_or_none(gpu.findtext("numa_node") or gpu.findtext("pci/numa_node")),
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
        driver_version=value(log.findtext("driver_version"), "<driver_version>"),
        cuda_version=value(log.findtext("cuda_version"), "<cuda_version>"),
    )


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
