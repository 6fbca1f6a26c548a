"""`HWTUNE_PROFILE`: which variables of an environment hwtune wrote, so it can replace them.

Every environment hwtune hands on (the sh, systemd and dotenv files, `hwtune env`, the
children of `hwtune exec`, a process after `configure()`) carries one extra variable,

    HWTUNE_PROFILE=1:TF_NUM_INTEROP_THREADS=8d3a2a37,TF_NUM_INTRAOP_THREADS=e0b5b2cb,...

the fingerprint of what hwtune wrote: each variable's name and the CRC-32 of the value it
gave it. A later `hwtune exec`, `hwtune env` or `configure()` treats a variable whose value
still matches its fingerprint as hwtune's own and replaces it with the new plan's value;
a variable the user changed afterwards (its CRC no longer matches) or set without hwtune is
the user's and is kept. Without this, `eval "$(hwtune env)"` followed by `hwtune exec
--instances 2` kept the whole-node thread counts for each half-node copy, "from the
environment".

CRC-32 (zlib: about 0.3 ms to import, `python -X importtime`) rather than a cryptographic
hash: this tells hwtune's own values from the user's edits, it guards nothing, and hashlib
would add an OpenSSL load to configure()'s start-up. A user value that collides with hwtune's CRC
(1 in 2**32) would be replaced by the new plan's value.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping

MARKER = "HWTUNE_PROFILE"
_VERSION = "1"

# What `hwtune exec` sets in each instance on top of the plan (hwtune.apply.launch,
# env_for_instance): the instance's identity (always set, whatever the caller had) and the
# GPUs it owns. Named here, not in the launcher, because `hwtune env` reads it on its cached
# path, which must stay clear of the launcher's imports (the planner and models, some 45 ms).
INSTANCE_VARIABLES = ("HWTUNE_INSTANCE", "HWTUNE_INSTANCES")
LAUNCH_VARIABLES = frozenset((*INSTANCE_VARIABLES, "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"))

# TensorFlow sizes its intra-op pool from TF_NUM_INTRAOP_THREADS whenever the value reads as
# a nonzero int32 (tensorflow/core/common_runtime/local_device.cc, EigenThreadPoolInfo, with
# process_util.cc's NumIntraOpThreadsFromEnvironment: strings::safe_strto32, which allows
# surrounding whitespace and a sign), and its ThreadPool CHECK-fails on a count below 1: a
# negative value aborts the process at its first op ("Check failed: num_threads >= 1 (-1 vs.
# 1)", TF 2.21). Zero, junk and out-of-range values read as 0, TensorFlow's default. A
# negative inter-op count is valid (ops run in the caller's thread).
FATAL_WHEN_NEGATIVE = "TF_NUM_INTRAOP_THREADS"
_INT32_MIN = -(2**31)
_C_SPACE = " \t\n\v\f\r"  # isspace(3) in the C locale, what safe_strto32 skips


def fatal_to_tensorflow(name: str, value: str) -> str | None:
    """Why TensorFlow aborts when `name` holds `value`, else None.

    Such a value is no setting the user can mean, so `hwtune exec`, `hwtune env` and
    configure() replace it with the plan's value (saying so) instead of keeping it as the
    user's: kept, it killed the job (SIGABRT) once TensorFlow started."""
    if name != FATAL_WHEN_NEGATIVE:
        return None
    text = value.strip(_C_SPACE)
    digits = text[1:]
    if not text.startswith("-") or not (digits.isascii() and digits.isdigit()):
        return None
    if int(digits) == 0 or -int(digits) < _INT32_MIN:
        return None
    return "TensorFlow aborts on a negative intra-op thread count (Check failed: num_threads >= 1)"


def fatal_values(base: Mapping[str, str], planned: Mapping[str, str]) -> dict[str, str]:
    """The planned variables `base` holds another value for, one TensorFlow aborts on:
    name -> why."""
    found: dict[str, str] = {}
    for name, value in planned.items():
        held = base.get(name)
        why = fatal_to_tensorflow(name, held) if held is not None and held != value else None
        if why is not None:
            found[name] = why
    return found


def replaced_note(name: str, value: str, planned: str, why: str) -> str:
    return f"replacing {name}={value!r} from the environment with the profile's {planned!r}: {why}"


def _crc(value: str) -> str:
    return f"{zlib.crc32(value.encode('utf-8', 'surrogateescape')):08x}"


