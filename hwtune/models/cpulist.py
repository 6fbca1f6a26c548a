"""The kernel's CPU list format ("0-3,8-11", "0,2,4-7:2"), both ways.

Used for sysfs (`online`, `node*/cpulist`), cgroup `cpuset.cpus`, `Cpus_allowed_list` in
/proc/PID/status, and `taskset -c`/`numactl -C` style output. Grammar from the kernel's
`bitmap_parselist()` (lib/bitmap-str.c): comma-separated items, each `N`, `N-M` or `N-M:G/S`
(a group of G out of every S); whitespace and a trailing newline are allowed.
"""

from __future__ import annotations

from collections.abc import Iterable

from hwtune.models.digits import is_ascii_digits

# A bound on list size so a hostile "0-4294967295" cannot exhaust memory. The kernel's own
# NR_CPUS tops out at 8192 on x86-64 (arch/x86/Kconfig, MAXSMP); leave headroom.
MAX_CPU = 1 << 16
# NUMA node ids are below MAX_NUMNODES = 1 << CONFIG_NODES_SHIFT (include/linux/numa.h), and
# NODES_SHIFT is at most 10 on every architecture (mm/Kconfig and arch/*/Kconfig: "range 1 10").
# A larger id is no node any kernel has; a node mask sized from it would take gigabytes.
MAX_NUMA_NODES = 1 << 10


class CpuListError(ValueError):
    """A CPU list that does not follow the kernel's grammar."""


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Parse a CPU list into sorted, unique CPU numbers. An empty list is valid (no CPUs).

    The kernel prints each CPU once (bitmap_print_list_to_buf() walks a bitmap), so items that
    span more than MAX_CPU CPUs in all are refused before they are expanded: "0-65535"
    repeated through a 1 MiB file would otherwise take minutes of set insertions."""
    cpus: set[int] = set()
    body = text.strip()
    if not body:
        return ()
    spans: list[tuple[str, range]] = []
    total = 0
    for item in body.split(","):
        item = item.strip()
        if not item:
            raise CpuListError(f"empty item in CPU list {_quoted(text)}")
        span = _parse_span(item, text)
        total += len(span)
        if total > MAX_CPU:
            raise CpuListError(f"CPU list names more than {MAX_CPU} CPUs: {_quoted(text)}")
        spans.append((item, span))
    for item, span in spans:
        cpus.update(_expand(item, span, text))
    return tuple(sorted(cpus))


def _quoted(text: str) -> str:
    """The list for an error message: a file's worth of list is not quoted whole."""
    body = text.strip()
    return repr(body) if len(body) <= 40 else repr(body[:40]) + "..."


def _number(token: str, text: str) -> int:
    token = token.strip()
    if not is_ascii_digits(token):
        raise CpuListError(f"{token[:20]!r} is not a CPU number in {_quoted(text)}")
    if len(token.lstrip("0")) > len(str(MAX_CPU)):
        # Checked before int(): Python refuses strings over 4300 digits with a bare ValueError.
        raise CpuListError(f"CPU {token[:12]}… is beyond {MAX_CPU - 1} in {_quoted(text)}")
    value = int(token)
    if value >= MAX_CPU:
        raise CpuListError(f"CPU {value} is beyond {MAX_CPU - 1} in {_quoted(text)}")
    return value


def _parse_span(item: str, text: str) -> range:
    """The CPUs `item` ranges over, before any group stride."""
    span = item.partition(":")[0]
    first_s, dash, last_s = span.partition("-")
    first = _number(first_s, text)
    last = _number(last_s, text) if dash else first
    if last < first:
        raise CpuListError(f"range {item!r} runs backwards in {_quoted(text)}")
    return range(first, last + 1)


def _expand(item: str, span: range, text: str) -> Iterable[int]:
    stride = item.partition(":")[2]
    if not stride:
        return span
    first, last = span.start, span.stop - 1
    used_s, slash, group_s = stride.partition("/")
    used = _number(used_s, text)
    group = _number(group_s, text) if slash else 0
    if group == 0 or used == 0 or used > group:
        raise CpuListError(f"bad group {stride!r} in {_quoted(text)}")
    # "first-last:used/group": the first `used` CPUs of every `group`, from `first`.
    return (c for c in range(first, last + 1) if (c - first) % group < used)


def format_cpulist(cpus: Iterable[int]) -> str:
    """Format CPU numbers as the kernel does: sorted, with runs collapsed ("0-3,8-11")."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def name_cpus(cpus: Iterable[int]) -> str:
    """CPU numbers in words, for reasons and issues: "CPU 5" for one, "CPUs 0-3,8" for more.

    >>> name_cpus([5]), name_cpus([3, 0, 1, 2])
    ('CPU 5', 'CPUs 0-3')
    """
    listed = format_cpulist(cpus)
    return f"CPU {listed}" if listed.isdigit() else f"CPUs {listed}"


def parse_cpumask(text: str) -> tuple[int, ...]:
    """Parse the kernel's hex CPU mask ("ff", "00000000,000000f0") into sorted CPU numbers.

    The format of `cpumap`, `thread_siblings`, `core_siblings`, `shared_cpu_map`: bitmap_string()
    in lib/vsprintf.c prints 32-bit words in hex, most significant first, separated by commas;
    the first word may be shorter. Older kernels (util-linux's ia64 dumps) print the same.
    """
    words = [word.strip() for word in text.strip().split(",")]
    if len(words) * 32 > MAX_CPU:
        raise CpuListError(f"CPU mask of {len(words)} words is beyond {MAX_CPU} CPUs")
    cpus: list[int] = []
    for index, word in enumerate(reversed(words)):
        if not word or len(word) > 8 or any(c not in "0123456789abcdefABCDEF" for c in word):
            raise CpuListError(f"{word[:12]!r} is not a 32-bit hex word in {_quoted(text)}")
        value = int(word, 16)
        cpus.extend(index * 32 + bit for bit in range(32) if value >> bit & 1)
    return tuple(cpus)
