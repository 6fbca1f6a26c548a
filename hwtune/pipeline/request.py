"""The one way from inputs to a Profile: every command, the daemon and `configure()` call
`profile_for`.

    hardware   --hardware FILE, else detect(--root)
    overrides  config files < HWTUNE_* < flags and --set        (hwtune.pipeline.config)
    share      this process's slice from the launcher's rank variables, unless flags gave it
    measured   the tuned result of the workload the user names, loaded by the hardware
               fingerprint before planning (hwtune.pipeline.measured)
    plan       once: hwtune.planner.plan(hardware, overrides, measured)

A measurement holds for what was measured: the named workload (`--workload`, `HWTUNE_WORKLOAD`,
`workload = ` in config, `configure(workload=)`), its mode, and its model kind when the user
names one. Its instance count applies in batch mode only, the one mode `hwtune tune` searches
counts in (copies of one training are several trainings); elsewhere its thread counts apply
only when they were measured for as many instances as are planned.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwtune.errors import HwtuneError, NoHomeError
from hwtune.models.hardware import Hardware
from hwtune.models.overrides import FROM_LAUNCHER, Overrides
from hwtune.models.profile import Measurement, Profile, Setting
from hwtune.models.words import plural
from hwtune.pipeline.ranks import (
    SLURM_BATCH_NOTE,
    already_pinned,
    local_rank,
    slurm_batch,
    uncounted_note,
    uncounted_rank,
)

_THREAD_KEYS = (
    "threads.intra_op",
    "threads.inter_op",
    "env.TF_NUM_INTRAOP_THREADS",
    "env.TF_NUM_INTEROP_THREADS",
)


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """Everything a plan depends on besides the machine's files. None: not asked for."""

    environ: Mapping[str, str]
    root: str = "/"
    hardware_file: str | None = None
    hardware: Hardware | None = None  # already detected (the daemon, exec's copies)
    mode: str | None = None
    instances: int | None = None
    instance: int | None = None
    precision: str | None = None
    tf_version: str | None = None
    model: str | None = None
    sets: tuple[str, ...] = ()
    workload: str | None = None
    measured: bool = True  # False: rules and overrides only (--no-measured)
    for_exec: bool = False  # exec: it starts the copies, so a batch plan needs no note
    # The intent came as configure()'s keyword arguments: errors and reasons name `mode=`, not
    # the `--mode` flag the command line has.
    keywords: bool = False

    def flags(self) -> dict[str, Any]:
        """The intent flags that were given."""
        from hwtune.planner.core import INTENT_FIELDS

        return {k: getattr(self, k) for k in INTENT_FIELDS if getattr(self, k) is not None}


@dataclass(frozen=True)
class Planned:
    hardware: Hardware
    profile: Profile
    notes: tuple[str, ...] = ()  # how the intent was chosen (rank, pinning, measurements)
    measured_instances: bool = False  # the instance count came from a measurement


def detection_issues(hardware: Hardware) -> tuple[int, str] | None:
    """(how many issues detection saw, the first as `probe: reason [path]`); None: none. What
    every planning command warns about (`hwtune.commands.planning.issues_warning`)."""
    issues = hardware.issues
    if not issues:
        return None
    first = issues[0]
    where = f" [{first.path}]" if first.path else ""
    return len(issues), f"{first.probe}: {first.reason}{where}"


def load_hardware(request: PlanRequest) -> Hardware:
    """The request's hardware: given, read from --hardware FILE, or detected under --root."""
    if request.hardware is not None:
        return request.hardware
    if request.hardware_file is not None:  # "" is no file: refused, not this machine
        return _read_hardware(Path(request.hardware_file))
    root = Path(request.root)
    if not request.root or not root.is_dir():  # Path("") is ".", not a root
        raise HwtuneError(
            f"--root {request.root}: not a directory",
            hint="give / or a `hwtune snapshot` directory",
        )
    from hwtune.probes import detect, live_environ

    return detect(root, environ=live_environ(root.absolute(), request.environ))


