"""Node Feature Discovery: the machine's TensorFlow-relevant facts as node labels.

NFD's `local` feature source reads every file in
`/etc/kubernetes/node-feature-discovery/features.d/` and turns each `<namespace>/<name>[=<value>]`
line into a node label (the value defaults to "true"); lines starting with `#` are comments,
except the directives `# +expiry-time=<RFC3339>` (the lines after it are dropped once that time
has passed), `# +no-label` and `# +no-feature`. Files over 64 kB are ignored, dotfiles are
skipped, and writers are told to write a dotfile and rename it so that NFD never reads half a
file (kubernetes-sigs/node-feature-discovery, docs/usage/customization-guide.md, "Local feature
source" and "Input format"; source/local/local.go: `parseFeatureFile`, `MaxFeatureFileSize`,
the leading-dot skip in `getFeaturesFromFiles`).

Label values must be valid Kubernetes label values: at most 63 characters of `[A-Za-z0-9._-]`,
beginning and ending with an alphanumeric (Kubernetes docs, "Labels and Selectors", "Syntax and
character set"; apimachinery `validation.IsValidLabelValue`). Names follow the same rule for the
part after the prefix. `label_value` folds anything else into that alphabet.

Rendering is pure (`labels(hw)`, `render(labels, expiry=…)`); `write_feature_file` is the one
function that touches the disk.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

from hwtune.errors import ApplyError
from hwtune.models.hardware import Gpu, Hardware, gpu_links_known
from hwtune.models.profile import Profile
from hwtune.probes.nvidia_smi import known

PREFIX = "hwtune.io"
FILE_NAME = "hwtune"
DEFAULT_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
MAX_FILE_BYTES = 65536  # local.go MaxFeatureFileSize: bigger files are ignored whole
MAX_LABEL_LENGTH = 63  # Kubernetes label value and label name (after the prefix) limit

# Instruction sets a TensorFlow build or kernel choice depends on: label -> kernel cpuinfo flag.
# The kernel names are those of arch/x86/include/asm/cpufeatures.h and arm64's hwcap strings.
ISA_LABELS: tuple[tuple[str, str], ...] = (
    ("avx2", "avx2"),
    ("fma", "fma"),
    ("avx512", "avx512f"),
    ("avx512-vnni", "avx512_vnni"),
    ("avx512-bf16", "avx512_bf16"),
    ("avx512-fp16", "avx512_fp16"),
    ("avx-vnni", "avx_vnni"),
    ("amx", "amx_tile"),
    ("amx-bf16", "amx_bf16"),
    ("amx-int8", "amx_int8"),
    ("amx-fp16", "amx_fp16"),
    ("sve", "sve"),
    ("sve2", "sve2"),
    ("arm-bf16", "bf16"),
    ("arm-i8mm", "i8mm"),
)

_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9._-]+")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")
_CC = re.compile(r"([0-9]{1,3})\.([0-9])")
VALID_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def label_value(raw: object) -> str:
    """`raw` as a valid label value: disallowed runs become '-', the ends are trimmed to an
    alphanumeric, the length to 63. May return "" (a valid, empty value)."""
    text = str(raw).lower() if isinstance(raw, bool) else str(raw)
    text = _EDGE.sub("", _NOT_ALLOWED.sub("-", text))
    return _EDGE.sub("", text[:MAX_LABEL_LENGTH])


def nvlink_clique_size(gpus: Sequence[Gpu]) -> int:
    """The most GPUs that all reach each other over NVLink (1 with no NVLink, 0 without GPUs).

    An edge is a peer in `nvlink_peers` or a link whose kind is NV<n> (`nvidia-smi topo -m`),
    in either direction. Bron–Kerbosch with Tomita's pivot: without a pivot the search visits
    every subset of an all-NVLink (NVSwitch) board, 2^n calls (a second at 20 GPUs, hours at
    32), where with one it takes a single branch per level (Tomita, Tanaka, Takahashi, "The
    worst-case time complexity for generating all maximal cliques", TCS 363, 2006).
    """
    indices = {g.index for g in gpus}
    adjacent: dict[int, set[int]] = {i: set() for i in indices}
    for gpu in gpus:
        peers = set(gpu.nvlink_peers) | {
            link.peer for link in gpu.links if link.kind.upper().startswith("NV")
        }
        for peer in peers & indices - {gpu.index}:
            adjacent[gpu.index].add(peer)
            adjacent[peer].add(gpu.index)
    best = 0

    def expand(clique: set[int], candidates: set[int], excluded: set[int]) -> None:
        nonlocal best
        if not candidates and not excluded:
            best = max(best, len(clique))
            return
        if len(clique) + len(candidates) <= best:
            return  # cannot beat the clique already found
        # A maximal clique holds the pivot or one of its non-neighbours: branch on those only.
        pivot = max(candidates | excluded, key=lambda u: len(candidates & adjacent[u]))
        for v in sorted(candidates - adjacent[pivot]):
            expand(clique | {v}, candidates & adjacent[v], excluded & adjacent[v])
            candidates = candidates - {v}
            excluded = excluded | {v}

    expand(set(), set(indices), set())
    return best


def _uniform(values: Sequence[str | None]) -> str | None:
    distinct = {v for v in values if v}
    return distinct.pop() if len(distinct) == 1 and all(values) else None


def _cc_key(cc: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in cc.split("."))
    except ValueError:
        return (0,)


def sm_number(cc: str) -> int | None:
    """Compute capability MAJOR.MINOR as the integer nvcc names its targets by (`sm_80` for
    8.0, `sm_120` for 12.0; CMake's CUDA_ARCHITECTURES takes the same "80", "120"): a label
    value Kubernetes' `Gt`/`Lt` can compare, where "8.0" never matches (a node selector's
    `Gt`/`Lt` parse the label value with strconv.ParseInt and match nothing when it fails:
    apimachinery labels.Requirement.Matches; NFD's matchExpressions `Gt`/`Lt` take integers
    only, "customization guide", "MatchExpression"). None when a part is not a number or the
    minor is past one digit (no CUDA GPU has one; 10 * major + minor would then be ambiguous).
    """
    found = _CC.fullmatch(cc)
    return int(found.group(1)) * 10 + int(found.group(2)) if found else None


def _gpu_labels(hw: Hardware) -> dict[str, object]:
    # Each text field is filtered again with the probe's `known` (nvidia_smi.NOT_REPORTED):
    # the hardware may come from `plan --hardware` JSON or an older detect that kept "N/A" or
    # "Not Supported" as a value, which folded into a label would read "N-A", a value a
    # selector could match as if it were a fact.
    gpus = hw.gpus
    out: dict[str, object] = {"gpu-count": len(gpus)}
    capabilities = [known(g.compute_capability) for g in gpus]
    # As for memory below: with one GPU's capability unknown (a name the gpus table lacks, no
    # NVML), the lowest and highest of the others are not the node's, and a selector on them
    # could place a build on a GPU it has no kernels for.
    ccs = sorted({cc for cc in capabilities if cc}, key=_cc_key) if all(capabilities) else []
    if ccs:
        # The lowest capability is the one a CUDA build must include to run on every GPU here.
        out["gpu-cc"] = ccs[0]
        low, high = sm_number(ccs[0]), sm_number(ccs[-1])
        if low is not None:
            out["gpu-sm"] = low  # the same, as an integer that Gt/Lt can compare
        if len(ccs) > 1:
            out["gpu-cc-max"] = ccs[-1]
            if high is not None:
                out["gpu-sm-max"] = high
    # A probe names a GPU whose product name was not reported "GPU <index>" (probes.gpu
    # `_placeholder`): a stand-in, not a product to select on.
    product = _uniform([None if g.name == f"GPU {g.index}" else known(g.name) for g in gpus])
    if product:
        out["gpu-product"] = product
    family = _uniform([(known(g.architecture) or "").lower() or None for g in gpus])
    if family:
        out["gpu-family"] = family
    memory = [g.memory_bytes for g in gpus]
    # The smallest GPU's memory: with one GPU's size not reported (nvidia-smi "N/A") the
    # smallest is not known, and the least of the others could promise more than it has.
    if all(memory):
        out["gpu-memory-mib"] = min(m for m in memory if m) // (1 << 20)
    if any(g.mig_enabled for g in gpus):
        out["gpu-mig"] = True
    if len(gpus) > 1 and gpu_links_known(gpus):
        out["nvlink-clique-size"] = nvlink_clique_size(gpus)
    cuda = known(hw.cuda_driver_version)
    if cuda:
        out["cuda-driver"] = cuda
    return out


# int8 route key (int8_routes.json name) -> label; a route is labelled when the hardware has it,
# whatever the TensorFlow in the labelling image (the DaemonSet's image has none).
INT8_ROUTE_LABELS = {
    "oneDNN int8 kernels": "int8-onednn",
    "TFLite/LiteRT with XNNPACK": "int8-xnnpack",
    "TF-TRT INT8": "int8-tensorrt",
}
_MARCH = re.compile(r"^--copt=-m(?:arch|cpu)=(.+)$")


def plan_labels(profile: Profile) -> dict[str, object]:
    """Labels that follow from the plan, i.e. from the hardware alone when no TensorFlow is
    installed: what a source build targets, what precision and int8 paths are eligible, and
    whether oneDNN is recommended."""
    raw: dict[str, object] = {}
    if profile.bazel is not None:
        for option in profile.bazel.options:
            found = _MARCH.match(option)
            if found:
                raw["tf-march"] = found.group(1)
                break
    for policy in profile.precision.eligible:  # mixed_float16 -> mixed-float16
        raw[policy.replace("_", "-")] = True
    if profile.precision.enabled:
        raw["mixed-precision"] = profile.precision.enabled
    if profile.int8 is not None and profile.int8.eligible:
        raw["int8"] = True
        for route in profile.int8.routes:
            if route.route in INT8_ROUTE_LABELS:
                raw[INT8_ROUTE_LABELS[route.route]] = True
    onednn = profile.env.get("TF_ENABLE_ONEDNN_OPTS")
    if onednn is not None:  # a recommendation either way, so "false" is labelled too
        raw["onednn-recommended"] = onednn.value == "1"
    return raw


def labels(hw: Hardware, profile: Profile | None = None) -> dict[str, str]:
    """The labels for this machine, names without the prefix, values already sanitized.

    Absent facts are left out rather than labelled "unknown", so that a node selector on
    them does not match by accident; boolean ISA labels appear only when true, as NFD's own
    `cpu-cpuid.*` labels do.
    """
    cpu = hw.cpu
    raw: dict[str, object] = {}
    if cpu.arch != "unknown":
        raw["arch"] = cpu.arch
    if cpu.vendor:
        raw["cpu-vendor"] = cpu.vendor
    if cpu.microarch:
        raw["cpu-microarch"] = cpu.microarch
    if cpu.x86_64_level is not None:
        raw["x86-64-level"] = cpu.x86_64_level
    flags = set(cpu.flags)
    for name, flag in ISA_LABELS:
        if flag in flags:
            raw[name] = True
    if cpu.smt_enabled is not None:
        raw["smt"] = cpu.smt_enabled
    # Defaults (Limits.known) or no CPU list at all: the count of 1 is assumed, not measured
    # (probes.limits.effective_cpus, "no CPU list known (assumed 1)").
    if hw.limits.known and hw.limits.usable_cpus:
        raw["effective-cpus"] = hw.limits.effective_cpus
    if hw.numa:
        raw["numa-nodes"] = len(hw.numa)
    if hw.gpus:
        raw.update(_gpu_labels(hw))
    tf = hw.tensorflow
    if tf is not None:
        # "unknown" (no pip metadata) is an absent fact, not a value to select on
        named = {"tensorflow-version": tf.version, "tensorflow-distribution": tf.distribution}
        raw.update({name: value for name, value in named.items() if value != "unknown"})
        raw["tensorflow-cuda"] = tf.cuda_build
        raw["tensorflow-runtime"] = tf.threading_runtime
        if tf.onednn_default is not None:
            raw["tensorflow-onednn"] = tf.onednn_default
    if profile is not None:
        raw.update(plan_labels(profile))
    result: dict[str, str] = {}
    for name, value in raw.items():
        text = label_value(value)
        if text:
            result[label_value(name)] = text
    return result


def rfc3339(moment: datetime) -> str:
    """UTC, second precision, 'Z': the form Go's time.RFC3339 layout parses."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def render(
    found: Mapping[str, str], *, expiry: datetime | None = None, generated: datetime | None = None
) -> str:
    """The feature file text: a comment header, the expiry directive, one line per label."""
    lines = [
        "# Node Feature Discovery labels written by hwtune (`hwtune nfd`, `hwtune daemon "
        "--nfd`); rewritten atomically, do not edit."
    ]
    if generated is not None:
        lines.append(f"# generated {rfc3339(generated)}")
    if expiry is not None:
        lines.append(f"# +expiry-time={rfc3339(expiry)}")
    lines.extend(f"{PREFIX}/{name}={value}" for name, value in sorted(found.items()))
    return "\n".join(lines) + "\n"


