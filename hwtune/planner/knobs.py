"""Environment knobs for TensorFlow's CPU runtime: oneDNN, and OpenMP only where it is linked.

Stock TensorFlow runs oneDNN on its own Eigen thread pool, so OMP_NUM_THREADS and KMP_* do
nothing there; only OpenMP builds (intel-tensorflow, `--config=mkl` builds, ITEX with its OMP
pool) read them (tensorflow/tensorflow#56697; TF .bazelrc `build:mkl` sets
build_with_openmp=true while the release configs do not; Intel: "OpenMP tuning only applies to
Intel Optimization for TensorFlow"). hwtune emits what takes effect and says why it left the
rest out (`hwtune explain KMP_AFFINITY`).
"""

from __future__ import annotations

from hwtune.models.hardware import Hardware
from hwtune.models.profile import Intent, LeftOut, Setting

OPENMP_KNOBS = ("OMP_NUM_THREADS", "KMP_AFFINITY", "KMP_BLOCKTIME", "KMP_SETTINGS")
EIGEN_REASON = (
    "left out: this TensorFlow runs oneDNN on its Eigen thread pool (no OpenMP linked), so "
    "{what} has no effect (TensorFlow issue #56697, "
    "https://github.com/tensorflow/tensorflow/issues/56697)"
)
# Where TensorFlow builds no oneDNN (the `onednn` rule below), there is no oneDNN to run: its
# CPU kernels are Eigen's, on the same pool.
EIGEN_NO_ONEDNN_REASON = (
    "left out: this TensorFlow runs its CPU kernels on its Eigen thread pool (no OpenMP "
    "linked; no oneDNN on {arch}), so {what} has no effect (TensorFlow issue #56697, "
    "https://github.com/tensorflow/tensorflow/issues/56697)"
)
ONEDNN_ARCHES = ("x86_64", "aarch64", "unknown")

# Intel's TensorFlow CPU BKMs (Model Zoo per-model config.json, e.g. ResNet50 v1.5; the ITEX
# launcher; PyTorch's run_cpu): compact,1,0 puts one thread per core before any SMT sibling;
# a 1 ms block time keeps threads spinning between the back-to-back ops of one step and then
# frees the core (the default, 200 ms, starves other pools and instances). The guides give the
# same values for max-throughput and real-time inference, so every mode gets them;
# OMP_NUM_THREADS follows intra-op.
KMP_VALUES: dict[str, str] = {"KMP_AFFINITY": "granularity=fine,compact,1,0", "KMP_BLOCKTIME": "1"}


def onednn_on(setting: Setting) -> bool:
    """Whether TensorFlow reads this TF_ENABLE_ONEDNN_OPTS value as on: it lowercases it and
    takes "1" or "true" (ReadBoolFromEnvVar, tensorflow/core/util/env_var.cc)."""
    return str(setting.value).strip().lower() in ("1", "true")


def onednn(hw: Hardware, intra: int, bf16_on_cpu: bool, bf16_enabled: bool) -> Setting:
    """TF_ENABLE_ONEDNN_OPTS, planned together with CPU bf16: `bf16_on_cpu` says the CPU runs
    bf16 (eligible), `bf16_enabled` whether the intent turns it on (--precision auto)."""
    if hw.cpu.arch not in ONEDNN_ARCHES:
        return Setting(
            "0",
            f"TensorFlow builds oneDNN only for x86-64 and aarch64, not {hw.cpu.arch}",
        )
    if bf16_on_cpu and bf16_enabled:
        return Setting(
            "1",
            "planned with bf16: oneDNN's bf16 kernels made a small Keras CNN 1.5× faster (on a "
            "2-vCPU EPYC VM, TF 2.21), "
            "and with TF_ENABLE_ONEDNN_OPTS=0 the same model in bf16 ran 40× slower",
        )
    if bf16_on_cpu and intra <= 1:
        # Paired rounds of two one-thread copies of the 3×512 MLP, XLA off in both arms (5
        # rounds on a 2-vCPU EPYC Zen 4 VM, TF 2.21): medians 40,167 vs 33,913 samples/s.
        return Setting(
            "1",
            "a CPU with bf16 kernels, one intra-op thread: oneDNN stays on, the path "
            "mixed_bfloat16 needs (bf16 without it ran 40× slower), and its fp32 kernels ran a "
            "3×512 Keras MLP with one thread 1.18× faster than with it off (on a 2-vCPU EPYC "
            "Zen 4 VM, TF 2.21)",
        )
    if intra <= 1 and hw.cpu.arch == "x86_64":
        # Paired rounds (bench/paired_arms.py), one copy alone on one CPU, oneDNN's kernels
        # limited with ONEDNN_MAX_CPU_ISA to what a CPU without bf16 runs (on a 2-vCPU EPYC
        # Zen 4 VM, TF 2.21, 6-8 rounds each): the small Keras CNN 1.54× [1.50-1.58] (AVX2)
        # and 1.68× [1.60-1.76] (AVX512_CORE) faster with oneDNN on; the 3×512 MLP with XLA
        # 1.03× [1.00-1.05] (AVX2), and on AVX512_CORE with XLA off (the jit rule then)
        # 1.08× [1.06-1.11], each over oneDNN off with XLA. This replaces a rule of oneDNN off
        # for one thread, taken from one report on Sapphire Rapids (tensorflow/tensorflow#56350)
        # and never measured on a CPU it applied to.
        return Setting(
            "1",
            "one intra-op thread on an x86 CPU without bf16: oneDNN stays on, as its kernels, "
            "limited to AVX2 or to AVX-512 without bf16, trained a small Keras CNN 1.54-1.68× "
            "faster with one thread than with oneDNN off, and a 3×512 MLP 1.03-1.08× (paired "
            "rounds on a 2-vCPU EPYC Zen 4 VM, TF 2.21); "
            "tensorflow/tensorflow#56350 reports the opposite for one model on Sapphire "
            "Rapids, so `hwtune tune` measures it",
        )
    if intra <= 1:
        return Setting(
            "0",
            f"a single intra-op thread on {hw.cpu.arch}, where oneDNN's one-thread cost has not "
            "been measured: off, as the one public report found it slower with one thread "
            "(an x86 Sapphire Rapids, not this CPU: 31.1 s ON vs 16.9 s OFF with "
            "intra=inter=1, tensorflow/tensorflow#56350); `hwtune tune` measures it on this "
            "machine",
        )
    if hw.cpu.arch == "aarch64":
        return Setting(
            "1",
            "oneDNN with the Arm Compute Library is TensorFlow's fast aarch64 CPU path (AWS's "
            "Graviton TensorFlow guide sets TF_ENABLE_ONEDNN_OPTS=1)",
        )
    return Setting(
        "1",
        "oneDNN kernels are TensorFlow's fast CPU path: on by default since TF 2.9 only on CPUs "
        "with AVX512_VNNI/BF16/AMX, so hwtune sets it for every x86 CPU (TF 2.9 release "
        "notes; numerics may differ slightly in the last bits)",
    )


