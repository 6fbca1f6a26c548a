"""The ELF DT_NEEDED reader: crafted objects of every class and byte order, real objects built
with the system compiler, TensorFlow's own shared objects checked against `readelf`, and
corrupt input that must end as ElfError and nothing else."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.probes.elf import ElfDynamic, ElfError, parse_dynamic, read_dynamic, read_needed

WHEEL_DATA = Path(__file__).resolve().parent / "data" / "tf_wheels" / "tensorflow-2.21.0-x86_64"
BASE = 0x400000  # where the single PT_LOAD segment is mapped; any page-aligned value works


def build_elf(
    needed: list[str],
    soname: str | None = None,
    runpath: str | None = None,
    *,
    bits: int = 64,
    little: bool = True,
    dynamic: bool = True,
) -> bytes:
    """A minimal but well-formed ELF shared object: header, PT_LOAD + PT_DYNAMIC, .dynstr,
    .dynamic. Enough for the loader's view of dependencies (what `readelf -d` prints)."""
    end = "<" if little else ">"
    is64 = bits == 64
    ehsize, phentsize = (64, 56) if is64 else (52, 32)
    strtab = b"\0"
    offsets: dict[str, int] = {}
    for name in [*needed, soname, runpath]:
        if name is not None and name not in offsets:
            offsets[name] = len(strtab)
            strtab += name.encode() + b"\0"
    entries = [(1, offsets[n]) for n in needed]
    if soname is not None:
        entries.append((14, offsets[soname]))
    if runpath is not None:
        entries.append((29, offsets[runpath]))
    phnum = 2 if dynamic else 1
    str_off = ehsize + phnum * phentsize
    dyn_off = str_off + len(strtab)
    dyn_off += -dyn_off % 8
    entries += [(5, BASE + str_off), (10, len(strtab)), (0, 0)]
    dyn_fmt = end + ("qQ" if is64 else "iI")
    dyn = b"".join(struct.pack(dyn_fmt, tag, value) for tag, value in entries)
    total = dyn_off + len(dyn)
    ident = b"\x7fELF" + bytes([2 if is64 else 1, 1 if little else 2, 1]) + bytes(9)
    if is64:
        header = struct.pack(
            end + "HHIQQQIHHHHHH", 3, 62, 1, 0, ehsize, 0, 0, ehsize, phentsize, phnum, 64, 0, 0
        )
        load = struct.pack(end + "IIQQQQQQ", 1, 5, 0, BASE, BASE, total, total, 0x1000)
        dyn_ph = struct.pack(
            end + "IIQQQQQQ", 2, 6, dyn_off, BASE + dyn_off, BASE + dyn_off, len(dyn), len(dyn), 8
        )
    else:
        header = struct.pack(
            end + "HHIIIIIHHHHHH", 3, 3, 1, 0, ehsize, 0, 0, ehsize, phentsize, phnum, 40, 0, 0
        )
        load = struct.pack(end + "IIIIIIII", 1, 0, BASE, BASE, total, total, 5, 0x1000)
        dyn_ph = struct.pack(
            end + "IIIIIIII", 2, dyn_off, BASE + dyn_off, BASE + dyn_off, len(dyn), len(dyn), 6, 4
        )
    body = ident + header + load + (dyn_ph if dynamic else b"")
    body = body.ljust(str_off, b"\0") + strtab
    return body.ljust(dyn_off, b"\0") + dyn


def parse_bytes(data: bytes) -> ElfDynamic:
    return parse_dynamic(lambda offset, size: data[offset : offset + size])


@pytest.mark.parametrize(("bits", "little"), [(64, True), (64, False), (32, True), (32, False)])
def test_crafted_objects_of_each_class_and_byte_order(bits: int, little: bool) -> None:
    data = build_elf(
        ["libiomp5.so", "libc.so.6"], "libfake.so.1", "$ORIGIN", bits=bits, little=little
    )
    got = parse_bytes(data)
    assert got.needed == ("libiomp5.so", "libc.so.6")
    assert got.soname == "libfake.so.1"
    assert got.runpath == "$ORIGIN"
    assert got.machine == (62 if bits == 64 else 3)


def test_an_object_without_a_dynamic_segment_needs_nothing() -> None:
    assert parse_bytes(build_elf(["libc.so.6"], dynamic=False)).needed == ()


def test_read_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "libx.so"
    path.write_bytes(build_elf(["libgomp.so.1"]))
    assert read_needed(path) == ("libgomp.so.1",)


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda d: b"\x7fELG" + d[4:], "bad magic"),
        (lambda d: b"", "bad magic"),
        (lambda d: d[:4] + b"\x03" + d[5:], "unknown ELF class"),
        (lambda d: d[:30], "truncated: file header"),
        (lambda d: d[:70], "truncated: program header table"),
        # e_phnum (offset 56 in ELF64) absurdly large
        (lambda d: d[:56] + struct.pack("<H", 4000) + d[58:], "truncated: program header"),
        # p_filesz of PT_LOAD (offset 64 + 32) set to 1: DT_STRTAB then lies in no segment
        (lambda d: d[:96] + struct.pack("<Q", 1) + d[104:], "no PT_LOAD segment"),
        # DT_STRSZ shrunk to 1: the first DT_NEEDED offset lies past it
        (
            lambda d: d.replace(struct.pack("<qQ", 10, 23), struct.pack("<qQ", 10, 1)),
            "past DT_STRSZ",
        ),
    ],
)
def test_corrupt_objects_raise_elf_error_naming_the_problem(mangle, message) -> None:  # type: ignore[no-untyped-def]
    data = build_elf(["libiomp5.so", "libc.so.6"])  # .dynstr: "\0libiomp5.so\0libc.so.6\0" = 23
    with pytest.raises(ElfError, match=message):
        parse_bytes(mangle(data))