# Caps checked before the JSON parser runs, as for config files (pipeline/config.py). A model
# is about 5 KB on a laptop and 3 MB on a machine of 8192 CPUs (the most any Linux build
# supports) whose GPUs each list all of them; 32 MiB holds one with every CPU number hwtune reads
# (MAX_CPU, 65536), and keeps /dev/zero or a stray multi-GB file from being read whole.
MAX_HARDWARE_BYTES = 32 << 20
# The model nests five levels (the object, gpus, a GPU, mig_devices, a device); json's scanner
# recurses per level and fails near 1000 (a file of 100,000 `[` raised RecursionError).
MAX_HARDWARE_NESTING = 16
# No fact in the model is a number of more digits than 2**64 has (20); int() refuses over
# 4300 digits with a bare ValueError, and reading a long one costs time quadratic in its length.
MAX_NUMBER_DIGITS = 20
_DETECT_HINT = "give a file written by `hwtune detect --json`"
# The sections every `hwtune detect --json` has written since schema_version 1; the others
# (numa, gpus, tensorflow…) may be empty on a machine without them, and default to that.
REQUIRED_HARDWARE_KEYS = ("schema_version", "cpu", "limits", "memory")


def _read_hardware(path: Path) -> Hardware:
    """The model in a `hwtune detect --json` file: bounded, checked, one-line errors."""
    from hwtune.errors import ModelError
    from hwtune.models.convert import load
    from hwtune.models.hardware_checks import hardware_problem, schema_problem

    data = _hardware_json(path)
    if not isinstance(data, dict):
        raise HwtuneError(
            f"--hardware {path}: expected a JSON object, got {type(data).__name__}",
            hint=_DETECT_HINT,
        )
    missing = [key for key in REQUIRED_HARDWARE_KEYS if key not in data]
    if missing:
        # The model's defaults would fill them in: `{}` (an empty or wrong file) was planned
        # and applied as a one-CPU machine with nothing known, exit 0 even with --strict.
        raise HwtuneError(
            f"--hardware {path}: not a hardware model: no {', '.join(missing)} "
            "(`hwtune detect --json` writes every section)",
            hint=_DETECT_HINT,
        )
    problem = schema_problem(data)
    if problem:
        raise HwtuneError(
            f"--hardware {path}: {problem}",
            hint="detect again with this hwtune (`hwtune detect --json`), or upgrade hwtune",
        )
    try:
        hardware = load(Hardware, data, where=str(path))
    except ModelError as err:
        raise HwtuneError(f"--hardware {err.message}", hint=err.hint) from err
    found = hardware_problem(hardware)
    if found:
        raise HwtuneError(f"--hardware {path} at '{found[0]}': {found[1]}", hint=_DETECT_HINT)
    # A saved model says "root": "/" for the machine it was detected on, which need not be
    # this one: the plan must not take it for the build host (bazel's --host_copt).
    return dataclasses.replace(hardware, root=f"--hardware {path}")


def _hardware_bytes(path: Path) -> bytes:
    """At most MAX_HARDWARE_BYTES + 1 bytes of a regular file, a pipe, or stdin ("-").

    Pipes are what `--hardware <(ssh host hwtune detect --json)` and `hwtune detect --json |
    hwtune plan --hardware -` give; reading one waits for its writer, as `cat` does, which is
    what the user asked for. A device (/dev/zero, a terminal), a directory or a socket is
    refused without being read."""
    from hwtune.fs.trusted_read import RefusedFile, read_bounded, read_capped

    name = os.fspath(path)
    stdin = name == "-"
    try:
        if not stdin and not _is_fifo(name):  # read_bounded says why anything else is refused
            return read_bounded(name, MAX_HARDWARE_BYTES, check_owner=False, follow=True)
        fd = 0 if stdin else os.open(name, os.O_RDONLY | os.O_CLOEXEC)
    except RefusedFile as err:
        raise HwtuneError(f"--hardware {err.message}", hint=_DETECT_HINT) from None
    except OSError as err:
        raise HwtuneError(f"--hardware {name}: cannot read: {err.strerror or err}") from None
    where = "stdin" if stdin else name
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
            raise HwtuneError(
                f"--hardware {where}: not a file or a pipe; not read",
                hint="pipe `hwtune detect --json` into `--hardware -`, or name its saved file",
            )
        return read_capped(fd, MAX_HARDWARE_BYTES)
    except OSError as err:
        raise HwtuneError(f"--hardware {where}: cannot read: {err.strerror or err}") from None
    finally:
        if not stdin:
            os.close(fd)


