"""User overrides: TOML config files, HWTUNE_* variables and command-line flags, in that order.

Precedence, lowest first: `/etc/hwtune/config.toml`, `$XDG_CONFIG_HOME/hwtune/config.toml`
(`~/.config` when unset), `HWTUNE_*` environment variables, then flags (`--mode`, `--set`…).
An instance index goes with the count it came with: a later source that sets `instances`
without `instance` starts the index over at 0 (`Overrides.merged`), so `--instances 1` is not
paired with the HWTUNE_INSTANCE a parent `hwtune exec` exported.
A config file looks like this; every key is optional:

    mode = "latency"            # throughput | latency | batch (copies whose throughputs add)
    instances = 2
    precision = "auto"          # off | eligible | auto
    model = "dense"             # unknown | dense | conv: what you train (XLA on CPU)
    tf_version = "2.19"         # the TensorFlow a source build is planned for
    workload = "train"          # the `hwtune tune --name` whose measured result applies
    jit = "off"                 # off | autoclustering | on
    data_format = "channels_last"

    [threads]
    intra_op = 8
    inter_op = 1

    [env]                       # add or override a variable of the profile
    TF_CPP_MIN_LOG_LEVEL = "2"

TF_NUM_INTRAOP_THREADS and TF_NUM_INTEROP_THREADS, in `[env]` or `--set`, are the thread counts:
checked like `threads.intra_op` and stored there, so the env files and tf_config.pbtxt agree.

Unknown keys and wrong types are a `ConfigError` naming the file, the key and a hint. The result
is an `Overrides`, which `plan()` applies last: the user's word outranks rules and measurements.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwtune.errors import ConfigError, ModelError
from hwtune.fs.trusted_read import RefusedFile, read_bounded
from hwtune.models.cpulist import MAX_CPU
from hwtune.models.nesting import toml_nesting_problem
from hwtune.models.overrides import DataFormat, JitLevel, Overrides, env_name_problem
from hwtune.models.profile import MODEL_KINDS, MODES, Mode, ModelKind, PrecisionIntent

SYSTEM_CONFIG = Path("/etc/hwtune/config.toml")
# Caps checked before the TOML parser runs (issue 15). A config is a few hundred bytes; the
# largest one a process could still start with holds [env] values up to execve's 128 KiB per
# string (MAX_ARG_STRLEN, execve(2)), so 256 KiB holds any usable config and keeps parsing
# cheap.
MAX_CONFIG_BYTES = 256 * 1024
# The schema nests two levels ([threads], [env]; an inline table or array adds one): 16 is far
# more than any config needs and far below the ~1000 levels where tomllib's recursion fails.
MAX_CONFIG_NESTING = 16
# The longest key the schema has is `threads.intra_op` (2 parts). tomllib copies the key so far
# for every part, quadratic in the parts: one 40 KB key of 20,000 parts took 1.6 GB.
MAX_CONFIG_KEY_PARTS = 16
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TF_VERSION = re.compile(r"\d+\.\d+(\.\d+)?\Z", re.ASCII)


@dataclass(frozen=True, slots=True)
class _ThreadsTable:
    intra_op: int | None = None
    inter_op: int | None = None


@dataclass(frozen=True, slots=True)
class _ConfigFile:
    """The schema of config.toml, validated by `models.convert.load`."""

    mode: Mode | None = None
    instances: int | None = None
    instance: int | None = None
    precision: PrecisionIntent | None = None
    tf_version: str | None = None
    model: ModelKind | None = None
    jit: JitLevel | None = None
    data_format: DataFormat | None = None
    workload: str | None = None
    threads: _ThreadsTable = field(default_factory=_ThreadsTable)
    env: dict[str, str] = field(default_factory=dict)


# HWTUNE_* variable -> (Overrides field, parser). Other HWTUNE_* names belong to other parts of
# hwtune (HWTUNE_KNOWLEDGE_DIR…) and are left alone unless they look like a typo of these.
_ENV_FIELDS: dict[str, str] = {
    "HWTUNE_MODE": "mode",
    "HWTUNE_INSTANCES": "instances",
    "HWTUNE_INSTANCE": "instance",
    "HWTUNE_PRECISION": "precision",
    "HWTUNE_TF_VERSION": "tf_version",
    "HWTUNE_MODEL": "model",
    "HWTUNE_INTRA_OP": "intra_op",
    "HWTUNE_INTER_OP": "inter_op",
    "HWTUNE_JIT": "jit",
    "HWTUNE_DATA_FORMAT": "data_format",
    "HWTUNE_WORKLOAD": "workload",
}
# The thread variables TensorFlow reads (process_util.cc), as the typed overrides they are.
THREAD_VARIABLES: dict[str, str] = {
    "TF_NUM_INTRAOP_THREADS": "intra_op",
    "TF_NUM_INTEROP_THREADS": "inter_op",
}
_CHOICES: dict[str, tuple[str, ...]] = {
    "mode": MODES,
    "precision": ("off", "eligible", "auto"),
    "model": MODEL_KINDS,
    "jit": ("off", "autoclustering", "on"),
    "data_format": ("channels_last", "channels_first"),
}
_MINIMUM = {"instances": 1, "instance": 0, "intra_op": 1, "inter_op": 1}
# The same bound tuned results have (pipeline/measured.py): no thread pool, instance count or
# instance index beyond the CPU numbers Linux has (models/cpulist.py MAX_CPU). Unbounded,
# intra_op = 2**63-1 was applied and TensorFlow then refused tf_config.pbtxt.
_MAXIMUM = {
    "instances": MAX_CPU,
    "instance": MAX_CPU - 1,
    "intra_op": MAX_CPU,
    "inter_op": MAX_CPU,
}
# execve(2) takes each "NAME=value" string (with its NUL) up to MAX_ARG_STRLEN, 32 pages =
# 128 KiB (include/uapi/linux/binfmts.h), and all of argv and the environment, strings and
# pointers, up to ARG_MAX (a quarter of the stack limit, sysconf(_SC_ARG_MAX)). A value past
# either starts no process: E2BIG from every exec of the job.
MAX_ARG_STRLEN = 32 * 4096
_COUNT_DIGITS = len(str(MAX_CPU))


def config_paths(environ: Mapping[str, str]) -> tuple[Path, ...]:
    """System config, then the user's ($XDG_CONFIG_HOME, else ~/.config).

    A relative $XDG_CONFIG_HOME is ignored, as the XDG Base Directory spec requires.
    """
    from hwtune.paths import config_files

    return tuple(Path(p) for p in config_files(environ))


default_config_paths = config_paths  # for callers whose parameter is named config_paths


def load_overrides(
    environ: Mapping[str, str],
    argv_sets: Sequence[str] = (),
    config_paths: Iterable[Path] | None = None,
) -> Overrides:
    """Merge config files, HWTUNE_* variables and `--set NAME=VALUE` flags, later winning."""
    result = Overrides()
    paths = default_config_paths(environ) if config_paths is None else tuple(config_paths)
    for path in paths:
        # Absent is fine (most machines have no config); anything else there must be a
        # readable regular file: a directory or dangling link named config.toml is a mistake
        # the user should hear about, not a config silently skipped.
        if os.path.lexists(path):
            result = result.merged(read_config_file(Path(path)))
    result = result.merged(overrides_from_environ(environ))
    result = result.merged(parse_sets(argv_sets))
    check_environment_size(environ, result.env)
    return result


def read_config_file(path: Path) -> Overrides:
    try:
        raw = read_bounded(path, MAX_CONFIG_BYTES, check_owner=False, follow=True)
    except RefusedFile as err:
        raise ConfigError(err.message) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: cannot read: {err}") from None
    return parse_config_text(text, str(path))


def parse_config_text(text: str, where: str) -> Overrides:
    """Validate one config file's text; `where` names it in errors and origins."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the same parser, from PyPI
        import tomli as tomllib
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{where}: larger than {MAX_CONFIG_BYTES} bytes; not a config file")
    # Windows editors (Notepad) start UTF-8 files with a byte-order mark, which tomllib
    # refuses as "Invalid statement (at line 1, column 1)": it carries no content, so it goes.
    text = text.removeprefix("\ufeff")
    problem = toml_nesting_problem(text, MAX_CONFIG_NESTING, MAX_CONFIG_KEY_PARTS)
    if problem:
        raise ConfigError(f"{where}: {problem}; not a config file")
    try:
        data = tomllib.loads(text)
    except ValueError as err:  # TOMLDecodeError, or an integer of more than 4300 digits
        raise ConfigError(f"{where}: invalid TOML: {err}") from err
    except RecursionError:  # a backstop: the scan above refuses what nests this deep
        raise ConfigError(f"{where}: invalid TOML: nested too deeply") from None
    from hwtune.models.convert import load

    try:
        parsed = load(_ConfigFile, data, where=where)
    except ModelError as err:
        raise ConfigError(err.message, hint=err.hint) from err
    values: dict[str, Any] = {
        f.name: getattr(parsed, f.name)
        for f in dataclasses.fields(_ConfigFile)
        if f.name not in ("threads", "env")
    }
    values["intra_op"] = parsed.threads.intra_op
    values["inter_op"] = parsed.threads.inter_op
    origins: dict[str, str] = {}
    for name, value in values.items():
        if value is not None:
            key = f"threads.{name}" if name in ("intra_op", "inter_op") else name
            _check_value(name, value, f"{where}: '{key}'")
            origins[name] = where
    table = _env_table(parsed.env.items(), lambda name: f"{where}: '[env].{name}'", where)
    twice = [name for name in ("intra_op", "inter_op") if getattr(table, name) and values[name]]
    if twice:
        raise ConfigError(
            f"{where}: 'threads.{twice[0]}' is also set in [env]", hint="set it once"
        )
    return Overrides(origins=origins, **values).merged(table)