def expiry_after(now: datetime, seconds: float) -> datetime:
    """`seconds` after `now`, rounded up to a whole second: `render` writes seconds, and
    truncating would stamp an expiry earlier than asked."""
    moment = now + timedelta(seconds=seconds)
    if moment.microsecond:
        moment += timedelta(microseconds=1_000_000 - moment.microsecond)
    return moment


def write_feature_file(
    directory: str | os.PathLike[str], text: str, name: str = FILE_NAME
) -> Path:
    """Write `directory/name` atomically: a dotfile (which NFD skips), fsync, rename over the
    old one, fsync the directory (`hwtune.fs.atomic.write_atomic`).

    Raises ApplyError naming the file when it cannot be written, or, running as root (the
    daemon under systemd), when another user could change where `directory` leads
    (`guard.check_directory`, as for apply's output: root must not create files through a
    link or in a directory someone else controls); ValueError when the text exceeds the 64 kB
    NFD reads.
    """
    from hwtune.fs.atomic import write_atomic
    from hwtune.fs.guard import check_directory

    data = text.encode()
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(
            f"feature file is {len(data)} bytes; NFD ignores files over {MAX_FILE_BYTES}"
        )
    target = Path(directory) / name
    missing = missing_directory(directory)
    if missing is not None:
        raise missing
    check_directory(target.parent)
    write_atomic(target, data, mode=0o644)
    return target


def missing_directory(
    directory: str | os.PathLike[str],
    *,
    option: str = "--nfd-dir",
    instead: str = "or leave out --nfd",
) -> ApplyError | None:
    """The error for a features.d directory that is not there, None when it is. On a machine
    without NFD the default one does not exist (nfd-worker's local feature source reads it:
    NFD Customization guide, "Local feature source",
    https://kubernetes-sigs.github.io/node-feature-discovery/v0.14/usage/customization-guide).
    `option` names the option that picks the directory, `instead` the other way out."""
    if Path(directory).is_dir():
        return None
    if os.fspath(directory) == DEFAULT_DIR:
        return ApplyError(
            f"{DEFAULT_DIR} does not exist: Node Feature Discovery's worker is not set up on "
            "this machine (it reads feature files from there)",
            hint=f"write where your NFD worker's features.d is mounted with {option} DIR, "
            f"{instead}",
        )
    what = "not a directory" if os.path.lexists(directory) else "does not exist"
    return ApplyError(
        f"{option} {os.fspath(directory)}: {what}",
        hint=f"give NFD's features.d directory (it must exist), {instead}",
    )