def test_an_unterminated_name_is_an_error() -> None:
    data = build_elf(["libiomp5.so"])
    strtab = data.index(b"libiomp5.so")
    with pytest.raises(ElfError, match="unterminated"):
        parse_bytes(data[:strtab] + b"x" * 12 + data[strtab + 12 :])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_corruption_ends_as_elf_error_or_a_result(data: st.DataObject) -> None:
    bits = data.draw(st.sampled_from([32, 64]))
    blob = bytearray(build_elf(["libiomp5.so", "libc.so.6"], "libz.so", bits=bits))
    for _ in range(data.draw(st.integers(1, 8))):
        blob[data.draw(st.integers(0, len(blob) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(blob)))
    with contextlib.suppress(ElfError):  # any other exception fails the test
        parse_bytes(bytes(blob[:cut]))


def test_a_runpath_of_twenty_kilobytes_is_read_whole() -> None:
    """tensorflow 2.21.0's CUDA wheel: libtensorflow_framework.so.2's RUNPATH lists
    $ORIGIN/../nvidia/*/lib for every CUDA library, 20,297 bytes (readelf -d, kept in
    tests/data/tf_wheels); a 4 kB cap on names once made the whole object unreadable."""
    spec = json.loads((WHEEL_DATA / "objects.json").read_text())
    entries = spec["objects"]["tensorflow/libtensorflow_framework.so.2"]
    assert len(entries["runpath"]) == 20_297
    reads: list[int] = []

    def read_at(offset: int, size: int) -> bytes:
        reads.append(size)
        return data[offset : offset + size]

    data = build_elf(entries["needed"], entries["soname"], entries["runpath"])
    got = parse_dynamic(read_at)
    assert (got.needed, got.runpath) == (tuple(entries["needed"]), entries["runpath"])
    assert len(reads) < 40  # names are read in growing chunks, not 80 reads of 256 bytes


def _readelf_dynamic(path: Path) -> ElfDynamic:
    out = subprocess.run(
        ["readelf", "-d", "-W", str(path)], capture_output=True, text=True, check=True
    ).stdout
    so = re.findall(r"\(SONAME\)\s+Library soname: \[(.*?)\]", out)
    run = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*?)\]", out)
    return ElfDynamic(
        needed=tuple(re.findall(r"\(NEEDED\)\s+Shared library: \[(.*?)\]", out)),
        soname=so[0] if so else None,
        runpath=run[0] if run else None,
    )


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) on this machine")
def test_objects_built_by_the_system_compiler(tmp_path: Path) -> None:
    (tmp_path / "omp.c").write_text("int omp_stub(void) { return 1; }\n")
    (tmp_path / "user.c").write_text("int omp_stub(void);\nint f(void) { return omp_stub(); }\n")
    cc = ["cc", "-shared", "-fPIC"]
    subprocess.run([*cc, "-o", tmp_path / "libiomp5.so", tmp_path / "omp.c"], check=True)
    subprocess.run(
        [
            *cc,
            "-o",
            tmp_path / "libuser.so",
            tmp_path / "user.c",
            "-Wl,-soname,libuser.so.1",
            "-Wl,--no-as-needed",
            f"-L{tmp_path}",
            "-liomp5",
            "-Wl,-rpath,$ORIGIN",
        ],
        check=True,
    )
    got = read_dynamic(tmp_path / "libuser.so")
    assert "libiomp5.so" in got.needed
    assert got.soname == "libuser.so.1"
    assert got.runpath == "$ORIGIN"
    if shutil.which("readelf"):
        assert got._replace(machine=None) == _readelf_dynamic(tmp_path / "libuser.so")


def _tensorflow_objects() -> list[Path]:
    import importlib.util

    spec = importlib.util.find_spec("tensorflow")  # finds, does not import
    if spec is None or not spec.submodule_search_locations:
        return []
    package = Path(next(iter(spec.submodule_search_locations)))
    return sorted(p for p in package.rglob("*.so*") if p.is_file())[:60]


@pytest.mark.tf
@pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf (binutils) not installed")
def test_tensorflows_own_objects_read_as_readelf_reads_them() -> None:
    objects = _tensorflow_objects()
    if not objects:
        pytest.skip("TensorFlow is not installed in this interpreter")
    for path in objects:
        got = read_dynamic(path)
        want = _readelf_dynamic(path)
        assert got._replace(machine=None) == want, path