def overrides_from_environ(environ: Mapping[str, str]) -> Overrides:
    """HWTUNE_MODE, HWTUNE_INSTANCES… (empty values count as unset)."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name in environ:
        if not name.startswith("HWTUNE_") or name in _ENV_FIELDS:
            continue
        close = difflib.get_close_matches(name, list(_ENV_FIELDS), n=1, cutoff=0.85)
        if close:
            raise ConfigError(f"unknown variable {name}", hint=f"did you mean {close[0]}?")
    for var, name in _ENV_FIELDS.items():
        raw = environ.get(var, "").strip()
        if not raw:
            continue
        value: Any = parse_count(name, raw, var) if name in _MINIMUM else raw
        _check_value(name, value, var)
        values[name] = value
        origins[name] = var
    return Overrides(origins=origins, **values)


def parse_sets(argv_sets: Sequence[str]) -> Overrides:
    """`--set NAME=VALUE` flags: environment variables of the profile; the thread variables
    set the thread counts (`THREAD_VARIABLES`)."""
    items = [item.partition("=") for item in argv_sets]
    for item, (_, sep, _) in zip(argv_sets, items, strict=True):
        if not sep:
            raise ConfigError(
                f"--set {item!r}: expected NAME=VALUE", hint="e.g. --set KMP_BLOCKTIME=0"
            )
    return _env_table([(name, value) for name, _, value in items], "--set {}".format, "--set")


def _env_table(
    items: Iterable[tuple[str, str]], where: Callable[[str], str], origin: str
) -> Overrides:
    """An `[env]` table or `--set` flags: variables, the thread variables as thread counts."""
    env: dict[str, str] = {}
    counts: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name, value in items:
        _check_env_name(name, where(name))
        _check_env_value(name, value, where(name))
        count_name = THREAD_VARIABLES.get(name)
        if count_name is None:
            env[name] = value
            origins[f"env.{name}"] = origin
        else:
            counts[count_name] = parse_count(count_name, value, where(name))
            origins[count_name] = where(name)
    return Overrides(env=env, origins=origins, **counts)


def parse_count(name: str, text: str, where: str) -> int:
    """A count (threads, instances) written as text; ConfigError naming `where` otherwise."""
    raw = text.strip()
    low, high = _MINIMUM[name], _MAXIMUM[name]
    hint = f"e.g. {where}=2" if ":" not in where else "e.g. 2"
    if not raw.isascii() or not raw.isdigit() or len(raw) > _COUNT_DIGITS:
        # The length bound keeps int() off huge strings (it refuses over 4300 digits).
        raise ConfigError(
            f"{where}={text[:24]!r}: expected a whole number from {low} to {high}", hint=hint
        )
    value = int(raw)
    _check_value(name, value, where)
    return value


def flag_name(name: str) -> str:
    """How the command line spells an intent field: `--tf-version`."""
    return f"--{name.replace('_', '-')}"


def keyword_name(name: str) -> str:
    """How the Python API spells it: `configure(mode=)`, the keyword argument, not a flag."""
    return f"configure({name}=)"


def with_flags(
    overrides: Overrides, *, named: Callable[[str], str] = flag_name, **flags: Any
) -> Overrides:
    """Put command-line flags (None = not given) on top of loaded overrides. `named` spells a
    field as its source does, in errors and reasons: a flag (`--mode`) by default,
    `keyword_name` for configure()'s keyword arguments (`configure(mode=)`)."""
    given = {name: value for name, value in flags.items() if value is not None}
    for name, value in given.items():
        _check_value(name, value, named(name))
    flag_overrides = Overrides(origins={name: named(name) for name in given}, **given)
    return overrides.merged(flag_overrides)


