"""Pure renderers: a profile in, file text out. No I/O, no environment, no TensorFlow.

Every output `hwtune apply` writes is produced here, so that `apply --dry-run`, `hwtune env`,
the daemon and the tests all see exactly the same bytes. Values are never interpreted by the
reader of a file: each format quotes by its own reader's rules (cited below), and a value a
format cannot hold is refused with an `ApplyError` rather than written wrong.

Formats of the environment:
- "sh": `export K='v'`, POSIX single quotes (XCU 2.2.2: nothing inside is special), a quote
  written as `'\\''`. Safe to `source` or `eval "$(hwtune env)"` in bash, dash and zsh.
- "systemd": `K="v"` for `EnvironmentFile=`. systemd's parser (src/basic/env-file.c,
  `parse_env_file_internal`) removes a backslash only before one of `"\\`$` inside double
  quotes (SHELL_NEED_ESCAPE) and keeps other characters, newlines included. The same text is
  also valid POSIX sh with the same meaning (XCU 2.2.3), which the tests check. A value with
  a control character other than tab and newline is refused: systemd before v248 drops such
  an assignment from the environment with only a log line (src/basic/env-util.c,
  `env_value_is_valid`: `string_has_cc(e, "\t\n")`; relaxed by systemd PR #18129).
- "dotenv": `K=v` for `docker run --env-file`. docker's reader (docker/cli pkg/kvfile) has no
  quoting: one line per variable, the value taken verbatim, except that newer versions strip
  one pair of matching surrounding quotes. So a value with a newline, carriage return or NUL,
  one wrapped in matching quotes, or a line over 64 KiB (bufio.MaxScanTokenSize) is refused.
- "json": `{"K": "v"}`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal, NamedTuple

from hwtune.errors import ApplyError
from hwtune.models.digits import is_ascii_digits

if TYPE_CHECKING:
    from hwtune.models.hardware import Hardware
    from hwtune.models.profile import Profile, Scalar, Setting

EnvFormat = Literal["sh", "systemd", "dotenv", "json"]
ENV_FORMATS: tuple[EnvFormat, ...] = ("sh", "systemd", "dotenv", "json")

# POSIX XBD 8.1 portable names; systemd's env_name_is_valid() and every shell accept these.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# docker/cli pkg/kvfile reads lines with bufio.Scanner, whose default token limit is
# bufio.MaxScanTokenSize = 64 * 1024 bytes; a longer line fails the whole file.
DOCKER_MAX_LINE_BYTES = 64 * 1024 - 1
# Inside systemd's double quotes a backslash escapes exactly these (SHELL_NEED_ESCAPE in
# src/basic/escape.h); POSIX sh double quotes escape the same four plus newline (XCU 2.2.3).
_SYSTEMD_ESCAPED = re.compile(r'(["\\`$])')

# Thread variables TensorFlow's C++ runtime reads when it creates its pools
# (tensorflow/core/common_runtime/process_util.cc: NumInterOpThreadsFromEnvironment,
# NumIntraOpThreadsFromEnvironment). Derived from profile.threads (the counts are stored only
# there), so `eval "$(hwtune env)"` and `hwtune exec` size the pools without any Python call.
INTRA_OP_ENV = "TF_NUM_INTRAOP_THREADS"
INTER_OP_ENV = "TF_NUM_INTEROP_THREADS"
# An OpenMP build's pool (intel-tensorflow, --config=mkl) runs the oneDNN kernels and reads
# this instead (Intel's TF BKMs: OMP_NUM_THREADS = the physical cores used = intra-op).
OPENMP_ENV = "OMP_NUM_THREADS"

# Files `apply_all` writes, in this order. hwtune.env is the EnvironmentFile= one, the name a
# unit expects (`EnvironmentFile=/etc/hwtune/hwtune.env`); hwtune.sh is for `source`.
ENV_FILES: dict[str, EnvFormat] = {
    "hwtune.env": "systemd",
    "hwtune.sh": "sh",
    "hwtune.dotenv": "dotenv",
    "hwtune.json": "json",
}
TF_CONFIG_FILE = "tf_config.pbtxt"
TF_DATA_FILE = "tf_data_options.json"
BAZELRC_FILE = "tensorflow.bazelrc"
PROFILE_FILE = "profile.json"
HARDWARE_FILE = "hardware.json"
# Every file `hwtune apply` manages, in write order.
OUTPUT_FILES = (
    *ENV_FILES,
    TF_CONFIG_FILE,
    TF_DATA_FILE,
    BAZELRC_FILE,
    PROFILE_FILE,
    HARDWARE_FILE,
)

# profile.jit.level -> ConfigProto OptimizerOptions.GlobalJitLevel (config.proto: OFF = -1,
# DEFAULT = 0, ON_1 = 1, ON_2 = 2), the same level the env files give TF_XLA_FLAGS
# (planner/accel.py XLA_FLAGS): autoclustering is --tf_xla_auto_jit=2, so ON_2; "on" is
# --tf_xla_auto_jit=1, so ON_1. (tf.config.optimizer.set_jit("autoclustering") selects ON_1,
# tensorflow/python/eager/context.py; config.proto says the levels do not differ "at present".)
_JIT_LEVELS = {"off": "OFF", "autoclustering": "ON_2", "on": "ON_1", "default": "DEFAULT"}
# On a CPU, global_jit_level clusters nothing unless --tf_xla_cpu_global_jit is in TF_XLA_FLAGS
# (tensorflow/compiler/jit/flags.cc: "Enables global JIT compilation for CPU via
# SessionOptions"; planner/accel.py CPU_XLA_FLAG).
_CPU_JIT_NOTE = (
    "# XLA on a CPU: global_jit_level alone compiles nothing there; TensorFlow also needs "
    "TF_XLA_FLAGS=--tf_xla_cpu_global_jit (tensorflow/compiler/jit/flags.cc){exported}"
)


class EnvEntry(NamedTuple):
    """One variable to export: its text, and why (for comments and reports)."""

    name: str
    value: str
    reason: str = ""
    source: str = "rule"


def setting_text(value: Scalar) -> str | None:
    """A setting's value as an environment string; None means "leave the variable unset".

    Booleans become "true"/"false": TensorFlow's ReadBoolFromEnvVar (tsl/util/env_var.cc)
    and the OpenMP OMP_* variables both accept those, while "1"/"0" are not OpenMP booleans.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _thread_count(setting: Setting, where: str) -> int | None:
    value = setting.value
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    # 9 digits: far beyond any thread count, and int() never sees a string of over 4300.
    if isinstance(value, str) and is_ascii_digits(value) and len(value) <= 9:
        return int(value) or None
    raise ApplyError(f"profile {where} is {value!r}, not a thread count")


