"""Every user input is bounded before it is parsed or used (issue 15, items 7, 8, 9, 13).

Config files and knowledge files nested too deeply, too large or with keys of too many parts are
one-line errors naming the file (never a RecursionError traceback, never gigabytes of memory);
thread counts and environments stay within what the kernel and execve(2) take; names a shell
cannot set, or that would re-steer hwtune itself, are refused; numbers are ASCII.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from hwtune.models.convert import dump
from tests.conftest import run_cli
from tests.plan_builders import make_hardware


def _environ(tmp_path: Path, **extra: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "XDG_"))}
    environ.update(XDG_CONFIG_HOME=str(tmp_path / "xdg"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    environ.update(extra)
    return environ


def _hardware(tmp_path: Path) -> str:
    path = tmp_path / "hw.json"
    path.write_text(json.dumps(dump(make_hardware())))
    return str(path)


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "xdg" / "hwtune" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _one_line_error(stderr: str, path: Path) -> None:
    assert "Traceback" not in stderr, stderr[-2000:]
    lines = [line for line in stderr.splitlines() if not line.startswith("hint:")]
    assert len(lines) == 1 and str(path) in lines[0], stderr[-2000:]


# -- item 7: recursion -------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "x = " + "[" * 5000 + "]" * 5000 + "\n",  # 10 KB of nested arrays
        "x = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n",  # nested inline tables
    ],
    ids=["arrays", "inline-tables"],
)
def test_a_deeply_nested_config_is_one_line_error(text: str, tmp_path: Path) -> None:
    config = _config(tmp_path, text)
    result = run_cli(["plan", "--hardware", _hardware(tmp_path)], _environ(tmp_path))
    assert result.exit_status == 1
    _one_line_error(result.stderr, config)
    assert "nested more than" in result.stderr


def _plan_in_a_process(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    """`hwtune plan` in a fresh process: loaded knowledge tables are cached per process."""
    return subprocess.run(
        [sys.executable, "-m", "hwtune", "plan", "--hardware", _hardware(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_environ(tmp_path, **extra),
    )


def test_a_deeply_nested_knowledge_file_is_one_line_error(tmp_path: Path) -> None:
    knowledge = tmp_path / "knowledge"
    knowledge.mkdir()
    table = knowledge / "tensorflow_versions.json"
    table.write_text("[" * 200_000)
    result = _plan_in_a_process(tmp_path, HWTUNE_KNOWLEDGE_DIR=str(knowledge))
    assert result.returncode == 1
    _one_line_error(result.stderr, table)
    assert "nested more than" in result.stderr


# -- item 8: size and key depth before parsing --------------------------------------------


def _parse_in_a_small_process(text: str) -> subprocess.CompletedProcess[str]:
    """parse_config_text in a child limited to 1 GiB of address space: the quadratic key used
    to take 1.6 GB (a MemoryError there, not a thrashing test machine)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    code = (
        "import sys\n"
        "from hwtune.errors import ConfigError\n"
        "from hwtune.pipeline.config import parse_config_text\n"
        "try:\n"
        "    parse_config_text(sys.stdin.read(), 'config.toml')\n"
        "except ConfigError as err:\n"
        "    print(err.message)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        input=text,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
    )


def test_a_dotted_key_of_many_parts_is_refused_before_parsing() -> None:
    key = ".".join(["a"] * 20_000)  # 40 KB
    done = _parse_in_a_small_process(f"{key} = 1\n")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "config.toml: line 1: a key of more than 16 dotted parts" in done.stdout


def test_a_table_header_of_many_parts_is_refused() -> None:
    done = _parse_in_a_small_process("[" + ".".join(["t"] * 20_000) + "]\n")
    assert "a key of more than 16 dotted parts" in done.stdout, done.stderr[-2000:]


def test_dots_in_strings_and_comments_are_not_key_parts(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        "# a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t\n"
        'tf_version = "2.19"\n'
        "[env]\n"
        'XLA_FLAGS = "' + "." * 100 + '"\n'
        "LIST = '''\n[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n'''\n",
    )
    result = run_cli(["plan", "--hardware", _hardware(tmp_path), "--json"], _environ(tmp_path))
    assert result.exit_status == 0, result.stderr
    assert config.is_file()


def test_an_oversized_config_is_refused(tmp_path: Path) -> None:
    config = _config(tmp_path, "# padding\n" * 30_000)  # 300 KB
    result = run_cli(["plan", "--hardware", _hardware(tmp_path)], _environ(tmp_path))
    assert result.exit_status == 1
    _one_line_error(result.stderr, config)
    assert "larger than 262144 bytes" in result.stderr


def test_an_oversized_knowledge_file_is_refused(tmp_path: Path) -> None:
    knowledge = tmp_path / "knowledge"
    knowledge.mkdir()
    table = knowledge / "tensorflow_versions.json"
    table.write_text('{"entries": [], "_doc": "' + "x" * (2 << 20) + '"}')
    result = _plan_in_a_process(tmp_path, HWTUNE_KNOWLEDGE_DIR=str(knowledge))
    assert result.returncode == 1
    _one_line_error(result.stderr, table)
    assert "larger than 1048576 bytes" in result.stderr
