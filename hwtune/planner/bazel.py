"""Bazel options and a bazelrc for building TensorFlow from source for this machine.

Facts per TensorFlow version come from knowledge (tensorflow_versions.json, compilers.json);
the rules: one -march/-mcpu for the microarchitecture, checked against the clang the version's
official build uses and against the CPU flags the guest really shows, else the next safer
target, down to an x86-64-vN level (x86-64 psABI levels); the GPUs' compute capabilities in the
version's scheme (TF_CUDA_COMPUTE_CAPABILITIES ≤ 2.17, HERMETIC_CUDA_COMPUTE_CAPABILITIES from
2.18), SASS for all but the highest, PTX+SASS for it; `--config` names only from that
version's .bazelrc; a GPU host always gets a CUDA build (the official capability list when the
capability is unknown), and TF ≤ 2.17's cuda_clang gets TensorRT switched off again. With
--root the build host is another machine, so --host_copt is left out. The options go into a
bazelrc (bazel_templates/*.tmpl) rather than `--config=opt`, which exists only after
./configure ran (tensorflow/tensorflow#60217).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from string import Template

from hwtune.errors import KnowledgeError, PlanError
from hwtune.models.hardware import Gpu, Hardware
from hwtune.models.profile import Bazel, Intent, LeftOut
from hwtune.models.words import plural
from hwtune.planner.cpu_target import added_back, choose_target, tune_target
from hwtune.planner.cuda_compat import cannot_load
from hwtune.planner.knowledge import Knowledge, TfVersionEntry, version_tuple


def resolve_tf_version(
    hw: Hardware, intent: Intent, knowledge: Knowledge, asked_by: str | None = None
) -> tuple[TfVersionEntry | None, str]:
    """The TensorFlow version to plan a build for, and why. `asked_by` is where the intent's
    tf_version came from (an `Overrides` origin: "--tf-version", "HWTUNE_TF_VERSION", a config
    file's path; None: the intent given to `plan()`), named in the error and the reason."""
    known = sorted(knowledge.tf_by_version, key=version_tuple)
    span = f"{known[0]}–{known[-1]}" if known else "none"
    if intent.tf_version:
        key = _minor(intent.tf_version)
        entry = knowledge.tf_by_version.get(key)
        if entry is None:
            nearest = _nearest_version(key, known)
            raise PlanError(
                f"{_asked_value(asked_by, intent.tf_version)}: hwtune knows TensorFlow "
                f"{span} only",
                hint=f"did you mean {nearest}?"
                if nearest
                else "add an entry to tensorflow_versions.json",
            )
        return entry, f"TensorFlow {key}, as asked ({_asked_where(asked_by)})"
    if hw.tensorflow is not None:
        key = _minor(hw.tensorflow.version)
        entry = knowledge.tf_by_version.get(key)
        if entry is None:
            return None, (
                f"left out: the installed TensorFlow {hw.tensorflow.version} is not in the "
                f"knowledge (TensorFlow {span}); pass --tf-version"
            )
        return (
            entry,
            f"the installed TensorFlow ({hw.tensorflow.distribution} {hw.tensorflow.version})",
        )
    newest = knowledge.newest_tf
    return newest, f"no TensorFlow installed: the newest version hwtune knows ({newest.key})"


def _asked_where(origin: str | None) -> str:
    """Where a tf_version was asked for, in words: a flag or variable as is, a config file
    with its key, plan()'s own argument where no override set it."""
    if origin is None:
        return "tf_version"
    if origin.startswith(("--", "HWTUNE_", "configure(")):
        return origin
    return f"'tf_version' in {origin}"


def _asked_value(origin: str | None, value: str) -> str:
    """The asked value as its source spells it: `--tf-version 2.99`, `HWTUNE_TF_VERSION=2.99`,
    `/etc/hwtune/config.toml: 'tf_version' = "2.99"`."""
    if origin is None:
        return f"tf_version {value}"
    if origin.startswith("--"):
        return f"{origin} {value}"
    if origin.startswith("HWTUNE_"):
        return f"{origin}={value}"
    if origin.startswith("configure("):  # a keyword argument
        return f"configure(tf_version={value!r})"
    return f"{origin}: 'tf_version' = \"{value}\""


def _nearest_version(key: str, known: list[str]) -> str | None:
    """The known version numerically nearest to `key` (2.14 -> 2.15, 2.99 -> 2.21, 3.0 ->
    2.21), not the most similar string (difflib took 2.99 for 2.19)."""
    asked = version_tuple(key)[:2]
    if not known or len(asked) < 2:
        return known[-1] if known else None

    def distance(candidate: str) -> tuple[int, int]:
        have = version_tuple(candidate)[:2]
        return (abs(have[0] - asked[0]), abs(have[1] - asked[1]) if have[0] == asked[0] else 0)

    if asked < version_tuple(known[0])[:2]:
        return known[0]
    if asked > version_tuple(known[-1])[:2]:
        return known[-1]
    return min(known, key=distance)


def _minor(version: str) -> str:
    parts = version_tuple(version)
    return ".".join(str(p) for p in parts[:2]) if len(parts) >= 2 else version


def _official_ccs(tf: TfVersionEntry) -> set[tuple[int, ...]]:
    """ "sm_60,...,compute_90" -> {(6, 0), ..., (9, 0)}: the version's official wheel list."""
    ccs: set[tuple[int, ...]] = set()
    for item in tf.official_cuda_compute_capabilities.split(","):
        digits = item.strip().rpartition("_")[2]
        if len(digits) >= 2 and digits.isdigit():
            ccs.add((int(digits[:-1]), int(digits[-1])))
    return ccs


def cuda_capabilities(gpus: tuple[Gpu, ...], tf: TfVersionEntry) -> tuple[str | None, list[str]]:
    """ "sm_70,compute_80": SASS for all but the highest capability, PTX+SASS for the highest.

    A GPU of unknown capability gets the version's official list (what its wheels ship), so a
    GPU host always gets a CUDA build; one the version no longer supports is said plainly.
    """
    notes: list[str] = []
    lowest, highest = version_tuple(tf.min_cuda_cc), version_tuple(tf.max_cuda_cc)
    ccs: set[tuple[int, ...]] = set()
    unknown = [g.index for g in gpus if len(version_tuple(g.compute_capability or "")) < 2]
    if unknown:
        shown = ",".join(map(str, unknown))
        notes.append(
            f"GPU{'s' if len(unknown) > 1 else ''} {shown}: compute capability unknown: "
            f"compiled for TF {tf.key}'s official list ({tf.official_cuda_compute_capabilities},"
            " its .bazelrc's cuda_clang), what its GPU wheels ship"
        )
        ccs |= _official_ccs(tf)
    for gpu in gpus:
        cc = version_tuple(gpu.compute_capability or "")[:2]
        if len(cc) < 2:
            continue
        elif cc < lowest:
            notes.append(
                f"GPU {gpu.index} ({gpu.name}): compute capability {_dotted(cc)} is below TF "
                f"{tf.key}'s minimum {tf.min_cuda_cc}: TensorFlow {tf.key} cannot run on it, "
                "so it is left out of the build"
            )
        elif cc > highest:
            notes.append(_newer_than_cuda_note(gpu.index, cc, highest, tf))
            ccs.add(highest)
        else:
            ccs.add(cc)
    if not ccs:
        return None, notes
    ordered = sorted(ccs)
    codes = [f"sm_{_code(cc)}" for cc in ordered[:-1]] + [f"compute_{_code(ordered[-1])}"]
    return ",".join(codes), notes


def _newer_than_cuda_note(
    index: int, cc: tuple[int, ...], highest: tuple[int, ...], tf: TfVersionEntry
) -> str:
    """Why a GPU newer than the version's CUDA gets PTX, and what SASS would take, in this
    version's own terms: its CUDA setting (hermetic or ./configure's), its clang, and
    --config=cuda_nvcc only where its .bazelrc has it."""
    hermetic = tf.cuda_scheme == "hermetic"
    cuda_setting = "HERMETIC_CUDA_VERSION" if hermetic else "TF_CUDA_VERSION (./configure)"
    nvcc = (
        " — --config=cuda_nvcc (tensorflow/tensorflow PR #123945)"
        if "cuda_nvcc" in tf.configs
        else f"; TF {tf.key}'s .bazelrc has no nvcc config for it"
    )
    return (
        f"GPU {index}: CUDA {tf.cuda_version} cannot compile SASS for sm_{_code(cc)}; "
        f"compute_{_code(highest)} PTX is JIT-compiled on it by the driver. sm_{_code(cc)} "
        f"SASS needs a newer {cuda_setting} (the first CUDA whose release notes add "
        f"sm_{_code(cc)}) and a CUDA compiler that knows it: clang {tf.clang}, TF {tf.key}'s "
        f"official one, does not{nvcc}"
    )


def _code(cc: tuple[int, ...]) -> str:
    return f"{cc[0]}{cc[1]}"


def _dotted(cc: tuple[int, ...]) -> str:
    return ".".join(str(p) for p in cc)


def _whose_capabilities(hw: Hardware, gpus: tuple[Gpu, ...]) -> str:
    """Whose capabilities the build lists: every GPU of the node (`hw.gpus`), also where the
    caller's CUDA_VISIBLE_DEVICES (`hw.gpu_visibility`) leaves it fewer. A build made on a
    node is for that node's jobs, and the next one may be given other GPUs of it."""
    seen = hw.gpu_visibility
    if seen is None or (seen.gpus is not None and set(seen.gpus) >= {g.index for g in gpus}):
        return "the detected GPUs' compute capabilities"
    return (
        f"the compute capabilities of all {plural(len(gpus), 'GPU')} of the node: a build "
        f"made here is for the node's jobs, not only this process's GPUs ({seen.reason})"
    )


def plan_bazel(
    hw: Hardware,
    intent: Intent,
    gpus: tuple[Gpu, ...],
    knowledge: Knowledge,
    fingerprint: str,
    tf_asked_by: str | None = None,
) -> tuple[Bazel | None, list[LeftOut]]:
    tf, why_version = resolve_tf_version(hw, intent, knowledge, tf_asked_by)
    if tf is None:
        return None, [LeftOut("bazel", why_version)]
    options: list[str] = []
    reasons: list[str] = [f"tf_version {tf.key}: {why_version}"]
    env: dict[str, str] = {
        "TF_NEED_ROCM": "0",
        "TF_SET_ANDROID_WORKSPACE": "0",
    }

    def add(option: str, reason: str) -> None:
        options.append(option)
        reasons.append(f"{option}: {reason}")

    def config(name: str, reason: str) -> None:
        if name in tf.configs:  # never a name this version's .bazelrc lacks
            add(f"--config={name}", reason)
        else:
            reasons.append(
                f"--config={name}: left out, TensorFlow {tf.key}'s .bazelrc has no build:{name}"
            )

    left: list[LeftOut] = []
    built = f"a TensorFlow {tf.key} CUDA build (CUDA {tf.cuda_version})"
    driver = cannot_load(hw, tf.cuda_version, built, knowledge) if gpus else None
    if driver:
        # A CUDA build this driver cannot load runs on the CPU alone (as the runtime plan says):
        # the GPU part of the build would be hours of work no job here can use.
        gpus = ()
        left.append(LeftOut("bazel.cuda", f"left out, so the build is CPU-only: {driver}"))
    caps, cap_notes = cuda_capabilities(gpus, tf) if gpus else (None, [])
    if gpus and not caps:
        lowest = min(version_tuple(g.compute_capability or "")[:2] for g in gpus)
        older = [
            e.key
            for e in sorted(knowledge.tf_versions, key=lambda e: version_tuple(e.key))
            if version_tuple(e.min_cuda_cc)[:2] <= lowest
        ]
        alternative = (
            f"TensorFlow {', '.join(older)} still build for it (--tf-version)"
            if older
            else "no TensorFlow version hwtune knows builds for it"
        )
        left.append(
            LeftOut(
                "bazel.cuda",
                f"left out: no GPU of this machine is supported by TensorFlow {tf.key} "
                f"(compute capability ≥ {tf.min_cuda_cc}), so the build is CPU-only; "
                f"{alternative}",
            )
        )
    if caps:
        config(
            "cuda_clang",
            "CUDA with clang, the official toolchain (configure's default TF_CUDA_CLANG=1)",
        )
        if tf.cuda_scheme == "hermetic":
            config("cuda_wheel", "the wheel uses the pip nvidia-* CUDA libraries (TF ≥ 2.18)")
    if hw.cpu.arch == "aarch64":
        config(
            "mkl_aarch64_threadpool",
            "oneDNN + Arm Compute Library on TensorFlow's Eigen pool, "
            "as the official aarch64 wheel",
        )
    target, target_notes = choose_target(hw, tf, knowledge)
    reasons.extend(f"cpu target: {note}" for note in target_notes)
    if target is not None:
        # An arrow only where the target differs from the CPU's microarchitecture (znver5 →
        # znver4 for a clang that predates znver5); "power9 → power9" read as a translation.
        chosen = (
            f"{target.key}, this CPU's microarchitecture"
            if hw.cpu.microarch == target.key
            else f"{hw.cpu.microarch or 'this CPU'} → {target.key}"
        )
        why = (
            f"{chosen}, accepted by clang {tf.clang} "
            f"(TF {tf.key}'s official compiler; needs ≥ {target.clang_min})"
        )
        model = hw.cpu.model_microarch
        if model and model != hw.cpu.microarch:
            why += f"; visible flags decide -march: {hw.cpu.microarch_basis}"
        add(f"--copt={target.flag}", why)
        extra = added_back(hw, tf, knowledge, target)
        for flag, extra_why in extra:
            add(f"--copt={flag}", extra_why)
        tune, tune_why = tune_target(hw, tf, knowledge, target)
        flags = " ".join([target.flag] + [flag for flag, _ in extra])
        if tune:
            add(f"--copt=-mtune={tune}", tune_why)
            flags += f" -mtune={tune}"
        if hw.root == "/":
            add(
                f"--host_copt={target.flag}", "built on this machine, so tools may use its ISA too"
            )
            for flag, _ in extra:
                add(f"--host_copt={flag}", "built on this machine, so tools may use it too")
            if tune:
                add(f"--host_copt=-mtune={tune}", "tools built here run here too")
            env["CC_OPT_FLAGS"] = f"{flags} -Wno-sign-compare"
        else:
            reasons.append(
                "--host_copt: left out, planned for a captured machine (--root or --hardware), "
                f"not for the build host: tools built with {target.flag} (protoc, code "
                "generators) run on the build host and die with SIGILL where it lacks that "
                "ISA (Bazel user manual: --host_copt applies to the exec configuration); "
                "CC_OPT_FLAGS keeps only -Wno-sign-compare, since ./configure copies it into "
                "--host_copt too"
            )
            env["CC_OPT_FLAGS"] = "-Wno-sign-compare"
    else:
        reasons.append(
            f"cpu target: none for arch {hw.cpu.arch}; the compiler default is kept"
            if hw.cpu.flags
            else "cpu target: no -march, the CPU's flags are unknown (no flags line) and every "
            "target needs some; the compiler default is kept"
        )
        tune, tune_why = tune_target(hw, tf, knowledge, None)
        if tune:
            add(f"--copt=-mtune={tune}", tune_why)
    env["TF_NEED_CUDA"] = "1" if caps else "0"
    if caps:
        # ./configure asks "Use Clang to build TensorFlow?" only when TF_NEED_CUDA is 0 (its
        # main(): choose_compiler sits in the else branch); a CUDA build's compiler is
        # TF_CUDA_CLANG's answer.
        reasons.append(
            "TF_NEED_CLANG (./configure): left out, ./configure reads it only for a build "
            "without CUDA; a CUDA build takes its compiler from TF_CUDA_CLANG (1: clang)"
        )
    else:
        hermetic_cc = tf.bazelrc_sets("USE_HERMETIC_CC_TOOLCHAIN")
        env["TF_NEED_CLANG"] = "1"
        if hermetic_cc is not None and hermetic_cc.value == "1":
            # ./configure's TF_NEED_CLANG=1 writes CLANG_COMPILER_PATH and --repo_env=CC for a
            # local clang, which the hermetic toolchain does not read; and it must find one, or
            # the unattended `yes "" | ./configure` fails ten times over on a machine without it.
            env["TF_NEED_CLANG"] = "0"
            reasons.append(
                f"TF_NEED_CLANG=0 (./configure): TensorFlow {tf.key} compiles with the "
                "hermetic clang its .bazelrc selects (build --repo_env "
                "USE_HERMETIC_CC_TOOLCHAIN=1), so a local clang's path (CLANG_COMPILER_PATH, "
                "--repo_env=CC) would take no effect, and ./configure need not look for one"
            )
    if caps:
        var = (
            "HERMETIC_CUDA_COMPUTE_CAPABILITIES"
            if tf.cuda_scheme == "hermetic"
            else "TF_CUDA_COMPUTE_CAPABILITIES"
        )
        # After the configs: cuda_clang sets the official list, and the last --repo_env wins.
        unknown = any(len(version_tuple(g.compute_capability or "")) < 2 for g in gpus)
        what = (
            f"TF {tf.key}'s official list (a GPU's compute capability is unknown)"
            if unknown
            else _whose_capabilities(hw, gpus)
        )
        add(f"--repo_env={var}={caps}", f"{what}, {tf.cuda_scheme} scheme of TF {tf.key}")
        env[var] = caps
        env["TF_CUDA_CLANG"] = "1"
        if tf.cuda_scheme == "legacy":
            env["TF_NEED_TENSORRT"] = "0"
            if "tensorrt" in tf.configs:
                add(
                    "--repo_env=TF_NEED_TENSORRT=0",
                    f"TF {tf.key}'s build:cuda_clang includes --config=tensorrt "
                    "(--repo_env TF_NEED_TENSORRT=1), which overrides ./configure's answer and "
                    "fails without TensorRT installed (tensorflow/tensorflow#62689, #74370); "
                    "the last --repo_env wins",
                )
    reasons.extend(f"cuda: {note}" for note in cap_notes)
    pywrap_default = tf.bazelrc_sets("USE_PYWRAP_RULES")
    if tf.pywrap_rules and pywrap_default:
        # Only the settings that take effect: a line repeating the .bazelrc's own default
        # changes nothing.
        reasons.append(
            "--repo_env=USE_PYWRAP_RULES: left out, TensorFlow "
            f"{tf.key}'s .bazelrc already sets it for every build "
            f"(build --repo_env=USE_PYWRAP_RULES={pywrap_default.value})"
        )
    elif tf.pywrap_rules:
        add(
            "--repo_env=USE_PYWRAP_RULES=1",
            f"TF {tf.key}'s wheel build uses the pywrap rules (TensorFlow's build-from-source "
            "guide: bazel build //tensorflow/tools/pip_package:wheel "
            "--repo_env=USE_PYWRAP_RULES=1, from TF 2.20 on)",
        )
    if tf.wheel_name_env:
        wheel = "tensorflow" if caps else "tensorflow_cpu"
        add(f"--repo_env=WHEEL_NAME={wheel}", f"{tf.pip_target} names the wheel from WHEEL_NAME")
    _resources(hw, add)
    configure_env = {key: value for key, value in env.items() if key in tf.cc_env}
    bazel = Bazel(
        tf_version=tf.key,
        options=tuple(options),
        bazelrc="",
        configure_env=configure_env,
        reasons=tuple(reasons),
    )
    text = render_bazelrc(bazel, tf, knowledge, fingerprint)
    return Bazel(tf.key, bazel.options, text, configure_env, bazel.reasons), left


def _resources(hw: Hardware, add: Callable[[str, str], None]) -> None:
    """Bazel sizes its local job pool from the host, not the cgroup: give it the real budget."""
    online = len(hw.cpu.online_cpus) or hw.cpu.logical_cpus or 0
    if online and hw.limits.known and hw.limits.effective_cpus < online:
        add(
            f"--local_cpu_resources={hw.limits.effective_cpus}",
            f"{plural(hw.limits.effective_cpus, 'effective CPU')} of {online} online; "
            "Bazel counts the host's",
        )
    limit = hw.limits.memory_limit_bytes
    if limit is not None and (hw.memory.total_bytes is None or limit < hw.memory.total_bytes):
        megabytes = limit * 2 // 3 // 2**20  # Bazel's own default is HOST_RAM*.67
        add(f"--local_ram_resources={megabytes}", "two thirds of the cgroup memory limit, in MB")


def _render(knowledge: Knowledge, name: str, values: dict[str, str]) -> str:
    try:
        return Template(knowledge.templates[name]).substitute(values)
    except (KeyError, ValueError) as err:
        raise KnowledgeError(f"bazel_templates/{name}: cannot render: {err!r}") from err


def render_bazelrc(
    bazel: Bazel, tf: TfVersionEntry, knowledge: Knowledge, fingerprint: str
) -> str:
    return _render(
        knowledge,
        "tensorflow.bazelrc.tmpl",
        {
            "tf_version": tf.key,
            "bazel_version": tf.bazel,
            "clang": tf.clang,
            "fingerprint": fingerprint or "-",
            # The name `hwtune apply` writes it under (hwtune.apply.render.BAZELRC_FILE).
            "build_command": f"bazel --bazelrc=tensorflow.bazelrc build {tf.pip_target}",
            "reasons": "\n".join(f"#   {line}" for line in bazel.reasons),
            "build_lines": "\n".join(f"build {option}" for option in bazel.options),
        },
    )


def render_configure_env(bazel: Bazel, knowledge: Knowledge) -> str:
    """A shell file exporting `bazel.configure_env`, for `. ./file && yes "" | ./configure`."""
    exports = "\n".join(
        f"export {name}={shlex.quote(value)}"
        for name, value in sorted(bazel.configure_env.items())
    )
    return _render(
        knowledge, "configure_env.sh.tmpl", {"tf_version": bazel.tf_version, "exports": exports}
    )