def _is_fifo(name: str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(name).st_mode)
    except OSError:
        return False


def _hardware_json(path: Path) -> Any:
    """The parsed JSON of a file or pipe of at most MAX_HARDWARE_BYTES: never reading a
    device, never recursing or converting numbers without bound."""
    from hwtune.models.nesting import json_nesting_problem, unique_keys

    raw = _hardware_bytes(path)
    if len(raw) > MAX_HARDWARE_BYTES:
        raise HwtuneError(
            f"--hardware {path}: larger than {MAX_HARDWARE_BYTES} bytes; not read",
            hint=_DETECT_HINT,
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise HwtuneError(f"--hardware {path}: not UTF-8 text (byte {err.start})") from None
    problem = json_nesting_problem(text, MAX_HARDWARE_NESTING)
    if problem:
        raise HwtuneError(f"--hardware {path}: {problem}; not a hardware model", hint=_DETECT_HINT)
    try:
        return json.loads(
            text,
            parse_int=_whole_number,
            parse_constant=_no_constant,
            object_pairs_hook=unique_keys,
        )
    except RecursionError:  # a backstop: the scan above refuses what nests this deep
        raise HwtuneError(f"--hardware {path}: invalid JSON: nested too deeply") from None
    except json.JSONDecodeError as err:
        raise HwtuneError(
            f"--hardware {path}: line {err.lineno}: invalid JSON: {err.msg}"
        ) from err
    except ValueError as err:  # from the parse hooks (below, and a key given twice)
        raise HwtuneError(f"--hardware {path}: invalid JSON: {err}", hint=_DETECT_HINT) from None


def _whole_number(text: str) -> int:
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise ValueError(f"a number of {len(text.lstrip('-'))} digits ({text[:12]}…)")
    return int(text)


def _no_constant(name: str) -> object:
    # json.loads takes NaN and Infinity, which JSON does not have and no probe writes.
    raise ValueError(f"{name} is not a JSON number")


def resolve_share(
    flags: Mapping[str, Any], environ: Mapping[str, str], hardware: Hardware
) -> tuple[dict[str, Any], list[str], dict[str, str]]:
    """Add instances/instance from the launcher's local rank unless flags gave them; the
    third item names where each added value came from (`user_overrides` takes it)."""
    flags = dict(flags)
    if "instances" in flags or "instance" in flags:
        return flags, [], {}
    rank = local_rank(environ)
    if rank is None:
        alone = uncounted_rank(environ)
        if alone is not None:
            return flags, [uncounted_note(environ, alone, "planned as if it ran alone")], {}
        batch = slurm_batch(environ)
        if batch is None:
            return flags, [], {}
        return flags, [f"{SLURM_BATCH_NOTE} ({batch}); planned as one process"], {}
    rank_var, size_var = rank.variables
    limits = hardware.limits
    allowed = limits.cpuset_cpus if limits.cpuset_cpus is not None else hardware.cpu.online_cpus
    if already_pinned(limits.affinity_cpus, allowed):
        from hwtune.models.cpulist import name_cpus

        flags.update(instances=1, instance=0)
        bound = name_cpus(limits.affinity_cpus)
        note = (
            f"{rank.describe()}; the launcher already bound it to {bound}, so one instance is "
            "planned on those"
        )
        both = f"{rank_var}={environ[rank_var].strip()} bound to {bound} {FROM_LAUNCHER}"
        origins = {"instances": both, "instance": both}
    else:
        flags.update(instances=rank.size, instance=rank.rank)
        note = f"{rank.describe()}: planning slice {rank.rank} of {rank.size}"
        origins = {
            "instances": f"{size_var}={environ[size_var].strip()} {FROM_LAUNCHER}",
            "instance": f"{rank_var}={environ[rank_var].strip()} {FROM_LAUNCHER}",
        }
    if rank.uncounted is not None:
        # Never LOCAL_RANK's index with SLURM's count: the enclosing launcher's slice, whole.
        note = uncounted_note(
            environ, rank.uncounted, f"planned the whole share of the launcher around it, {note}"
        )
    return flags, [note], origins


def user_overrides(
    request: PlanRequest, flags: Mapping[str, Any], origins: Mapping[str, str] | None = None
) -> Overrides:
    """Config files < HWTUNE_* < --set < flags (and the workload the request names).
    `origins`: what `resolve_share` added to the flags from the launcher's variables, named
    so in errors (LOCAL_WORLD_SIZE=8, not an --instances the user never passed)."""
    from hwtune.pipeline.config import flag_name, keyword_name, load_overrides, with_flags

    spelled = keyword_name if request.keywords else flag_name
    added = origins or {}

    def named(name: str) -> str:
        return added.get(name) or spelled(name)

    overrides = with_flags(load_overrides(request.environ, request.sets), named=named, **flags)
    if request.workload is not None:
        overrides = with_flags(overrides, named=named, workload=request.workload)
    return overrides


def profile_for(request: PlanRequest) -> Planned:
    """Detect (or read) the hardware and plan once with everything the request names."""
    from hwtune.planner import fingerprint, plan

    hardware = load_hardware(request)
    flags, notes, origins = resolve_share(request.flags(), request.environ, hardware)
    overrides = user_overrides(request, flags, origins)
    notes.extend(_home_note(request.environ, bool(request.measured and overrides.workload)))
    measured: dict[str, Setting] = {}
    measurement: Measurement | None = None
    if request.measured and overrides.workload:
        measured, measurement, why = _measured(fingerprint(hardware), overrides, request.environ)
        notes.extend(why)
    try:
        profile = plan(hardware, overrides=overrides, measured=measured)
    except HwtuneError as err:
        if not measured or measurement is None:
            raise
        # e.g. a measured instance count beyond this machine's cores: the rules still plan.
        notes.append(f"tuned results ignored: {measurement.file}: {err}")
        profile, measured, measurement = plan(hardware, overrides=overrides), {}, None
    if measurement is not None:
        profile = dataclasses.replace(profile, measurement=measurement)
    from_measurement = "instances" in measured and overrides.instances is None
    notes.extend(_copies_note(profile, request.for_exec))
    return Planned(hardware, profile, tuple(notes), from_measurement)


def _copies_note(profile: Profile, for_exec: bool) -> list[str]:
    """Where batch mode chose several copies and this is not exec starting them: the plan is
    copy 0's share of the node, which a lone process would run on."""
    copies = profile.copies
    if for_exec or copies is None or profile.intent.instances < 2:
        return []
    from hwtune.planner.instances import cpus_named

    mine = profile.instance
    return [
        f"batch mode plans {profile.intent.instances} copies; this plan is copy 0's share "
        f"({cpus_named(mine.cpus, mine.cpus_assumed)}): start the job with `hwtune exec "
        "--mode batch -- CMD`, which runs every copy, or give --instances 1 for one process"
    ]


def _home_note(environ: Mapping[str, str], measured: bool) -> list[str]:
    """One note when there is no home to find the per-user files under (hwtune.paths.home):
    they are only missing, the plan is made without them."""
    from hwtune.paths import config_dir, home_problem, tuned_dir

    missing = home_problem(environ, (config_dir, tuned_dir) if measured else (config_dir,))
    if missing is None:
        return []
    what = "config file, knowledge or tuned results" if measured else "config file or knowledge"
    return [f"{missing.message}: no per-user {what} read (hint: {missing.hint})"]


def _measured(
    hardware_fingerprint: str, overrides: Overrides, environ: Mapping[str, str]
) -> tuple[dict[str, Setting], Measurement | None, list[str]]:
    """The named workload's measured settings that fit this plan, the measurement, and notes
    on what did not fit."""
    from hwtune.pipeline.measured import find_result, measured_settings, read_result

    workload = str(overrides.workload)
    try:
        path = find_result(hardware_fingerprint, workload, environ=environ)
        record = read_result(path, hardware_fingerprint) if path is not None else None
    except NoHomeError:  # profile_for's note says so
        return {}, None, []
    except HwtuneError as err:
        return {}, None, [f"tuned results ignored: {err}"]
    if path is None or record is None:
        return {}, None, [f"workload {workload!r}: nothing measured on this hardware yet"]
    if record.get("workload") not in (None, workload):  # a file name shared by two names
        why = f"{path} holds workload {record.get('workload')!r}"
        return {}, None, [f"tuned results of {workload!r} not used: {why}"]
    mode = overrides.mode or "throughput"
    tuned_model = record.get("model") or "unknown"
    if record.get("mode") not in (None, mode):
        why = f"measured in {record.get('mode')} mode, planning {mode}"
        return {}, None, [f"tuned results of {workload!r} not used: {why}"]
    if overrides.model not in (None, tuned_model):
        why = f"measured with model {tuned_model}, and {overrides.model} was asked for"
        return {}, None, [f"tuned results of {workload!r} not used: {why}"]
    settings = measured_settings(record)
    notes: list[str] = []
    # In batch mode a measured count is how many copies there are (exec starts them; every
    # other plan is copy 0's share). In the other modes the count is the user's: `hwtune tune`
    # measures one job there (tune/tuner.py `instance_counts`), and a count stored by an
    # older version that searched it would have exec start several trainings. Threads apply
    # where the counts agree.
    keep_count = mode == "batch"
    found = settings.get("instances") if keep_count else settings.pop("instances", None)
    count = found.value if found is not None and isinstance(found.value, int) else 1
    planned = overrides.instances or (count if keep_count else 1)
    if count != planned and [settings.pop(key) for key in _THREAD_KEYS if key in settings]:
        # Threads measured per copy of N copies do not fit a slice of another size.
        why = f"measured for {plural(count, 'instance')}, planning {planned}"
        if not keep_count and overrides.instances is None:
            why += " (a measured count holds in batch mode only: `hwtune tune --mode batch`)"
        notes.append(f"measured thread counts of {workload!r} not used: {why}")
    if count != planned:
        settings.pop("instances.pinned", None)  # pinning measured for another count
        settings = _unmeasured_here(settings, count, planned)
    measurement = Measurement(
        workload=workload,
        created=str(record.get("created") or "unknown"),
        ratio=float(record["ratio"]) if count == planned else None,
        file=str(path),
        instances=count,
    )
    return settings, measurement, notes


def _unmeasured_here(settings: dict[str, Setting], count: int, planned: int) -> dict[str, Setting]:
    """The measured settings of a result for `count` instances, taken into a plan of `planned`:
    still the tuner's pick ("measured"), but the speed-up was measured for that other
    combination, so the reason no longer claims it ("measured: 1.83× over the rule's choice"
    on a setting of one instance that only ran with the other settings of two)."""
    reason = (
        f"from a `hwtune tune` result measured for {plural(count, 'instance')}; applied to "
        f"{planned} without the rest of that combination, so its speed-up is not claimed here"
    )
    return {key: dataclasses.replace(setting, reason=reason) for key, setting in settings.items()}
