"""`nvidia-smi topo -m` (the GPU matrix as text): read, parse, and merge into the GPUs.

What `hwtune snapshot` saves as nvidia-smi-topo.txt and `detect --root DIR` reads; on the live
machine the fallback when NVML cannot be loaded. Per GPU row: its links to the other GPUs
(NV#, PIX, PXB, PHB, NODE, SYS), CPU affinity and NUMA node. Parsing is pure and never raises
for bad input: every problem becomes an issue naming the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from hwtune.models.cpulist import CpuListError, parse_cpulist
from hwtune.models.hardware import Gpu, GpuLink
from hwtune.models.words import plural
from hwtune.probes.issues import IssueLog, excerpt
from hwtune.probes.nvidia_smi import (
    MAX_GPUS,
    TOPO_NAME,
    XML_NAME,
    node_or_none,
    read_bounded,
)

# `topo -m` is one row of ~6-character cells per GPU and NIC: 2 KB for 8 GPUs (the p4d capture
# is 1,514 bytes), ~400 KB for a 256x256 matrix.
MAX_TOPO_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class TopoRow:
    index: int
    links: tuple[GpuLink, ...] = ()
    cpu_affinity: tuple[int, ...] = ()
    numa_node: int | None = None


@dataclass(frozen=True, slots=True)
class TopoMatrix:
    rows: tuple[TopoRow, ...] = field(default_factory=tuple)


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


# The link kinds `topo -m`'s legend names (every capture in tests/data/gpu prints it): X, SYS,
# NODE, PHB, PXB, PIX and NV#; SOC from drivers before R384. Another cell is no link nvidia-smi
# prints: it was kept as a kind, so "NV" + 20 digits counted as NVLink with 0 links and a
# 4 MiB cell was quoted whole in the plan's reason.
_KINDS = frozenset({"SYS", "NODE", "PHB", "PXB", "PIX", "SOC"})


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
        if not peer or int(peer.group(1)) == index or cell == "X":
            continue
        if cell not in _KINDS and not _NVLINK_RE.match(cell):
            issues.add(
                "nvidia-smi",
                f"GPU{index} to {column}: {excerpt(cell, 20)} is no link kind of the legend "
                "(SYS, NODE, PHB, PXB, PIX, NV#): link unknown",
                path=path,
                line=line,
            )
            continue
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
        numa_node=node_or_none(numa),
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


def read_topo(root: Path, issues: IssueLog) -> TopoMatrix | None:
    """Parse ROOT/nvidia-smi-topo.txt; None when the file is absent."""
    path = root / TOPO_NAME
    if not path.exists():
        return None
    data = read_bounded(root, MAX_TOPO_BYTES, issues, TOPO_NAME)
    if data is None:
        return TopoMatrix()
    return parse_topo(data.decode("utf-8", errors="replace"), TOPO_NAME, issues)
