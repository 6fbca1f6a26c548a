"""A tiny ELF reader: the DT_NEEDED, DT_SONAME and DT_RUNPATH entries of a shared object.

This is how hwtune tells which threading runtime a TensorFlow build links (libiomp5, libgomp,
libomp) without loading it: the dynamic section names every library the loader must map first.
Only what that needs is read, by offset: the file header, the program headers, the PT_DYNAMIC
segment and the few strings it points at, so a 790 MB `libtensorflow_cc.so.2` costs a handful
of small reads. Layouts follow the System V gABI ("Object Files" and "Dynamic Section",
https://refspecs.linuxfoundation.org/elf/gabi4+/contents.html); 32/64-bit and both byte orders.

`parse_dynamic(read_at)` is pure in the sense the probes use: it sees the file only through
`read_at(offset, size) -> bytes`, so tests hand it bytes; `read_dynamic(path)` opens the file.
A malformed file raises `ElfError` (a ValueError) saying what is wrong; nothing else escapes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

ELF_MAGIC = b"\x7fELF"
PT_LOAD = 1
PT_DYNAMIC = 2
DT_NULL = 0
DT_NEEDED = 1
DT_STRTAB = 5
DT_STRSZ = 10
DT_SONAME = 14
DT_RPATH = 15
DT_RUNPATH = 29
PN_XNUM = 0xFFFF  # gABI: the real program header count is then in section header 0

# Sanity bounds, so a corrupt header cannot make us read gigabytes. Real objects are far below:
# libtensorflow_cc.so.2 (TF 2.21) has 12 program headers and 40 dynamic entries.
MAX_PROGRAM_HEADERS = 4096
MAX_DYNAMIC_BYTES = 1 << 20
# A DT_RUNPATH is a colon-separated list with no length limit: tensorflow 2.21.0's CUDA wheel
# (x86_64) gives libtensorflow_framework.so.2 one of 20,297 bytes, $ORIGIN/../nvidia/*/lib for
# every CUDA library (tests/data/tf_wheels). Names are read in doubling chunks up to this.
MAX_NAME_BYTES = 1 << 20
MAX_ENTRY_BYTES = 256  # e_phentsize is 56 (ELF64) or 32 (ELF32) in every object seen

ReadAt = Callable[[int, int], bytes]


class ElfError(ValueError):
    """The file is not an ELF object, or its headers point outside it."""


class ElfDynamic(NamedTuple):
    """What the dynamic section says about an object's dependencies.

    (NamedTuples, not dataclasses, here: defining a frozen dataclass costs ~0.8 ms at import,
    and this module is imported on detect's hot path.)
    """

    needed: tuple[str, ...] = ()  # DT_NEEDED in file order
    soname: str | None = None
    runpath: str | None = None  # DT_RUNPATH, else the older DT_RPATH
    machine: int | None = None  # e_machine: 62 = x86-64, 183 = AArch64


class _Layout(NamedTuple):
    endian: str  # "<" or ">"
    is64: bool

    def unpack(self, fmt: str, data: bytes) -> tuple[int, ...]:
        return struct.unpack(self.endian + fmt, data)


def _exact(read_at: ReadAt, offset: int, size: int, what: str) -> bytes:
    data = read_at(offset, size)
    if len(data) != size:
        raise ElfError(f"truncated: {what} at offset {offset} needs {size} bytes, got {len(data)}")
    return data


def _header(read_at: ReadAt) -> tuple[_Layout, int, int, int, int]:
    """(layout, e_machine, e_phoff, e_phentsize, e_phnum) from the ELF file header."""
    ident = read_at(0, 16)
    if len(ident) < 16 or ident[:4] != ELF_MAGIC:
        raise ElfError("not an ELF file (bad magic)")
    if ident[4] not in (1, 2) or ident[5] not in (1, 2):
        raise ElfError(f"unknown ELF class {ident[4]} or data encoding {ident[5]}")
    layout = _Layout(endian="<" if ident[5] == 1 else ">", is64=ident[4] == 2)
    if layout.is64:
        rest = _exact(read_at, 16, 48, "file header")
        _type, machine, _ver, _entry, phoff, shoff, _flags, _eh, phentsize, phnum, shentsize = (
            layout.unpack("HHIQQQIHHHH", rest[:44])
        )
    else:
        rest = _exact(read_at, 16, 36, "file header")
        _type, machine, _ver, _entry, phoff, shoff, _flags, _eh, phentsize, phnum, shentsize = (
            layout.unpack("HHIIIIIHHHH", rest[:32])
        )
    if phnum == PN_XNUM:
        phnum = _extended_phnum(read_at, layout, shoff, shentsize)
    return layout, machine, phoff, phentsize, phnum


def _extended_phnum(read_at: ReadAt, layout: _Layout, shoff: int, shentsize: int) -> int:
    # sh_info of section header 0 holds the count when e_phnum is PN_XNUM.
    at = 28 if not layout.is64 else 44
    raw = _exact(read_at, shoff + at, 4, "section header 0") if shentsize else b""
    return layout.unpack("I", raw)[0] if raw else 0


def _program_headers(
    read_at: ReadAt, layout: _Layout, phoff: int, phentsize: int, phnum: int
) -> list[tuple[int, int, int, int]]:
    """(p_type, p_offset, p_vaddr, p_filesz) of every program header."""
    if phnum > MAX_PROGRAM_HEADERS:
        raise ElfError(f"implausible program header count {phnum}")
    need = 56 if layout.is64 else 32
    if phnum and not need <= phentsize <= MAX_ENTRY_BYTES:
        raise ElfError(f"implausible program header entry size {phentsize}")
    table = _exact(read_at, phoff, phentsize * phnum, "program header table")
    headers = []
    for i in range(phnum):
        raw = table[i * phentsize : i * phentsize + need]
        if layout.is64:
            p_type, _flags, off, vaddr, _paddr, filesz, _memsz, _align = layout.unpack(
                "IIQQQQQQ", raw
            )
        else:
            p_type, off, vaddr, _paddr, filesz, _memsz, _flags, _align = layout.unpack(
                "IIIIIIII", raw
            )
        headers.append((p_type, off, vaddr, filesz))
    return headers


def _file_offset(loads: list[tuple[int, int, int, int]], vaddr: int) -> int:
    """Map a virtual address (DT_STRTAB is one) to a file offset through the PT_LOAD segments."""
    for _type, off, seg_vaddr, filesz in loads:
        if seg_vaddr <= vaddr < seg_vaddr + filesz:
            return vaddr - seg_vaddr + off
    raise ElfError(f"address {vaddr:#x} lies in no PT_LOAD segment")


def _string(read_at: ReadAt, offset: int, limit: int) -> str:
    """The NUL-terminated string at `offset`, up to `limit` bytes: chunks of 256 bytes first
    (a library name), doubling after, so a 20 kB RUNPATH takes 7 reads, not 80."""
    chunks: list[bytes] = []
    got, size = 0, 256
    while got < limit:
        chunk = read_at(offset + got, min(size, limit - got))
        if not chunk:
            break
        end = chunk.find(b"\0")
        if end >= 0:
            chunks.append(chunk[:end])
            return b"".join(chunks).decode("utf-8", "replace")
        chunks.append(chunk)
        got += len(chunk)
        size *= 2
    raise ElfError(f"unterminated string at offset {offset}")


def parse_dynamic(read_at: ReadAt) -> ElfDynamic:
    """The dependencies an ELF object declares; an object without PT_DYNAMIC declares none."""
    layout, machine, phoff, phentsize, phnum = _header(read_at)
    headers = _program_headers(read_at, layout, phoff, phentsize, phnum)
    dynamic = [h for h in headers if h[0] == PT_DYNAMIC]
    if not dynamic:
        return ElfDynamic(machine=machine)  # a static executable or a relocatable object
    _type, dyn_off, _vaddr, dyn_size = dynamic[0]
    if dyn_size > MAX_DYNAMIC_BYTES:
        raise ElfError(f"implausible PT_DYNAMIC size {dyn_size}")
    entry_size = 16 if layout.is64 else 8
    raw = _exact(read_at, dyn_off, dyn_size - dyn_size % entry_size, "PT_DYNAMIC segment")
    fmt = "qQ" if layout.is64 else "iI"
    tags: list[tuple[int, int]] = []
    for i in range(0, len(raw), entry_size):
        tag, value = layout.unpack(fmt, raw[i : i + entry_size])
        if tag == DT_NULL:
            break
        tags.append((tag, value))
    strtab = next((v for t, v in tags if t == DT_STRTAB), None)
    strsz = next((v for t, v in tags if t == DT_STRSZ), None)
    names = [t for t, _ in tags if t in (DT_NEEDED, DT_SONAME, DT_RUNPATH, DT_RPATH)]
    if not names:
        return ElfDynamic(machine=machine)
    if strtab is None or strsz is None:
        raise ElfError("dynamic section names libraries but has no DT_STRTAB/DT_STRSZ")
    table = _file_offset([h for h in headers if h[0] == PT_LOAD], strtab)

    def name(offset: int) -> str:
        if offset >= strsz:
            raise ElfError(f"string offset {offset} is past DT_STRSZ {strsz}")
        return _string(read_at, table + offset, min(MAX_NAME_BYTES, strsz - offset))

    needed = tuple(name(v) for t, v in tags if t == DT_NEEDED)
    soname = next((name(v) for t, v in tags if t == DT_SONAME), None)
    runpath = next((name(v) for t, v in tags if t == DT_RUNPATH), None)
    if runpath is None:
        runpath = next((name(v) for t, v in tags if t == DT_RPATH), None)
    return ElfDynamic(needed=needed, soname=soname, runpath=runpath, machine=machine)


def read_dynamic(path: Path) -> ElfDynamic:
    """Open `path` and parse its dynamic section. Raises OSError or ElfError."""
    with open(path, "rb") as f:

        def read_at(offset: int, size: int) -> bytes:
            if offset < 0 or size < 0:
                raise ElfError(f"negative offset or size ({offset}, {size})")
            if offset >= 1 << 63:  # beyond off_t: seek() would raise a bare ValueError
                raise ElfError(f"offset {offset:#x} is beyond any file")
            f.seek(offset)
            return f.read(size)

        return parse_dynamic(read_at)


def read_needed(path: Path) -> tuple[str, ...]:
    """The DT_NEEDED names of the object at `path`. Raises OSError or ElfError."""
    return read_dynamic(path).needed