def thread_counts(profile: Profile) -> tuple[int | None, int | None]:
    """(intra_op, inter_op) as positive ints, None where the plan leaves the choice to TF."""
    return (
        _thread_count(profile.threads.intra_op, "threads.intra_op"),
        _thread_count(profile.threads.inter_op, "threads.inter_op"),
    )


def thread_entries(profile: Profile) -> list[EnvEntry]:
    """The variables the thread counts imply: TF's two, and OMP_NUM_THREADS in an OpenMP build."""
    intra, inter = profile.threads.intra_op, profile.threads.inter_op
    openmp = profile.threads.openmp
    omp_reason = f"{openmp}: its OpenMP pool runs the oneDNN kernels, one thread per intra-op "
    omp_reason += "thread (Intel: OMP_NUM_THREADS = physical cores used)"
    wanted = [(INTRA_OP_ENV, intra, intra.reason), (INTER_OP_ENV, inter, inter.reason)]
    wanted += [(OPENMP_ENV, intra, omp_reason)] if openmp else []
    return [
        EnvEntry(name, str(count), reason, setting.source)
        for name, setting, reason in wanted
        if (count := _thread_count(setting, name)) is not None
    ]


def env_entries(profile: Profile) -> list[EnvEntry]:
    """The profile's variables and those its thread counts imply, sorted by name. A variable
    the user set in the profile's env (OMP_NUM_THREADS=4 with --set) is kept as set."""
    entries = {entry.name: entry for entry in thread_entries(profile)}
    for name, setting in profile.env.items():
        text = setting_text(setting.value)
        if text is not None:
            entries[name] = EnvEntry(name, text, setting.reason, setting.source)
    return [entries[name] for name in sorted(entries)]


