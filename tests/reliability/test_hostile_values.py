"""Hostile values: override values that try to become commands or to break the file formats.

Each value goes in through `--set NAME=VALUE` (and, where argv cannot carry it, through
the TOML config or the process environment) and must come out either byte-for-byte equal, read
back the way each format's real reader reads it (bash and dash `source` the sh and systemd
files; docker's --env-file takes the line verbatim; JSON), or be refused with a clear message
and a non-zero exit, the previous files intact. A canary command in many of the values
(`$(touch CANARY)`, backticks, `;`, `&&`, newlines) must never run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli

from .conftest import Figures
from .test_writes import base_environ, outputs

NAME = "X_HOSTILE"
SHELLS = [s for s in ("bash", "dash") if shutil.which(s)]
DOCKER_LINE_LIMIT = 64 * 1024 - 1  # render.DOCKER_MAX_LINE_BYTES: bufio.MaxScanTokenSize - 1


def hostile_values(canary: Path) -> dict[str, str]:
    c = str(canary)
    return {
        "single quotes": "it's 'quoted'",
        "double quotes": 'say "hi" \\"there\\"',
        "wrapped in single quotes": "'wrapped'",
        "wrapped in double quotes": '"wrapped"',
        "command substitution": f"$(touch {c})",
        "backticks": f"`touch {c}`",
        "escaped substitution": f"\\$(touch {c}) \\`touch {c}\\`",
        "variables": "${HOME} $PATH $0 $$ ${X:-$(touch " + c + ")}",
        "backslashes": "a\\b\\\\c\\n\\t",
        "trailing backslash": "end\\",
        "newline": "line1\nline2\n",
        "newline then command": f"x\ntouch {c}\n",
        "carriage return": "a\r\nb\r",
        "list operators": f"x; touch {c} && touch {c} || touch {c} | touch {c} & touch {c}",
        "comment and quote mix": f"# not a comment ' \" ` $ ; touch {c}",
        "globs and tilde": "* ~ ? [a-z] ~root",
        "systemd specifiers": "%h %u %% %n",
        "equals signs": "a=b=c==",
        "leading dash": "-e -n",
        "unicode": "héllo ✓ 😀 \u202eevil\u202c \u00a0",
        "spaces and tabs": "  \t spaced \t ",
        "empty": "",
        "very long": "x" * 100_000,
        # over docker's 64 KiB line, under the 128 KiB a single argv string may have
        "very long hostile": (f"$(touch {c})'\"\\`" * 1_200)[:100_000],
        "NUL byte": "a\0b",
        "non-UTF-8 bytes": b"\xff\xfe caf\xe9".decode("utf-8", "surrogateescape"),
    }


def formats_that_hold(value: str) -> set[str]:
    """Where each value must round-trip exactly; elsewhere it must be refused."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return set()  # not text: hwtune writes text files; refused everywhere
    if "\0" in value:
        return set()  # no environment can hold a NUL (execve strings end at it)
    held = {"sh", "json"}
    # systemd before v248 drops a value with a control character but tab and newline
    if not re.search(r"[\x01-\x08\x0b-\x1f\x7f]", value):
        held.add("systemd")
    dotenv_ok = (
        "\n" not in value
        and "\r" not in value
        and not (len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"")
        and len(f"{NAME}={value}".encode()) <= DOCKER_LINE_LIMIT
    )
    return held | ({"dotenv"} if dotenv_ok else set())


