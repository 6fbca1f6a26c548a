"""Memory: total and available RAM from /proc/meminfo, huge pages and the THP mode.

/proc/meminfo lines are `Name:   value kB` (proc(5)); the "kB" there means KiB (1024 bytes,
fs/proc/meminfo.c shifts page counts by PAGE_SHIFT - 10). The transparent-hugepage mode is the
bracketed word of `sys/kernel/mm/transparent_hugepage/enabled`, e.g. "always [madvise] never"
(Documentation/admin-guide/mm/transhuge.rst). RHEL 6 kernels (2.6.32 with Red Hat's THP
backport) have no such file: theirs is `sys/kernel/mm/redhat_transparent_hugepage/enabled`, in
the same format (early ones offer only "[always] never", madvise having been left out), so it is
read when the upstream one is missing.
"""

from __future__ import annotations

from pathlib import Path

from hwtune.models.digits import is_ascii_digits, within_u64
from hwtune.models.hardware import Memory
from hwtune.probes.issues import IssueLog, excerpt
from hwtune.probes.root import UnsafeRead, read_text

MEMINFO = "proc/meminfo"
THP_ENABLED = "sys/kernel/mm/transparent_hugepage/enabled"
RHEL6_THP_ENABLED = "sys/kernel/mm/redhat_transparent_hugepage/enabled"
UNITS = {"kB": 1024, "": 1}  # HugePages_Total and friends are plain counts
# More digits than any u64 counter has (20): a longer "number" is garbage, and int() would
# refuse one over 4300 digits with a bare ValueError.
MAX_DIGITS = 20


def parse_meminfo(text: str, issues: IssueLog, path: str = MEMINFO) -> dict[str, int]:
    """Map each /proc/meminfo name to bytes (or a count); bad lines become issues."""
    values: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        name, colon, rest = raw.partition(":")
        fields = rest.split()
        unit = fields[1] if len(fields) == 2 else ""
        if (
            not colon
            or not 1 <= len(fields) <= 2
            or not is_ascii_digits(fields[0])
            or len(fields[0]) > MAX_DIGITS
            or unit not in UNITS
        ):
            issues.add(
                "memory", f"not a meminfo line: {excerpt(raw.strip())}", path=path, line=number
            )
            continue
        value = int(fields[0]) * UNITS[unit]
        if not within_u64(value):  # 20 digits of kB: beyond what `plan --hardware` reads
            issues.add(
                "memory", f"{excerpt(raw.strip())}: beyond 2**64 bytes", path=path, line=number
            )
            continue
        values[name.strip()] = value
    return values


def parse_thp_mode(text: str) -> str | None:
    """The selected mode of a sysfs choice file ("always [madvise] never" -> "madvise")."""
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return None


def _read(root: Path, relative: str) -> tuple[str | None, str]:
    """The file's text, or None and why not ("file missing", "cannot read: …")."""
    try:
        return read_text(root, relative), ""
    except UnsafeRead as err:
        return None, f"not read: {err.strerror}"
    except (FileNotFoundError, NotADirectoryError):
        return None, "file missing"
    except OSError as err:
        return None, f"cannot read: {err.strerror or err}"


def probe_memory(root: Path, issues: IssueLog) -> Memory:
    """RAM and huge-page facts under `root`; missing files become issues, never errors."""
    thp: str | None = None
    thp_path = THP_ENABLED
    thp_text, why = _read(root, THP_ENABLED)
    if thp_text is None and why == "file missing":
        rhel6_text, rhel6_why = _read(root, RHEL6_THP_ENABLED)
        if rhel6_why != "file missing":
            thp_text, why, thp_path = rhel6_text, rhel6_why, RHEL6_THP_ENABLED
    if thp_text is None:
        issues.add("memory", f"transparent hugepage mode unknown: {why}", path=thp_path)
    else:
        thp = parse_thp_mode(thp_text)
        if thp is None:
            issues.add(
                "memory",
                f"no [selected] mode in {excerpt(thp_text.strip())}",
                path=thp_path,
                line=1,
            )
    text, why = _read(root, MEMINFO)
    if text is None:
        issues.add("memory", f"memory size unknown: {why}", path=MEMINFO)
        return Memory(transparent_hugepages=thp)
    values = parse_meminfo(text, issues)
    for needed in ("MemTotal", "MemAvailable"):
        if needed not in values:
            issues.add("memory", f"{needed} missing", path=MEMINFO)
    if values.get("MemTotal") == 0:
        # No running kernel has no memory; read as 0 bytes, detect --json wrote a size that
        # `plan --hardware` refuses (models/hardware_checks.py).
        why = "MemTotal is 0 kB, which no running kernel has: unknown"
        issues.add("memory", why, path=MEMINFO)
        del values["MemTotal"]
    return Memory(
        total_bytes=values.get("MemTotal"),
        available_bytes=values.get("MemAvailable"),
        hugepage_size_bytes=values.get("Hugepagesize"),
        transparent_hugepages=thp,
    )