def env_map(profile: Profile) -> dict[str, str]:
    return {e.name: e.value for e in env_entries(profile)}


def check_name(name: str) -> None:
    if not _ENV_NAME.match(name):
        raise ApplyError(
            f"environment variable name {name!r} is not a portable name",
            hint="names are letters, digits and '_', not starting with a digit",
        )


def _check_value(name: str, value: str) -> None:
    if "\0" in value:
        raise ApplyError(f"the value of {name} contains a NUL byte, which no environment can hold")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ApplyError(f"the value of {name} is not valid UTF-8 text ({err.reason})") from err


def quote_sh(value: str) -> str:
    """POSIX single quotes: the only character that needs care is the quote itself."""
    return "'" + value.replace("'", "'\\''") + "'"


def quote_systemd(value: str) -> str:
    """Double quotes as systemd's EnvironmentFile parser (and sh) read them."""
    return '"' + _SYSTEMD_ESCAPED.sub(r"\\\1", value) + '"'


# C0 controls but tab and newline, and DEL: what string_has_cc(e, "\t\n") refuses.
_SYSTEMD_DROPPED = re.compile(r"[\x01-\x08\x0b-\x1f\x7f]")


def systemd_line(name: str, value: str) -> str:
    """One EnvironmentFile= assignment, or ApplyError for a value older systemd drops."""
    bad = _SYSTEMD_DROPPED.search(value)
    if bad:
        raise ApplyError(
            f"the value of {name} contains the control character {bad.group()!r}, and systemd "
            "before v248 silently drops such a variable from EnvironmentFile= "
            "(env_value_is_valid)",
            hint="remove the character, or set the variable in the unit with Environment=",
        )
    return f"{name}={quote_systemd(value)}"


def dotenv_line(name: str, value: str) -> str:
    """One docker --env-file line, or ApplyError when the format cannot hold the value."""
    for char, what in (("\n", "a newline"), ("\r", "a carriage return")):
        if char in value:
            raise ApplyError(
                f"the value of {name} contains {what}, which docker's --env-file format "
                "cannot hold (it has no quoting: one line per variable)",
                hint="use hwtune.env (EnvironmentFile=) or hwtune.sh, or pass it with docker -e",
            )
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        raise ApplyError(
            f"the value of {name} is wrapped in {value[0]} quotes, which newer docker versions "
            "strip from --env-file values and older ones keep, so it would not read back exactly",
            hint="pass it with docker -e, or use hwtune.env (EnvironmentFile=) / hwtune.sh",
        )
    line = f"{name}={value}"
    if len(line.encode("utf-8")) > DOCKER_MAX_LINE_BYTES:
        raise ApplyError(f"the line for {name} is longer than docker's 64 KiB line limit")
    return line


def _comment(text: str) -> str:
    """A one-line comment body: no control characters, no trailing backslash.

    A trailing backslash would make systemd before v254 continue the comment onto the next
    line (src/basic/env-file.c, COMMENT_ESCAPE), swallowing a variable.
    """
    flat = re.sub(r"[\x00-\x1f\x7f]+", " ", text).strip()
    return flat.rstrip("\\ ")  # both at once: no backslash is left at the end


def render_env_entries(
    entries: Sequence[EnvEntry],
    fmt: EnvFormat,
    *,
    header: Sequence[str] = (),
    unset: Sequence[str] = (),
    marked: Mapping[str, str] | None = None,
) -> str:
    """Render variables in one format; `header` lines become comments (not in JSON); `unset`
    names are removed first (sh only: the other formats start from an empty environment).
    `marked`: variables the environment already holds that hwtune set, not exported again but
    named in HWTUNE_PROFILE with the entries (hwtune.apply.marker.launch_kept)."""
    if fmt not in ENV_FORMATS:
        raise ApplyError(f"unknown environment format {fmt!r}", hint=f"one of {ENV_FORMATS}")
    for entry in entries:
        check_name(entry.name)
        _check_value(entry.name, entry.value)
    # Names read back from the caller's marker: one no shell could have exported is skipped.
    unset = [name for name in unset if _ENV_NAME.match(name)]
    if fmt == "json":
        return json.dumps({e.name: e.value for e in entries}, indent=2, ensure_ascii=False) + "\n"
    lines = [f"# {_comment(line)}" for line in header]
    if fmt == "sh":
        for name in unset:
            lines += [f"# {name}: set by hwtune before, not in this plan", f"unset {name}"]
    for entry in [*entries, _marker_entry(entries, marked or {})]:
        if entry.reason:
            lines.append(f"# {entry.name}: {_comment(entry.reason)} [{entry.source}]")
        if fmt == "sh":
            lines.append(f"export {entry.name}={quote_sh(entry.value)}")
        elif fmt == "systemd":
            lines.append(systemd_line(entry.name, entry.value))
        else:
            lines.append(dotenv_line(entry.name, entry.value))
    return "\n".join(lines) + "\n"