def read_back_in_shell(shell: str, text: str, tmp_path: Path) -> bytes:
    """Source `text` in `shell` (with `set -a`, as one sources an EnvironmentFile) and print
    the variable's bytes exactly."""
    env_file = tmp_path / "sourced.env"
    env_file.write_text(text, encoding="utf-8")
    done = subprocess.run(
        [shell, "-c", f'set -a; . "$1"; printf %s "${NAME}"', shell, str(env_file)],
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
        env={"PATH": os.environ["PATH"]},
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


def read_back(fmt: str, text: str, shell: str | None, tmp_path: Path) -> bytes:
    if fmt == "json":
        return str(json.loads(text)[NAME]).encode()
    if fmt == "dotenv":  # docker/cli kvfile: one line per variable, the value verbatim
        lines = [line for line in text.split("\n") if line.startswith(f"{NAME}=")]
        assert len(lines) == 1, lines
        return lines[0].split("=", 1)[1].encode()
    assert shell is not None
    return read_back_in_shell(shell, text, tmp_path)


@pytest.mark.parametrize("fmt", ["sh", "systemd", "dotenv", "json"])
def test_env_formats_hold_or_refuse(
    fmt: str, machine_snapshot: Path, tmp_path: Path, figures: Figures
) -> None:
    """`hwtune env --format FMT --set X=VALUE` for every hostile value."""
    canary = tmp_path / "CANARY"
    environ = base_environ(tmp_path)
    for label, value in hostile_values(canary).items():
        result = run_cli(
            ["env", "--format", fmt, "--root", str(machine_snapshot), "--set", f"{NAME}={value}"],
            environ,
        )
        figures.count("values tried")
        if fmt not in formats_that_hold(value):
            # 2 where --set itself refuses it (a NUL: no format holds it), 1 where the format does
            assert result.exit_status in (1, 2), f"{label}: {fmt} accepted a value it cannot hold"
            assert "error:" in result.stderr and NAME in result.stderr, result.stderr
            figures.count("refused with a clear message")
            continue
        assert result.exit_status == 0, f"{label}: {result.stderr}"
        expected = value.encode("utf-8")
        for shell in SHELLS if fmt in ("sh", "systemd") else [None]:
            got = read_back(fmt, result.stdout, shell, tmp_path)
            assert got == expected, f"{label}: {fmt} read back by {shell or 'its reader'} differs"
            figures.count(f"round-trip exact ({shell or fmt})")
        assert not canary.exists(), f"{label}: a command in the value ran"
    figures.note(shells=SHELLS, values=len(hostile_values(canary)))


def test_apply_writes_every_format_or_refuses_keeping_files(
    machine_snapshot: Path, tmp_path: Path, figures: Figures
) -> None:
    """`hwtune apply` (a real process): the values every format holds, all at once, are
    written and read back by bash and dash; each value some format cannot hold is refused
    with a clear message and the files of the previous apply stay as they were."""
    canary = tmp_path / "CANARY"
    environ = base_environ(tmp_path)
    output = tmp_path / "out"
    values = hostile_values(canary)
    everywhere = {
        label: v
        for label, v in values.items()
        if formats_that_hold(v) == {"sh", "systemd", "dotenv", "json"}
    }
    names = {label: f"{NAME}_{i}" for i, label in enumerate(everywhere)}

    def apply(*sets: str) -> subprocess.CompletedProcess[bytes]:
        argv = [
            sys.executable,
            "-m",
            "hwtune",
            "apply",
            "--output",
            str(output),
            "--root",
            str(machine_snapshot),
        ]
        for item in sets:
            argv += ["--set", item]
        return subprocess.run(argv, env=environ, capture_output=True, timeout=120)

    first = apply(*(f"{names[label]}={v}" for label, v in everywhere.items()))
    assert first.returncode == 0, first.stderr.decode()
    from hwtune.apply.render import ENV_FILES

    shell_files = [name for name, fmt in ENV_FILES.items() if fmt in ("sh", "systemd")]
    json_file = next(name for name, fmt in ENV_FILES.items() if fmt == "json")
    assert len(shell_files) == 2
    for fmt_file in shell_files:
        text = (output / fmt_file).read_text()
        for shell in SHELLS:
            script = 'set -a; . "$1"; ' + "; ".join(
                f'printf "%s\\0" "${name}"' for name in names.values()
            )
            done = subprocess.run(
                [shell, "-c", script, shell, str(output / fmt_file)],
                capture_output=True,
                cwd=tmp_path,
                timeout=60,
            )
            assert done.returncode == 0, done.stderr
            got = done.stdout.split(b"\0")[:-1]
            assert got == [v.encode() for v in everywhere.values()], f"{fmt_file} in {shell}"
            figures.count(f"values read back exactly ({fmt_file}, {shell})", len(got))
        assert text
    written = json.loads((output / json_file).read_text())
    assert {names[label]: written.get(names[label]) for label in everywhere} == {
        names[label]: v for label, v in everywhere.items()
    }
    assert not canary.exists(), "a command in a value ran"
    before = outputs(output)
    for label, value in values.items():
        if label in everywhere or "\0" in value:
            continue  # NUL cannot travel in argv; see test_nul_from_the_config_file
        result = apply(f"{NAME}={value}")
        # Bytes that are not UTF-8 are refused where --set is parsed: usage, exit 2.
        status = 2 if label == "non-UTF-8 bytes" else 1
        assert result.returncode == status, f"{label}: apply accepted a value a format cannot hold"
        stderr = result.stderr.decode(errors="replace")
        assert "Traceback" not in stderr and "error:" in stderr and NAME in stderr, stderr
        assert outputs(output) == before, f"{label}: a refused apply changed the files"
        figures.count("refused by apply, previous files intact")
    assert not canary.exists(), "a command in a value ran"


def test_non_utf8_bytes_from_argv_and_environment(
    machine_snapshot: Path, tmp_path: Path, figures: Figures
) -> None:
    """Bytes that are not UTF-8 in argv and in the environment: `hwtune exec` passes them to
    the program exactly (the environment holds bytes); text outputs refuse them clearly, a
    --set value when the command line is parsed (usage, exit 2)."""
    environ = {os.fsencode(k): os.fsencode(v) for k, v in base_environ(tmp_path).items()}
    raw = b"\xff\xfe caf\xe9 $(touch CANARY)"
    hwtune = [sys.executable.encode(), b"-m", b"hwtune"]
    root = [b"--root", os.fsencode(machine_snapshot)]
    done = subprocess.run(
        [*hwtune, b"exec", *root, b"--set", b"X_RAW=" + raw, b"--", b"printenv", b"X_RAW"],
        env=environ,
        capture_output=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == raw + b"\n"
    figures.count("exec: argv bytes reach the program exactly")
    kept = subprocess.run(
        [*hwtune, b"exec", *root, b"--", b"printenv", b"KMP_BLOCKTIME"],
        env={**environ, b"KMP_BLOCKTIME": raw},
        capture_output=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout == raw + b"\n", "the user's own variable was not kept exactly"
    figures.count("exec: the user's own non-UTF-8 variable kept exactly")
    for argv, extra, status in (
        ([b"env", *root, b"--set", b"X_RAW=" + raw], {}, 2),
        (
            [
                b"apply",
                b"--output",
                os.fsencode(tmp_path / "out"),
                *root,
                b"--set",
                b"X_RAW=" + raw,
            ],
            {},
            2,
        ),
        ([b"env", *root], {b"HWTUNE_MODE": b"\xfflatency"}, 1),
        ([b"env", *root], {b"HWTUNE_TF_VERSION": b"2.\xff"}, 1),
    ):
        result = subprocess.run(
            [*hwtune, *argv],
            env={**environ, **extra},
            capture_output=True,
            cwd=tmp_path,
            timeout=120,
        )
        assert result.returncode == status, result
        assert b"Traceback" not in result.stderr and b"error:" in result.stderr, result.stderr
        figures.count("refused with a clear message")
    assert not (tmp_path / "CANARY").exists()


NUL_CONFIG = '[env]\nX_NUL = "a\\u0000b"\n'  # TOML's \u0000 escape: the one way to a NUL


def _nul_config(tmp_path: Path) -> dict[str, str]:
    environ = base_environ(tmp_path)
    config = Path(environ["XDG_CONFIG_HOME"]) / "hwtune"
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text(NUL_CONFIG)
    return environ


@pytest.mark.parametrize("command", ["apply", "env"])
def test_nul_from_the_config_file(
    command: str, machine_snapshot: Path, tmp_path: Path, figures: Figures
) -> None:
    environ = _nul_config(tmp_path)
    argv = [command, "--root", str(machine_snapshot)]
    if command == "apply":
        argv += ["--output", str(tmp_path / "out")]
    result = run_cli(argv, environ)
    assert result.exit_status == 1 and "X_NUL" in result.stderr, result.stderr
    figures.count("refused with a clear message")


def test_nul_from_the_config_file_exec(
    machine_snapshot: Path, tmp_path: Path, figures: Figures
) -> None:
    environ = _nul_config(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "hwtune", "exec", "--root", str(machine_snapshot), "--", "true"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1 and "X_NUL" in done.stderr, done.stderr
    figures.count("refused with a clear message")


def test_nul_from_the_config_file_configure(tmp_path: Path, figures: Figures) -> None:
    environ = _nul_config(tmp_path)
    script = (
        "import warnings, hwtune\nwarnings.simplefilter('ignore')\n"
        "hwtune.configure(tensorflow=False)\nprint('survived')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=environ, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "survived" in done.stdout, done.stderr[-1500:]
    figures.count("configure() did not raise")