def _check_value(name: str, value: Any, where: str) -> None:
    if name in _MINIMUM and type(value) is not int:
        # configure(instances="2") failed comparing str with int, and True or 2.5 were
        # taken as counts (a bool is an int; a float reached the planner).
        raise ConfigError(
            f"{where}: {value!r} is not a whole number",
            hint=f"a whole number from {_MINIMUM[name]} to {_MAXIMUM[name]}",
        )
    if name in _CHOICES and value not in _CHOICES[name]:
        close = difflib.get_close_matches(str(value), _CHOICES[name], n=1) or [
            choice for choice in _CHOICES[name] if choice == str(value).casefold()
        ]
        # The message lists the choices already: a hint only for a near miss.
        hint = f"did you mean '{close[0]}'?" if close else None
        raise ConfigError(
            f"{where}: {value!r} is not one of {', '.join(_CHOICES[name])}", hint=hint
        )
    if name in _MINIMUM and value < _MINIMUM[name]:
        raise ConfigError(
            f"{where}: {value} is below the minimum {_MINIMUM[name]}",
            hint=f"a whole number from {_MINIMUM[name]} to {_MAXIMUM[name]}",
        )
    if name in _MAXIMUM and value > _MAXIMUM[name]:
        raise ConfigError(
            f"{where}: {value} is above the maximum {_MAXIMUM[name]} (Linux's CPU numbers)",
            hint=f"a whole number from {_MINIMUM[name]} to {_MAXIMUM[name]}",
        )
    if name == "workload" and (not str(value).strip() or not str(value).isprintable()):
        raise ConfigError(f"{where}: {value!r} is not a workload name", hint="e.g. builtin:cnn")
    if name == "tf_version" and not _TF_VERSION.match(str(value)):
        raise ConfigError(f"{where}: {value!r} is not a TensorFlow version", hint="e.g. 2.19")