def _marker_entry(entries: Sequence[EnvEntry], marked: Mapping[str, str]) -> EnvEntry:
    """HWTUNE_PROFILE: which of these values (and of `marked`) hwtune wrote
    (hwtune.apply.marker), so a later `hwtune exec`, `env` or `configure()` replaces them
    instead of keeping them as the user's."""
    from hwtune.apply.marker import MARKER, marker_value

    own = {**marked, **{e.name: e.value for e in entries if e.name != MARKER}}
    own.pop(MARKER, None)
    return EnvEntry(MARKER, marker_value(own), "the variables above that hwtune wrote", "hwtune")


def _version() -> str:
    from hwtune import __version__

    return __version__


def env_header(fmt: EnvFormat, *, written: bool = True) -> list[str]:
    """The comment lines atop the environment; `written`: for the file `hwtune apply` writes,
    which says it is rewritten (`hwtune env` prints on stdout, where no file is written)."""
    use = {
        "sh": 'source it, or: eval "$(hwtune env)"',
        "systemd": "for EnvironmentFile= in a unit (systemd.exec(5))",
        "dotenv": "docker's env-file format, for docker run --env-file (values verbatim; "
        "python-dotenv reads quotes, escapes and $ differently)",
        "json": "",
    }[fmt]
    lines = [f"Generated by hwtune {_version()}: {use}."]
    if written:
        lines.append("Rewritten by `hwtune apply`; edit the config.")
    return lines


def render_env(profile: Profile, fmt: EnvFormat) -> str:
    """The profile's environment in one format (pure; see the module docstring for the rules)."""
    return render_env_entries(env_entries(profile), fmt, header=env_header(fmt))


def _pbtxt_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid protobuf text-format string literal


def render_tf_config(profile: Profile) -> str:
    """tf.compat.v1.ConfigProto in protobuf text format (`text_format.Parse` reads it)."""
    intra, inter = thread_counts(profile)
    lines = [f"# Generated by hwtune {_version()}: tf.compat.v1.ConfigProto, text format."]
    if intra is not None:
        lines.append(f"intra_op_parallelism_threads: {intra}")
    if inter is not None:
        lines.append(f"inter_op_parallelism_threads: {inter}")
    soft = profile.allow_soft_placement
    if soft is not None and isinstance(soft.value, bool):
        lines.append(f"allow_soft_placement: {'true' if soft.value else 'false'}")
    level = str(profile.jit.level.value).lower()
    if level not in _JIT_LEVELS:
        raise ApplyError(
            f"profile jit.level is {profile.jit.level.value!r}", hint=f"one of {list(_JIT_LEVELS)}"
        )
    if not profile.instance.gpus and _JIT_LEVELS[level] in ("ON_1", "ON_2"):
        flags = profile.env.get("TF_XLA_FLAGS")
        exported = flags is not None and "--tf_xla_cpu_global_jit" in str(flags.value).split()
        lines.append(
            _CPU_JIT_NOTE.format(exported=", which hwtune's env files set" if exported else "")
        )
    lines += [
        "graph_options {",
        "  optimizer_options {",
        f"    global_jit_level: {_JIT_LEVELS[level]}",
    ]
    lines += ["  }", "}"]
    lines += _gpu_options(profile)
    return "\n".join(lines) + "\n"


