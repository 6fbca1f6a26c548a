"""Counts from lscpu's summary that need more than one line: several core types, s390 books,
and the cache spans that tell clusters from sockets (pure; used by probes/lscpu.py)."""

from __future__ import annotations

from hwtune.models.digits import is_ascii_digits
from hwtune.probes.cpuinfo import PROBE, Topology
from hwtune.probes.issues import IssueLog
from hwtune.probes.lscpu_forms import MAX_DIGITS, LscpuFacts


def s390_sockets(lscpu: LscpuFacts) -> int | None:
    """s390 prints "Socket(s) per book" and "Book(s)", or "Book(s) per drawer" and "Drawer(s)"."""
    per_book = lscpu.number("Socket(s) per book")
    per_drawer, drawers = lscpu.number("Book(s) per drawer"), lscpu.number("Drawer(s)")
    books = per_drawer * drawers if per_drawer and drawers else lscpu.number("Book(s)")
    return per_book * books if per_book and books else None


def _block_number(block: dict[str, str], *keys: str) -> int | None:
    for key in keys:
        value = block.get(key, "").strip()
        if is_ascii_digits(value) and len(value) <= MAX_DIGITS:
            return int(value)
    return None


def typed_topology(lscpu: LscpuFacts, topo: Topology, issues: IssueLog) -> Topology:
    """Several "Model name" blocks: lscpu counted each core type apart (lscpu-cputype.c), so
    the cores are their sum. No multi-socket machine mixes core types, so they share a socket;
    lscpu's logical Core ids restart in each type, so a row section is used for the per-CPU
    grouping only when its (Socket, Core) pairs count exactly the summed cores."""
    cores: int | None = 0
    threads = set()
    for block in lscpu.types:
        per = _block_number(block, "Core(s) per socket", "Core(s) per cluster")
        units = _block_number(block, "Socket(s)", "Cluster(s)")
        threads.add(_block_number(block, "Thread(s) per core"))
        cores = cores + per * units if cores is not None and per and units else None
    names = ", ".join(block.get("Model name", "?") for block in lscpu.types)
    topo.basis = f"lscpu summary: {len(lscpu.types)} core types ({names}) on one socket"
    online = set(topo.online)
    for rows in lscpu.sections:
        groups = {r.core_key() for r in rows if r.cpu in online}
        if cores and len(groups) == cores and {r.cpu for r in rows} >= online:
            topo.count({r.cpu: (0, r.core_key()) for r in rows if r.cpu in online})
            topo.basis += "; cores grouped by a -p/-e section"
            break
    topo.sockets, topo.cores = 1, cores
    thread = next(iter(threads)) if len(threads) == 1 else None
    if thread and cores and thread * cores == len(topo.online):
        topo.threads_per_core, topo.smt = thread, thread > 1
    elif not topo.places:
        topo.threads_per_core = None
        issues.add(
            PROBE,
            f"{len(lscpu.types)} core types whose threads per core "
            f"({', '.join(str(t) for t in sorted(threads, key=str))}) do not multiply out to "
            f"{len(topo.online)} online CPUs: threads per core unknown",
            path="lscpu.txt",
        )
    return topo


def rows_cache_spans(lscpu: LscpuFacts) -> list[list[int]]:
    """The CPUs sharing each last-level cache id of the rows (for probes/clusters.py)."""
    spans: dict[int, list[int]] = {}
    for row in lscpu.rows:
        if row.llc is not None:
            spans.setdefault(row.llc, []).append(row.cpu)
    return [cpus for cpus in spans.values() if len(cpus) > 1]