def openmp_env(
    hw: Hardware, intent: Intent, *, unpinned_instances: bool = False
) -> tuple[dict[str, Setting], list[LeftOut], str | None]:
    """OMP_*/KMP_* where the installed TensorFlow links an OpenMP runtime, else left_out; and
    that build, whose OMP_NUM_THREADS follows intra-op (`Threads.openmp`, rendered with it).

    With several instances left unpinned (a tune result: planner/core.py `_pinning`),
    binding is turned off: each copy starts with the whole CPU mask, and a compact or close
    binding places every copy's threads from the mask's first CPU on, so all copies would
    share those cores (Intel "Thread Affinity Interface": compact binds thread n+1 next to
    thread n; OpenMP 4.0: places are counted from the first)."""
    tf = hw.tensorflow
    if tf is None or tf.threading_runtime != "openmp":
        basis = ""
        if tf is None:
            basis = " (no TensorFlow found: planned for stock TensorFlow)"
        elif tf.threading_runtime_basis:  # its first clause says what was looked at
            basis = f" (detected: {tf.threading_runtime_basis.split(';')[0]})"
        template = EIGEN_REASON if hw.cpu.arch in ONEDNN_ARCHES else EIGEN_NO_ONEDNN_REASON
        left = [
            LeftOut(name, template.format(what=_what(name), arch=hw.cpu.arch) + basis)
            for name in OPENMP_KNOBS
        ]
        return {}, left, None
    library = tf.openmp_library or "an OpenMP runtime"
    build = f"{tf.distribution} {tf.version} links {library}"
    env: dict[str, Setting] = {}
    stacked = (
        "the instances are left unpinned, so each starts with every CPU and a binding would "
        "place all copies' threads on the same first cores"
    )
    if "gomp" in library or tf.openmp_library is None:
        # GNU OpenMP ignores KMP_*; its equivalents are the standard OMP_PROC_BIND/OMP_PLACES,
        # which every OpenMP runtime reads (OpenMP 4.0): all that holds when the runtime linked
        # is not known (binaries unreadable: tensorflow-cpu-aws 2.12 links libgomp).
        why = (
            f"left out: {build}, and GNU OpenMP ignores KMP_* (it reads OMP_*/GOMP_*)"
            if tf.openmp_library
            else f"left out: {build}, not known which: KMP_* work in Intel and LLVM OpenMP "
            "only, GNU OpenMP ignores them"
        )
        left = [LeftOut(name, why) for name in OPENMP_KNOBS if name.startswith("KMP_")]
        if unpinned_instances:
            env["OMP_PROC_BIND"] = Setting("false", f"{build}: {stacked} (OpenMP 4.0 spec)")
            left.append(LeftOut("OMP_PLACES", f"left out: {build}: threads are not bound"))
            return env, left, build
        runtime = "GNU OpenMP pins" if tf.openmp_library else "every OpenMP runtime pins"
        env["OMP_PROC_BIND"] = Setting(
            "close",
            f"{build}: {runtime} with OMP_PROC_BIND (KMP_AFFINITY is Intel/LLVM OpenMP only)",
        )
        env["OMP_PLACES"] = Setting(
            "cores",
            f"{build}: one place per physical core, so threads "
            "do not share a core's SMT siblings (OpenMP 4.0 spec)",
        )
        return env, left, build
    env["KMP_AFFINITY"] = (
        Setting("disabled", f"{build}: {stacked} (Intel OpenMP: KMP_AFFINITY=disabled)")
        if unpinned_instances
        else Setting(
            KMP_VALUES["KMP_AFFINITY"],
            f"{build}: pin one thread per physical core before any SMT sibling (Intel Model "
            "Zoo BKMs; ITEX and PyTorch launchers use the same value)",
        )
    )
    env["KMP_BLOCKTIME"] = Setting(
        KMP_VALUES["KMP_BLOCKTIME"],
        f"{build}: spin 1 ms after a parallel region, then yield the core (Intel BKM for "
        f"{intent.mode}; the 200 ms default starves other thread pools and instances)",
    )
    env["KMP_SETTINGS"] = Setting(
        "1",
        f"{build}: print the OpenMP runtime's settings at start-up, so a run shows they took "
        "effect (Intel Model Zoo BKMs set it)",
    )
    return env, [], build


def _what(name: str) -> str:
    return "KMP_*" if name.startswith("KMP_") else name
