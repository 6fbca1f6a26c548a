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


def _plan_from(hardware: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`hwtune plan --hardware FILE` in a child with a time limit: a FIFO hung the old code."""
    return subprocess.run(
        [sys.executable, "-m", "hwtune", "plan", "--hardware", str(hardware)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_environ(tmp_path),
    )


def test_a_deeply_nested_hardware_file_is_one_line_error(tmp_path: Path) -> None:
    """Before: a RecursionError traceback from json's scanner."""
    hardware = tmp_path / "hw.json"
    hardware.write_text("[" * 100_000 + "]" * 100_000)
    result = _plan_from(hardware, tmp_path)
    assert result.returncode == 1
    _one_line_error(result.stderr, hardware)
    assert "nested more than 16 levels deep" in result.stderr


def test_a_hardware_file_with_a_huge_number_is_one_line_error(tmp_path: Path) -> None:
    """Before: a ValueError traceback (int() refuses more than 4300 digits)."""
    hardware = tmp_path / "hw.json"
    text = json.dumps(dump(make_hardware()))
    hardware.write_text(text.replace('"family": null', '"family": ' + "9" * 5000))
    assert "9" * 5000 in hardware.read_text()
    result = _plan_from(hardware, tmp_path)
    assert result.returncode == 1
    _one_line_error(result.stderr, hardware)
    assert "invalid JSON: a number of 5000 digits" in result.stderr


@pytest.mark.parametrize("text", ["{}", '{"schema_version": 1}', '{"issues": []}'])
def test_a_hardware_file_without_the_sections_detect_writes_is_refused(
    text: str, tmp_path: Path
) -> None:
    """Before: the model's defaults filled them in, and `{}` was planned (and applied) as a
    one-CPU machine with nothing known, exit 0 even with --strict."""
    hardware = tmp_path / "hw.json"
    hardware.write_text(text)
    result = _plan_from(hardware, tmp_path)
    assert result.returncode == 1
    _one_line_error(result.stderr, hardware)
    assert "not a hardware model: no " in result.stderr
    assert "cpu, limits, memory" in result.stderr


def test_a_hardware_model_can_come_through_a_pipe(tmp_path: Path) -> None:
    """`detect --json | plan --hardware -` and a named pipe (what `<(...)` gives) are read to
    their end, as cat would; an endless pipe is cut off at the cap, not read without end."""
    model = json.dumps(dump(make_hardware()))
    piped = subprocess.run(
        [sys.executable, "-m", "hwtune", "plan", "--json", "--hardware", "-"],
        input=model,
        capture_output=True,
        text=True,
        timeout=60,
        env=_environ(tmp_path),
    )
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["env"], piped.stdout
    fifo = tmp_path / "hw.fifo"
    os.mkfifo(fifo)
    # The writer opens the pipe after the reader has started, as bash's <(...) may.
    writer = subprocess.Popen(["sh", "-c", f"sleep 0.3; cat > '{fifo}'"], stdin=subprocess.PIPE)
    assert writer.stdin is not None
    writer.stdin.write(model.encode())
    writer.stdin.close()
    named = _plan_from(fifo, tmp_path)
    writer.wait(timeout=30)
    assert named.returncode == 0, named.stderr
    assert "TF_NUM_INTEROP_THREADS" in named.stdout
    endless = subprocess.run(
        f"head -c {40 << 20} /dev/zero | {sys.executable} -m hwtune plan --hardware -",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        env=_environ(tmp_path),
    )
    assert endless.returncode == 1
    assert f"--hardware -: larger than {32 << 20} bytes; not read" in endless.stderr


@pytest.mark.parametrize("kind", ["device", "directory", "oversized"])
def test_a_hardware_file_that_is_no_regular_file_of_a_model_is_refused(
    kind: str, tmp_path: Path
) -> None:
    """Before: /dev/zero was read without end."""
    hardware = tmp_path / "hw.json"
    if kind == "device":
        hardware = Path("/dev/zero")
    elif kind == "directory":
        hardware.mkdir()
    else:
        with hardware.open("wb") as sparse:  # no disk blocks: only st_size is past the cap
            sparse.truncate(33 << 20)
    result = _plan_from(hardware, tmp_path)
    assert result.returncode == 1
    _one_line_error(result.stderr, hardware)
    said = {
        "device": "a character device, not a regular file",
        "directory": "a directory, not a regular file",
        "oversized": f"larger than {32 << 20} bytes",
    }
    assert f"--hardware {hardware}: {said[kind]}" in result.stderr


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


# -- item 9: thread counts and the environment's size -------------------------------------


def test_a_thread_count_beyond_any_machine_is_refused(tmp_path: Path) -> None:
    """Before: intra_op = 2**63-1 was applied, and TensorFlow then refused tf_config.pbtxt."""
    hw = _hardware(tmp_path)
    config = _config(tmp_path, "[threads]\nintra_op = 9223372036854775807\n")
    result = run_cli(["plan", "--hardware", hw], _environ(tmp_path))
    assert result.exit_status == 1
    assert f"{config}: 'threads.intra_op'" in result.stderr
    assert "above the maximum 65536" in result.stderr
    config.unlink()
    for name in ("HWTUNE_INTRA_OP", "HWTUNE_INTER_OP", "HWTUNE_INSTANCES"):
        result = run_cli(["plan", "--hardware", hw], _environ(tmp_path, **{name: str(2**63 - 1)}))
        assert result.exit_status == 1 and f"{name}=" in result.stderr, result.stderr
        assert "expected a whole number from 1 to 65536" in result.stderr
    flag = run_cli(["plan", "--hardware", hw, "--instances", str(2**40)], _environ(tmp_path))
    # A flag is usage: exit 2 with the subcommand's own usage (issue 12).
    assert flag.exit_status == 2 and "expected a whole number from 1 to 65536" in flag.stderr
    fits = run_cli(["plan", "--hardware", hw, "--json"], _environ(tmp_path, HWTUNE_INTRA_OP="3"))
    assert fits.exit_status == 0
    assert json.loads(fits.stdout)["threads"]["intra_op"]["value"] == 3


def test_a_value_execve_cannot_pass_is_refused(tmp_path: Path) -> None:
    """MAX_ARG_STRLEN is 128 KiB per NAME=value string: such a variable starts no process."""
    hw = _hardware(tmp_path)
    huge = "x" * (128 * 1024)
    result = run_cli(["plan", "--hardware", hw, "--set", f"BIG={huge}"], _environ(tmp_path))
    assert result.exit_status == 2  # a bad --set is bad usage
    assert "execve(2) takes at most 131072 bytes per variable" in result.stderr
    # The largest value that fits still starts a process with it.
    fits = "x" * (128 * 1024 - len("BIG=") - 1)
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(len(os.environ['BIG']))"],
        env={**os.environ, "BIG": fits},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == str(len(fits))
    ok = run_cli(["plan", "--hardware", hw, "--set", f"BIG={fits}"], _environ(tmp_path))
    assert ok.exit_status == 0, ok.stderr[-500:]


@pytest.mark.parametrize("command", ["plan", "explain", "apply", "env", "verify", "tune"])
def test_a_set_value_that_is_not_utf8_is_a_usage_error(command: str, tmp_path: Path) -> None:
    """Before: `plan --json` printed the raw byte (invalid JSON) with exit 0; apply and env
    failed with "surrogates not allowed", naming neither --set nor the variable."""
    value = os.fsdecode(b"A=a\xffb")  # what Python makes of those argv bytes (PEP 383)
    argv = [command, "--hardware", _hardware(tmp_path), "--set", value]
    result = run_cli(argv, _environ(tmp_path))
    assert result.exit_status == 2, result.stderr
    assert "--set A: the value of A is not UTF-8 text: byte 0xff at position 1" in result.stderr
    name = run_cli([command, "--set", os.fsdecode(b"A\xffB=1")], _environ(tmp_path))
    assert name.exit_status == 2 and "is not an environment variable name" in name.stderr


def test_exec_passes_a_set_value_that_is_not_utf8_on_as_bytes(tmp_path: Path) -> None:
    """exec writes no text: the value reaches the program's environment byte for byte."""
    argv = [b"exec", b"--set", b"A=a\xffb", b"--no-pin", b"--", b"printenv", b"A"]
    done = subprocess.run(
        [sys.executable.encode(), b"-m", b"hwtune", *argv],
        capture_output=True,
        timeout=120,
        env=_environ(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout == b"a\xffb\n"


def test_a_set_value_of_argv_bytes_that_are_not_utf8_is_refused(tmp_path: Path) -> None:
    """The same from a real command line: the bytes as a shell passes them."""
    done = subprocess.run(
        [sys.executable.encode(), b"-m", b"hwtune", b"plan", b"--json", b"--set", b"A=a\xffb"],
        capture_output=True,
        timeout=120,
        env=_environ(tmp_path),
    )
    assert done.returncode == 2 and done.stdout == b"", done.stdout[-500:]
    assert b"argument --set: --set A: the value of A is not UTF-8 text" in done.stderr
    utf8 = subprocess.run(
        [sys.executable, "-m", "hwtune", "plan", "--json", "--set", "A=\u00e9"],
        capture_output=True,
        timeout=120,
        env=_environ(tmp_path),
    )
    assert utf8.returncode == 0, utf8.stderr[-500:]
    assert json.loads(utf8.stdout)["env"]["A"]["value"] == "\u00e9"


def test_an_environment_past_arg_max_is_refused(tmp_path: Path) -> None:
    arg_max = os.sysconf("SC_ARG_MAX")
    value = "v" * (100 * 1024)
    sets = [f"--set=V{i}={value}" for i in range(arg_max // len(value) + 2)]
    result = run_cli(["plan", "--hardware", _hardware(tmp_path), *sets], _environ(tmp_path))
    assert result.exit_status == 1
    assert f"execve(2) takes at most {arg_max} (ARG_MAX)" in result.stderr
    with pytest.raises(OSError) as e2big:  # what every exec of the job would have met
        subprocess.run(["true"], env={f"V{i}": value for i in range(len(sets))}, check=False)
    assert e2big.value.errno == 7  # E2BIG


# -- item 13: names, digits, the daemon's interval, the journal ---------------------------


@pytest.mark.parametrize(
    "name", ["UID", "EUID", "PPID", "SHELLOPTS", "BASHOPTS", "BASH_VERSINFO", "GROUPS"]
)
def test_shell_owned_names_are_refused(name: str, tmp_path: Path) -> None:
    hw = _hardware(tmp_path)
    result = run_cli(["plan", "--hardware", hw, "--set", f"{name}=1"], _environ(tmp_path))
    assert result.exit_status == 2  # a bad --set is bad usage
    assert f"{name} belongs to the shell" in result.stderr
    config = _config(tmp_path, f"[env]\n{name} = '1'\n")
    from_file = run_cli(["plan", "--hardware", hw], _environ(tmp_path))
    assert from_file.exit_status == 1 and f"{config}: '[env].{name}'" in from_file.stderr


def test_a_readonly_name_would_break_sourcing_the_profile() -> None:
    """Why UID and friends are refused: `. hwtune.sh` with `export UID=…` fails in bash."""
    done = subprocess.run(
        ["bash", "-c", "export UID='1' && echo reached"], capture_output=True, text=True
    )
    assert "readonly variable" in done.stderr and "reached" not in done.stdout


@pytest.mark.parametrize("name", ["HWTUNE_MODE", "HWTUNE_KNOWLEDGE_DIR", "HWTUNE_ANYTHING"])
def test_hwtune_names_are_refused_in_env_and_set(name: str, tmp_path: Path) -> None:
    hw = _hardware(tmp_path)
    result = run_cli(["plan", "--hardware", hw, "--set", f"{name}=bogus"], _environ(tmp_path))
    assert result.exit_status == 2 and f"{name} steers hwtune itself" in result.stderr
    config = _config(tmp_path, f"[env]\n{name} = 'bogus'\n")
    from_file = run_cli(["plan", "--hardware", hw], _environ(tmp_path))
    assert from_file.exit_status == 1 and f"{config}: '[env].{name}'" in from_file.stderr


@pytest.mark.parametrize("digits", ["٢", "²", "２", "+2", "1_0"])
def test_counts_are_ascii_digits(
    digits: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hw = _hardware(tmp_path)
    flag = run_cli(["plan", "--hardware", hw, "--instances", digits], _environ(tmp_path))
    assert flag.exit_status == 2  # bad usage, as argparse reports it
    for command in ("env", "apply", "exec", "tune"):
        capsys.readouterr()
        other = run_cli([command, "--instances", digits, "--", "true"], _environ(tmp_path))
        said = other.stderr  # the subcommand's own usage, on its own stream
        assert other.exit_status == 2 and "argument --instances:" in said, said
        assert "expected a whole number" in said, said
    variable = run_cli(["plan", "--hardware", hw], _environ(tmp_path, HWTUNE_INSTANCES=digits))
    assert variable.exit_status == 1 and "expected a whole number" in variable.stderr


def test_ascii_int_parsing() -> None:
    from hwtune.models.digits import parse_ascii_int

    assert parse_ascii_int(" 12\n") == 12 and parse_ascii_int("-3") == -3
    for text in ("٢", "1٢", "", "-", "+1", "1_000", "0x10", "1.0", "- 1"):
        with pytest.raises(ValueError):
            parse_ascii_int(text)


@pytest.mark.parametrize("interval", ["1e-300", "0.01", "5e-324"])
def test_the_daemon_interval_has_a_floor(interval: str, tmp_path: Path) -> None:
    """Before: --interval 1e-300 was taken and the loop kept a core 98% busy. A child with a
    private output directory and a time limit: on the old code it ran until killed."""
    argv = ["daemon", "--root", "/", "--output", str(tmp_path), "--interval", interval]
    done = subprocess.run(
        [sys.executable, "-m", "hwtune", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=_environ(tmp_path),
    )
    assert done.returncode == 1
    # the value as typed (repr), not `:g`'s 4.94066e-324 for 5e-324
    assert f"--interval {interval}: must be a number of seconds from 0.1" in done.stderr


@pytest.mark.parametrize("text", ['"false"', '"true"', "0", "1", "null", "[]"])
def test_a_journal_manifest_complete_flag_is_a_json_bool(text: str, tmp_path: Path) -> None:
    """Before: bool("false") is True, so an incomplete entry read as complete and was never
    rolled back."""
    from hwtune.apply import journal
    from hwtune.errors import ApplyError

    entry = tmp_path / journal.JOURNAL_DIR / "1-1"
    entry.mkdir(parents=True)
    manifest = {"id": "1-1", "created": "x", "hwtune": "0", "files": []}
    (entry / journal.MANIFEST).write_text(json.dumps(manifest)[:-1] + f', "complete": {text}}}')
    with pytest.raises(ApplyError, match=r"'complete' is .* not true or false"):
        journal.load(tmp_path, "1-1")
    (entry / journal.MANIFEST).write_text(json.dumps({**manifest, "complete": False}))
    assert journal.load(tmp_path, "1-1").complete is False


SECONDS_FLAGS = [
    ("apply", "--lock-timeout"),
    ("daemon", "--interval"),
    ("doctor", "--seconds"),
    ("doctor", "--warmup"),
    ("exec", "--kill-after"),
    ("nfd", "--ttl"),
    ("revert", "--lock-timeout"),
    ("tune", "--budget"),
    ("tune", "--seconds"),
    ("verify", "--wait"),
]
RANGED_FLAGS = [("daemon", "--interval"), ("nfd", "--ttl")]  # numbers.seconds_in


@pytest.mark.parametrize(("command", "flag"), SECONDS_FLAGS)
@pytest.mark.parametrize("text", ["nan", "inf", "1e400", "٣", "-1", "1_0", "0x10", ""])
def test_a_duration_flag_takes_finite_ascii_seconds_only(
    command: str, flag: str, text: str
) -> None:
    """float() takes all of these; NaN then passed every `> 0` check into time.sleep().
    A flag with a range takes any finite number and checks the range in the command: -1 is
    out of range there (exit 1), as 59.9 is for --ttl, not a usage error."""
    result = run_cli([command, f"{flag}={text}"])
    if text == "-1" and (command, flag) in RANGED_FLAGS:
        assert result.exit_status == 1, result.stderr
        assert f"{flag} -1: must be a number of seconds from" in result.stderr
        return
    assert result.exit_status == 2, result.stderr
    assert f"{flag}: expected a number of seconds" in result.stderr and repr(text) in result.stderr


@pytest.mark.parametrize("text", ["2", "0.5", " 1e3 ", ".5", "3."])
def test_a_duration_flag_takes_plain_numbers(text: str) -> None:
    from hwtune.commands.numbers import seconds

    assert seconds(text) == float(text)


@pytest.mark.parametrize(
    ("command", "flag"), [("tune", "--seed"), ("verify", "--pid"), ("doctor", "--pid")]
)
def test_an_integer_flag_takes_ascii_digits_only(command: str, flag: str) -> None:
    result = run_cli([command, f"{flag}=٣"])
    assert result.exit_status == 2
    assert "expected a whole number in ASCII digits, got '٣'" in result.stderr


@pytest.mark.parametrize("command", ["verify", "doctor"])
@pytest.mark.parametrize("text", ["-5", "0", "-0", "-99999999999999999999"])
def test_a_pid_flag_takes_a_process_id_only(command: str, text: str) -> None:
    """Before: `verify --pid -5` ended in psutil's ValueError traceback."""
    result = run_cli([command, f"--pid={text}"])
    assert result.exit_status == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert (
        f"argument --pid: expected a process id, a whole number from 1 up, got {text!r}"
        in result.stderr
    )


# -- empty paths: an explicit "" is no path, never the default ----------------------------

# The other arguments keep a regression harmless: were "" taken again, apply only previews,
# daemon, nfd and doctor stop at a bad --interval, --ttl or --seconds before they write or
# watch anything, exec starts children (one instance would execve over the test process), and
# the rest run in a temporary directory with the default output there.
EMPTY_PATHS = [
    ("plan", ["--root", ""], "--root"),
    ("plan", ["--hardware", ""], "--hardware"),
    ("explain", ["KMP_AFFINITY", "--hardware="], "--hardware"),
    ("apply", ["--output", "", "--dry-run"], "--output"),
    ("apply", ["--root=", "--dry-run"], "--root"),
    ("env", ["--hardware", ""], "--hardware"),
    ("exec", ["--root", "", "--instances", "2", "--", "true"], "--root"),
    ("verify", ["--hardware", ""], "--hardware"),
    ("tune", ["--root", "", "--dry-run"], "--root"),
    ("revert", ["--output", ""], "--output"),
    ("daemon", ["--output", "", "--interval", "0"], "--output"),
    ("daemon", ["--root", "", "--interval", "0"], "--root"),
    ("daemon", ["--nfd", "--nfd-dir", "", "--interval", "0"], "--nfd-dir"),
    ("nfd", ["--output", "", "--ttl", "0"], "--output"),
    ("nfd", ["--root", "", "--print"], "--root"),
    ("detect", ["--root", ""], "--root"),
    ("doctor", ["--root", "", "--pid", "1", "--seconds", "0"], "--root"),
    ("snapshot", [""], "DIR"),
]


@pytest.mark.parametrize(("command", "argv", "option"), EMPTY_PATHS)
def test_an_empty_path_is_a_usage_error(
    command: str, argv: list[str], option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: `apply --output ""` wrote to the default directory (/etc/hwtune as root),
    `revert --output ""` reverted it, `plan --hardware ""` planned for this machine and
    `snapshot ""` wrote into the current directory."""
    default = tmp_path / "default"
    monkeypatch.setattr("hwtune.paths.default_output_dir", lambda *_, **__: default)
    monkeypatch.chdir(tmp_path)
    result = run_cli([command, *argv], _environ(tmp_path))
    assert result.exit_status == 2, result.stderr
    assert f"argument {option}: expected a path, got an empty string" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written anywhere


def test_every_path_option_refuses_an_empty_path() -> None:
    """Each option or argument whose metavar names a file or directory takes nonempty_path,
    so that a new one cannot bring back the silent default."""
    import argparse

    from hwtune.cli import COMMANDS, build_parser
    from hwtune.commands.pathargs import nonempty_path

    seen = set()
    for command in COMMANDS:
        parser = build_parser(only=command)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for action in sub.choices[command]._actions:
            if action.metavar in ("DIR", "FILE"):
                name = action.option_strings[0] if action.option_strings else action.metavar
                seen.add(f"{command} {name}")
                assert action.type is nonempty_path, f"{command} {name}"
    assert {f"{command} {option}" for command, _, option in EMPTY_PATHS} <= seen