def _check_env_name(name: str, where: str) -> None:
    if not _ENV_NAME.match(name):
        raise ConfigError(
            f"{where}: {name!r} is not an environment variable name",
            hint="letters, digits and underscores, not starting with a digit",
        )
    problem = env_name_problem(name)
    if problem:
        raise ConfigError(f"{where}: {problem}", hint="leave it out of [env] and --set")


def _check_env_value(name: str, value: str, where: str) -> None:
    """Refuse a value no environment can hold, where it is written, so that `exec`,
    `configure()` and every renderer see the same clear error instead of a crash."""
    if "\0" in value:
        # execve(2) passes "NAME=value" as a C string: a NUL would end it early.
        raise ConfigError(
            f"{where}: the value of {name} contains a NUL character, which no environment "
            "variable can hold",
            hint="remove the NUL (\\u0000 in TOML) from the value",
        )
    try:
        encoded = os.fsencode(value)  # argv and the environment carry bytes; this is their codec
    except UnicodeEncodeError as err:
        raise ConfigError(
            f"{where}: the value of {name} cannot be encoded for the environment ({err.reason})"
        ) from None
    if len(name) + 1 + len(encoded) + 1 > MAX_ARG_STRLEN:
        raise ConfigError(
            f"{where}: {name}=… is {len(encoded)} bytes; execve(2) takes at most "
            f"{MAX_ARG_STRLEN} bytes per variable (MAX_ARG_STRLEN), so no process could start",
            hint="shorten the value",
        )


def check_set_text(item: str) -> None:
    """ConfigError when the value of a `--set NAME=VALUE` (checked by `parse_sets`) is not
    UTF-8 text. argv carries bytes; Python keeps each byte that is not UTF-8 as a lone
    surrogate (PEP 383), which no UTF-8 file or JSON output can hold: `plan --json` printed
    the raw byte (invalid JSON), and apply and env failed later with "surrogates not allowed",
    naming neither --set nor the variable. `hwtune exec` does not call this: it writes no text,
    and passes the bytes to the program's environment as given."""
    name, _, value = item.partition("=")
    problem = _utf8_problem(value)
    if problem:
        raise ConfigError(
            f"--set {name}: the value of {name} is not UTF-8 text: {problem}",
            hint="hwtune writes the profile as UTF-8 (JSON, env files); only `hwtune exec` "
            "passes other bytes on",
        )


def _utf8_problem(value: str) -> str | None:
    """Where `value` stops being UTF-8 text, or None."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        code = ord(value[err.start])
        what = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
        return f"{what} at position {err.start}"
    return None


def check_environment_size(environ: Mapping[str, str], added: Mapping[str, str]) -> None:
    """ConfigError when `environ` with the variables of `added` is more than execve(2) takes
    (ARG_MAX, strings and pointers): every process of the job would fail with E2BIG."""
    try:
        arg_max = os.sysconf("SC_ARG_MAX")
    except (OSError, ValueError):
        return
    merged = {**environ, **added}
    pointer = 8  # one char* per string in envp (64-bit)
    total = sum(len(f"{k}={v}".encode(errors="replace")) + 1 + pointer for k, v in merged.items())
    if arg_max > 0 and total > arg_max:
        raise ConfigError(
            f"the environment with the variables set in [env] and --set would be {total} "
            f"bytes; execve(2) takes at most {arg_max} (ARG_MAX) with the arguments, so no "
            "process could start",
            hint="set fewer or shorter variables",
        )