def marker_value(written: Mapping[str, str]) -> str:
    """The HWTUNE_PROFILE value for the variables hwtune wrote (name -> value)."""
    pairs = ",".join(f"{name}={_crc(written[name])}" for name in sorted(written) if name != MARKER)
    return f"{_VERSION}:{pairs}"


def parse(value: str | None) -> dict[str, str]:
    """name -> CRC from a HWTUNE_PROFILE value; {} for a missing or unknown one."""
    if not value:
        return {}
    version, sep, pairs = value.partition(":")
    if not sep or version != _VERSION:
        return {}
    found: dict[str, str] = {}
    for pair in pairs.split(","):
        name, sep, crc = pair.partition("=")
        if sep and name and len(crc) == 8:
            found[name] = crc
    return found


def hwtune_owned(environ: Mapping[str, str]) -> set[str]:
    """Names in `environ` whose value is still the one hwtune wrote."""
    recorded = parse(environ.get(MARKER))
    return {
        name for name, crc in recorded.items() if name in environ and _crc(environ[name]) == crc
    }


def stale(
    environ: Mapping[str, str], planned: Iterable[str], *, owned: Iterable[str] | None = None
) -> set[str]:
    """What hwtune set earlier in `environ` that a plan setting `planned` should remove.

    `owned`: hwtune's earlier variables, when more is known than the marker says (configure()
    also remembers what it set in this process); by default `hwtune_owned(environ)`.

    Inside an instance of `hwtune exec` (HWTUNE_INSTANCE is set) that leaves out the variables
    exec set for the instance (LAUNCH_VARIABLES): they are the launch's, not a plan's. A plan
    made in there need not set them (in a pinned instance it is one instance on the CPUs exec
    bound it to), and dropping them would make the instance forget which one it is and see
    every GPU. Elsewhere only a plan set them, and one the new plan lacks is stale as any other.
    """
    earlier = hwtune_owned(environ) if owned is None else set(owned)
    dropped = earlier - set(planned) - {MARKER}
    if "HWTUNE_INSTANCE" in environ:
        dropped -= LAUNCH_VARIABLES
    return dropped


def launch_kept(environ: Mapping[str, str], planned: Iterable[str]) -> dict[str, str]:
    """The launch variables of this `hwtune exec` instance that a plan setting `planned` keeps
    (name -> value): the ones `stale` spares that still hold exec's values.

    A marker rewritten after such a plan (`eval "$(hwtune env)"`, configure()) lists them
    again. Were it to list the plan's variables alone, exec's would read as the user's from
    then on: a later `hwtune exec` or `hwtune env` would keep a GPU list exec gave the
    instance, as if the user had chosen it, instead of replacing it.
    """
    if "HWTUNE_INSTANCE" not in environ:
        return {}
    names = (hwtune_owned(environ) & LAUNCH_VARIABLES) - set(planned)
    return {name: environ[name] for name in sorted(names)}


def in_exec_copy(environ: Mapping[str, str]) -> bool:
    """Whether `environ` is a copy's that `hwtune exec` started: HWTUNE_INSTANCE holds the
    value exec wrote (the marker names it), not one the user exported as a setting
    (`HWTUNE_INSTANCE=1 HWTUNE_INSTANCES=2 hwtune exec -- CMD` asks for slice 1)."""
    return "HWTUNE_INSTANCE" in hwtune_owned(environ)


def replace_own(
    base: Mapping[str, str], planned: Mapping[str, str], *, always: Iterable[str] = ()
) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """`base` with hwtune's earlier values replaced by `planned`, and the marker rewritten.

    Returns (the environment, the user's values kept: name -> (user's, planned)). A variable
    hwtune set earlier that the new plan no longer sets is removed (`stale`: in a copy of
    `hwtune exec`, exec's launch variables stay, and the new marker still names them, as
    `launch_kept` has `hwtune env` do); names in `always` (hwtune's own protocol,
    HWTUNE_INSTANCE…) are set whatever the environment held.
    """
    owned = hwtune_owned(base)
    launch = launch_kept(base, planned)
    forced = set(always)
    env = {name: value for name, value in base.items() if name not in owned or name in launch}
    env.pop(MARKER, None)
    kept: dict[str, tuple[str, str]] = {}
    written: dict[str, str] = dict(launch)
    for name, value in planned.items():
        if name in env and env[name] != value and name not in forced:
            kept[name] = (env[name], value)
            continue
        env[name] = value
        written[name] = value
    env[MARKER] = marker_value(written)
    return env, kept
