"""Lay out a `.ttar` plain-text archive as a directory tree, for the procfs/node_exporter fixtures.

The format is ideaship/ttar's (`ttar` script, `extract()`), which prometheus/procfs and
prometheus/node_exporter use for their /proc and /sys fixtures:
- `Directory: PATH` then `Mode: NNN`;
- `Path: PATH` (older archives: `File: PATH`) then either `SymlinkTo: TARGET`, or `Lines: N`, N
  lines of content and `Mode: NNN`;
- inside content, a line ending in `EOF` (not `\\EOF`) is the file's last line, without its
  newline; `NULLBYTE` (not `\\NULLBYTE`) is a NUL byte;
- lines starting with `#` between entries are comments (the `# ttar - - -` separators).
Paths are taken relative to `dest`; one that is absolute or climbs out with `..` is refused, so
an archive can only write under `dest`. Symbolic links are made as the archive says (relative
ones, in these fixtures); hwtune's own reader refuses those that lead out of its root.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

_EOF = re.compile(r"(?<!\\)EOF$")
_NUL = re.compile(r"(?<!\\)NULLBYTE")


class TtarError(ValueError):
    pass


def _inside(dest: Path, name: str, line: int) -> Path:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise TtarError(f"line {line}: {name!r} is not a path inside the archive")
    return dest.joinpath(*path.parts)


def _content(line: str) -> tuple[bytes, bool]:
    """One content line as bytes, and whether it ends the file without a newline."""
    last = bool(_EOF.search(line))
    if last:
        line = line[:-3]
    line = _NUL.sub("\0", line).replace("\\NULLBYTE", "NULLBYTE").replace("\\EOF", "EOF")
    return line.encode("utf-8", errors="surrogateescape"), last


def extract(text: str, dest: Path) -> list[Path]:
    """Write every entry of the archive `text` under `dest`; returns the paths made."""
    lines = text.split("\n")
    made: list[Path] = []
    current: Path | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if line.startswith("#") or not line:
            continue
        key, _, value = line.partition(": ")
        if key in ("Directory", "Path", "File"):
            current = _inside(dest, value, index)
            if key == "Directory":
                current.mkdir(parents=True, exist_ok=True)
                made.append(current)
            continue
        if current is None:
            raise TtarError(f"line {index}: {key!r} before any Path or Directory")
        if key == "SymlinkTo":
            current.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(value, current)
            made.append(current)
        elif key == "Lines":
            count = int(value)
            data = bytearray()
            for content in lines[index : index + count]:
                chunk, last = _content(content)
                data += chunk if last else chunk + b"\n"
            if index + count > len(lines):
                raise TtarError(f"line {index}: {count} lines announced, the archive ends first")
            index += count
            current.parent.mkdir(parents=True, exist_ok=True)
            current.write_bytes(bytes(data))
            made.append(current)
        elif key == "Mode":
            if not current.is_symlink():
                current.chmod(int(value, 8) | 0o200)  # keep it writable so tmp_path cleans up
        else:
            raise TtarError(f"line {index}: unknown keyword {key!r}")
    return made