def _gpu_options(profile: Profile) -> list[str]:
    """gpu_options: which devices (unless the environment already restricts them) and how much
    memory, for instances that share a GPU (planner/gpu_memory.py)."""
    mine = profile.instance
    if not mine.gpus:
        return []
    options: list[str] = []
    comments: list[str] = []
    if len(profile.instances) > 1:
        if "CUDA_VISIBLE_DEVICES" in profile.env:
            # TensorFlow numbers the GPUs CUDA_VISIBLE_DEVICES leaves visible from 0, so the
            # physical indices would name devices this process cannot see (TF
            # gpu_options.visible_device_list: "in terms of the visible devices").
            # the user's value, flattened: a newline would start ConfigProto lines of its own
            shown = _comment(str(profile.env["CUDA_VISIBLE_DEVICES"].value))
            comments.append(
                f"# visible_device_list left out: CUDA_VISIBLE_DEVICES={shown} already "
                "restricts this process, and TensorFlow renumbers those devices from 0"
            )
        elif all(device.isdigit() for device in mine.devices):
            devices = ",".join(str(g) for g in mine.gpus)
            options.append(f"  visible_device_list: {_pbtxt_string(devices)}")
    limit = profile.gpu_memory.value if profile.gpu_memory is not None else None
    if isinstance(limit, int) and not isinstance(limit, bool) and mine.gpu_memory_bytes:
        fraction = limit * (1 << 20) / mine.gpu_memory_bytes
        options.append(f"  per_process_gpu_memory_fraction: {fraction:.4f}")
    growth = profile.env.get("TF_FORCE_GPU_ALLOW_GROWTH")
    if growth is not None and str(growth.value).lower() == "true":
        options.append("  allow_growth: true")
    if not options:
        return comments
    return [*comments, "gpu_options {", *options, "}"]


def render_tf_data_options(profile: Profile) -> str:
    """tf.data settings as JSON: `options` mirrors tf.data.Options attribute paths."""
    data = profile.tf_data
    payload = {
        "options": {
            "threading": {"private_threadpool_size": data.private_threadpool_size.value},
            "autotune": {
                "enabled": True,
                "cpu_budget": data.autotune_cpu_budget.value,
                "ram_budget": data.autotune_ram_budget.value,
            },
        },
        "pipeline": {
            "num_parallel_calls": data.parallel_calls.value,
            "interleave_cycle_length": data.interleave_cycle_length.value,
            "prefetch_buffer_size": data.prefetch.value,
        },
        "reasons": {
            "private_threadpool_size": data.private_threadpool_size.reason,
            "cpu_budget": data.autotune_cpu_budget.reason,
            "ram_budget": data.autotune_ram_budget.reason,
            "num_parallel_calls": data.parallel_calls.reason,
            "interleave_cycle_length": data.interleave_cycle_length.reason,
            "prefetch_buffer_size": data.prefetch.reason,
        },
    }
    return json.dumps(payload, indent=2, ensure_ascii=False) + "\n"


def render_bazelrc(profile: Profile) -> str | None:
    """The planner's bazelrc (rendered from bazel_templates/), or None without a build plan."""
    if profile.bazel is None:
        return None
    text = profile.bazel.bazelrc
    return text if text.endswith("\n") else text + "\n"


def render_json(data: object) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def stable_hardware(hardware: Hardware) -> Hardware:
    """The hardware without facts that change by themselves (free memory), so that an
    unchanged machine renders an unchanged hardware.json and apply leaves it alone."""
    from dataclasses import replace

    return replace(hardware, memory=replace(hardware.memory, available_bytes=None))


def render_all(profile: Profile, hardware: Hardware) -> dict[str, str]:
    """Every output file of `hwtune apply`: name -> text, in write order."""
    from hwtune.models.convert import dump

    files = {name: render_env(profile, fmt) for name, fmt in ENV_FILES.items()}
    files[TF_CONFIG_FILE] = render_tf_config(profile)
    files[TF_DATA_FILE] = render_tf_data_options(profile)
    bazelrc = render_bazelrc(profile)
    if bazelrc is not None:
        files[BAZELRC_FILE] = bazelrc
    files[PROFILE_FILE] = render_json(dump(profile))
    files[HARDWARE_FILE] = render_json(dump(stable_hardware(hardware)))
    return files
