"""XLA, mixed precision and data layout: which device does the math decides all three.

Mixed precision *eligibility* is a hardware fact kept apart from *enabling*, which the intent
decides: GPUs of compute capability ≥ 7.0 have float16 tensor cores (Volta), ≥ 8.0 bfloat16 too
(Ampere) — the Keras mixed-precision guide's thresholds; CPUs with AVX512_BF16 or AMX-BF16 run
bf16 through oneDNN, and only with oneDNN on.
"""

from __future__ import annotations

from hwtune.models.cpulist import format_cpulist
from hwtune.models.hardware import Gpu, Hardware
from hwtune.models.profile import Intent, Setting
from hwtune.planner import cuda_compat, gpu_units
from hwtune.planner.knowledge import Knowledge, TfVersionEntry, default_knowledge, version_tuple

CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# tensorflow.org/xla "Auto-clustering": on GPU, TF_XLA_FLAGS=--tf_xla_auto_jit=2 (global_jit_level
# ON_2, the aggressive clustering); on CPU auto-jit also needs --tf_xla_cpu_global_jit.
XLA_FLAGS = {"autoclustering": "--tf_xla_auto_jit=2", "on": "--tf_xla_auto_jit=1"}
CPU_XLA_FLAG = "--tf_xla_cpu_global_jit"
# XLA on a CPU depends on the model (TF 2.21 on 2-core EPYC VMs, Zen 3 and Zen 4, bench/results):
# a 3×512 Keras MLP trained 1.3-1.45× faster with XLA (it fuses the elementwise ops and the
# optimizer's update between the matmuls), a small Keras CNN 0.76-0.8× as fast: XLA's CPU
# backend runs convolutions with Eigen (xla/service/cpu/runtime_conv2d.cc), not with oneDNN.
CPU_XLA_REASONS: dict[str, tuple[str, str]] = {
    "dense": (
        "autoclustering",
        "dense model on a CPU: XLA fuses the elementwise ops and the optimizer update between "
        "the matmuls (a 3×512 Keras MLP trained 1.3-1.45× faster on a 2-vCPU EPYC VM, TF 2.21); "
        "Keras keeps XLA off on CPU-only machines unless compile() gets "
        "jit_compile=True",
    ),
    "conv": (
        "off",
        "convolutional model on a CPU: XLA runs convolutions with Eigen instead of oneDNN "
        "(xla/service/cpu/runtime_conv2d.cc): a small Keras CNN trained at 0.76-0.8× "
        "(on a 2-vCPU EPYC VM, TF 2.21)",
    ),
    "unknown": (
        "off",
        "model kind unknown: on a CPU, XLA made a small Keras CNN 0.76-0.8× and a 3×512 MLP "
        "1.3-1.45× as fast (on a 2-vCPU EPYC VM, TF 2.21); off is the safe side — say --model "
        "dense, or let `hwtune tune` measure",
    ),
}


# XLA on a GPU: `--tf_xla_auto_jit` is marked "Experimental." in tensorflow/compiler/jit/flags.h
# (XlaAutoJitFlag), recompiles a cluster for every new input shape and holds compiled kernels
# in memory, so it is planned only where measurements say it pays. The gains cited are training
# throughputs on V100s, with mixed precision where the source says its precision, so a float32
# plan keeps XLA off (GPU_FLOAT32_REASONS).
GPU_XLA_REASONS: dict[str, tuple[str, str]] = {
    "dense": (
        "autoclustering",
        "dense model on a GPU with mixed precision: XLA fuses the elementwise ops between the "
        "matmuls (GELU, layer norm, softmax, the optimizer update); it added 34% to BERT "
        "training on one V100 already in mixed precision (NVIDIA Developer Blog, 'NVIDIA "
        "Achieves 4X Speedup on BERT Neural Network'), and Google's BERT MLPerf submission "
        "reports ~7× the throughput and ~5× the batch size on 8 V100s (tensorflow.org/xla). "
        "Auto-jit is experimental (tensorflow/compiler/jit/flags.h) and recompiles on new "
        "input shapes: pad or bucket variable lengths",
    ),
    "conv": (
        "autoclustering",
        "convolutional model on a GPU: mixed precision + XLA trained SE-ResNeXt101-32x4d "
        "1.58× (1 V100) and 1.52× (8 V100s) as fast as mixed precision alone (NVIDIA "
        "DeepLearningExamples, TensorFlow/Classification/ConvNets/se-resnext101-32x4d, DGX-1). "
        "Auto-jit is experimental (tensorflow/compiler/jit/flags.h) and recompiles on new "
        "input shapes",
    ),
    "unknown": (
        "off",
        "model kind unknown: on a GPU, XLA auto-clustering (--tf_xla_auto_jit=2) is marked "
        "experimental (tensorflow/compiler/jit/flags.h), recompiles on every new input shape "
        "and costs memory; left off — say --model dense or conv (measured gains), compile with "
        "jit_compile=True, or let `hwtune tune` measure it",
    ),
}


def gpus_tensorflow_can_use(
    hw: Hardware,
    planned: TfVersionEntry | None = None,
    knowledge: Knowledge | None = None,
    visible: tuple[tuple[Gpu, ...], str] | None = None,
) -> tuple[tuple[Gpu, ...], str]:
    """The GPUs TensorFlow will run on, and why none when it will not.

    Only the GPUs CUDA_VISIBLE_DEVICES leaves count (`gpu_units.visible`): one that hides
    every GPU gives the CPU plan, its reason naming the variable and its value. A GPU below
    the version's minimum compute capability is ignored by TensorFlow itself
    ("Ignoring visible gpu device ... The minimum required Cuda capability is ...",
    tensorflow/core/common_runtime/gpu/gpu_device.cc), so the plan leaves it out too, as it does
    a GPU in MIG mode with no MIG device to run on (`idle_mig_warnings` says so). A driver
    whose CUDA is of an older major release than the CUDA TensorFlow is built with (the
    installed build's, else `planned`'s wheels) cannot load it, so no GPU is usable at all
    (`cuda_compat.driver_cannot_load`); the plan warns about the driver too. `visible`:
    `gpu_units.visible(hw)` where the caller has it already.
    """
    if not hw.gpus:
        return (), "no NVIDIA GPU found"
    gpus, limit = visible if visible is not None else gpu_units.visible(hw)
    if not gpus:
        return (), limit  # "CUDA_VISIBLE_DEVICES='' hides every GPU"
    tf = hw.tensorflow
    if tf is not None and not tf.cuda_build:
        return (), (
            f"the installed TensorFlow ({tf.distribution} {tf.version}) is built without CUDA, "
            f"so it cannot use the {len(gpus)} GPU{'s' if len(gpus) > 1 else ''}"
        )
    driver = cuda_compat.driver_cannot_load(hw, planned, knowledge or default_knowledge())
    if driver:
        return (), driver
    idle_mig = _idle_mig(gpus)
    minimum = version_tuple(planned.min_cuda_cc)[:2] if planned is not None else ()
    too_old = [
        gpu
        for gpu in gpus
        if minimum
        and len(cc := version_tuple(gpu.compute_capability or "")[:2]) == 2
        and cc < minimum
    ]
    usable = tuple(gpu for gpu in gpus if gpu not in too_old and gpu.index not in idle_mig)
    if usable:
        return usable, ""
    if idle_mig:
        return (), next(iter(idle_mig.values()))
    assert planned is not None  # nothing else leaves no usable GPU
    gpu = too_old[0]
    return (), (
        f"TensorFlow {planned.key} needs compute capability ≥ {planned.min_cuda_cc} and ignores "
        f"GPU {gpu.index} ({gpu.name}, compute capability {gpu.compute_capability}): "
        "gpu_device.cc logs 'Ignoring visible gpu device' and runs on the CPU"
    )


def idle_mig_warnings(visible: tuple[Gpu, ...], usable: tuple[Gpu, ...]) -> list[str]:
    """Notes on GPUs left out for want of MIG devices while the plan runs on other GPUs.

    `visible`: the GPUs CUDA_VISIBLE_DEVICES leaves this process (`gpu_units.visible`). Only
    those are left out: a GPU the variable hides is no GPU of this process, idle or not."""
    if not usable:
        return []  # then the reason is every GPU setting's "left out"
    return list(_idle_mig(visible).values())


def _idle_mig(gpus: tuple[Gpu, ...]) -> dict[int, str]:
    """GPU index -> why CUDA cannot run on it, for those of `gpus` in MIG mode without MIG
    devices."""
    return {gpu.index: note for gpu in gpus if (note := gpu_units.mig_without_devices(gpu))}


def eligible_precisions(hw: Hardware, gpus: tuple[Gpu, ...]) -> tuple[tuple[str, ...], str]:
    """Keras policy names this slice's compute device runs fast, and why."""
    if gpus:
        ccs = {gpu.index: version_tuple(gpu.compute_capability or "") for gpu in gpus}
        unknown = [index for index, cc in ccs.items() if not cc]
        if unknown:
            named = f"GPUs {format_cpulist(unknown)}" if len(unknown) > 1 else f"GPU {unknown[0]}"
            return (), f"compute capability unknown for {named}: no policy can be vouched for"
        lowest = min(ccs.values())
        shown = ".".join(str(p) for p in lowest)
        if lowest >= (8, 0):
            return ("mixed_float16", "mixed_bfloat16"), (
                f"lowest compute capability {shown} ≥ 8.0: float16 and bfloat16 tensor cores "
                "(float32 matmuls and convolutions already run as TF32 on them, on by default "
                "since TF 2.4 per tf.config.experimental.enable_tensor_float_32_execution, and "
                "left as TensorFlow sets it)"
            )
        if lowest >= (7, 0):
            return ("mixed_float16",), (
                f"lowest compute capability {shown} ≥ 7.0: float16 tensor cores "
                "(bfloat16 needs 8.0)"
            )
        return (), f"lowest compute capability {shown} < 7.0: no tensor cores"
    found = [flag for flag in CPU_BF16_FLAGS if flag in hw.cpu.flags]
    if found:
        return ("mixed_bfloat16",), f"CPU has {' and '.join(found)}: oneDNN runs bf16 natively"
    if hw.cpu.arch != "x86_64" and "bf16" in hw.cpu.flags:
        return (), (
            f"this {hw.cpu.arch} CPU has bf16 instructions, but hwtune plans CPU bf16 only "
            "through x86's AVX512_BF16 and AMX-BF16 (mixed_bfloat16 on Arm has not been "
            "measured); no GPU is used"
        )
    if hw.cpu.arch not in ("x86_64", "unknown"):
        return (), (
            f"hwtune plans CPU bf16 only through x86's AVX512_BF16 and AMX-BF16, not on this "
            f"{hw.cpu.arch} CPU, and no GPU is used"
        )
    return (), "CPU has neither avx512_bf16 nor amx_bf16, and no GPU is used"


def enabled_precision(
    intent: Intent, eligible: tuple[str, ...], on_gpu: bool, onednn_on: bool
) -> tuple[str | None, str]:
    if intent.precision == "off":
        return None, "precision off by intent (--precision off)"
    if not eligible:
        return None, "nothing eligible"
    if intent.precision == "eligible":
        return None, (
            f"eligible: {', '.join(eligible)}; not enabled (--precision eligible only reports; "
            "use --precision auto)"
        )
    if on_gpu:
        # Keras mixed precision guide: bfloat16 on compute capability ≥ 8.0 has float32's range,
        # so it needs no loss scaling; float16 (7.x) needs it (model.fit applies it).
        if "mixed_bfloat16" in eligible:
            return "mixed_bfloat16", (
                "auto: mixed_bfloat16 on compute capability ≥ 8.0: bfloat16 tensor cores with "
                "float32's exponent range, so no loss scaling (Keras mixed precision guide)"
            )
        return "mixed_float16", (
            "auto: mixed_float16 on compute capability 7.x (no bfloat16 tensor cores before "
            "8.0); Keras' model.fit applies loss scaling (Keras mixed precision guide)"
        )
    if not onednn_on:
        return None, (
            "auto: mixed_bfloat16 is eligible but oneDNN is off: bf16 without oneDNN "
            "ran 40× slower (on a 2-vCPU EPYC VM, TF 2.21)"
        )
    return (
        "mixed_bfloat16",
        "auto: mixed_bfloat16 with oneDNN on (1.5× on a small Keras CNN, on a 2-vCPU EPYC VM, "
        "TF 2.21)",
    )


# With one intra-op thread and oneDNN on, XLA's gain on a dense model turns into a loss: the
# 3×512 MLP, two one-thread copies at once, ran 1.05× [1.00-1.11] (5 paired rounds) and
# 1.07× [1.03-1.11] (6) faster with XLA off, alone on one CPU 1.06× [1.03-1.10], while with two
# threads XLA made it 1.2× faster (on a 2-vCPU EPYC Zen 4 VM, TF 2.21). The full benchmark run
# with this rule (bench/results/amd-epyc-znver4-2cpu-kvm-c81eefa.md) agreed: in S3 (1-CPU
# quota) and S4 (two copies) the grid's best and both tuner runs kept XLA off. With oneDNN
# off, XLA kept its lead (the Zen 3 run's S3/S4 grid), and with oneDNN's kernels limited to AVX2
# (ONEDNN_MAX_CPU_ISA=AVX2, one copy on one CPU, 8 paired rounds of bench/paired_arms.py on
# the same VM) XLA on was ahead too: 1.03× [1.00-1.05] against 0.97× [0.94-1.01] without it,
# both over oneDNN off with XLA; limited to AVX512_CORE, XLA off won again (1.08× [1.06-1.11]
# against 1.00×). So the rule needs oneDNN's AVX-512 kernels.
CPU_DENSE_ONE_THREAD_REASON = (
    "dense model with one intra-op thread and oneDNN's AVX-512 kernels: XLA off, as a 3×512 "
    "Keras MLP ran 1.05-1.07× faster without it (two one-thread copies, and one copy alone on "
    "a CPU: paired rounds on a 2-vCPU EPYC Zen 4 VM, TF 2.21), though with two threads XLA "
    "made it 1.2× faster; in a full benchmark on the same VM, the best of a grid of settings "
    "kept XLA off too, both in a 1-CPU quota and for two copies at once"
)


# The SE-ResNeXt101 figures are mixed precision + XLA against mixed precision alone; the same
# README publishes its float32 (V100) and TF32 (A100) training throughputs only with XLA on, so
# no cited source shows what XLA does for a float32 convolutional model: left off there.
_FLOAT32_TAIL = (
    "; left off, as auto-jit is experimental (tensorflow/compiler/jit/flags.h) and recompiles "
    "on new input shapes — use --precision auto where mixed precision is eligible, or let "
    "`hwtune tune` measure it"
)
# A float32 plan on a GPU: the model kinds whose only cited XLA gains are with mixed precision.
GPU_FLOAT32_REASONS = {
    "conv": "convolutional model on a GPU in float32: the measured XLA gain for convolutions "
    "(NVIDIA DeepLearningExamples, TensorFlow/Classification/ConvNets/se-resnext101-32x4d) "
    "compares mixed precision + XLA with mixed precision alone, and its float32/TF32 training "
    "throughputs are published only with XLA on, so nothing cited shows XLA pays in float32"
    + _FLOAT32_TAIL,
    "dense": "dense model on a GPU in float32: of the XLA gains cited for dense models, BERT's "
    "+34% on one V100 was measured after mixed precision (NVIDIA Developer Blog, 'NVIDIA "
    "Achieves 4X Speedup on BERT Neural Network') and Google's BERT MLPerf ~7× on 8 V100s "
    "(tensorflow.org/xla) does not say its precision, so nothing cited shows XLA pays in "
    "float32" + _FLOAT32_TAIL,
}


def jit_rule(
    on_gpu: bool,
    model: str = "unknown",
    *,
    precision: str | None = None,
    intra: int = 0,
    onednn: bool = False,
    avx512: bool = False,
) -> Setting:
    """XLA's level for the instance; `precision` (the enabled Keras policy, None for float32)
    matters on a GPU only, where no cited XLA gain is in float32; `intra`
    (its intra-op threads), `onednn` and `avx512` (the CPU has AVX-512F) matter on a CPU
    only, where a dense model with one thread runs faster on oneDNN's AVX-512 kernels alone."""
    table = GPU_XLA_REASONS if on_gpu else CPU_XLA_REASONS
    level, reason = table.get(model, table["unknown"])
    if on_gpu and precision is None and model in GPU_FLOAT32_REASONS:
        return Setting("off", GPU_FLOAT32_REASONS[model])
    if not on_gpu and model == "dense" and intra == 1 and onednn and avx512:
        return Setting("off", CPU_DENSE_ONE_THREAD_REASON)
    return Setting(level, reason)


def xla_flags(level: str, on_gpu: bool) -> str | None:
    """TF_XLA_FLAGS for a jit level; None when XLA stays off."""
    flags = XLA_FLAGS.get(level)
    if flags is None:
        return None
    return flags if on_gpu else f"{flags} {CPU_XLA_FLAG}"


def data_format_rule(
    on_gpu: bool, precision: str | None = None, *, onednn: bool = True
) -> Setting:
    """channels_last on a GPU once float16/bfloat16 runs on tensor cores (the precision is only
    enabled where the capability allows it: ≥ 7.0 for float16, ≥ 8.0 for bfloat16)."""
    if on_gpu and precision in ("mixed_float16", "mixed_bfloat16"):
        return Setting(
            "channels_last",
            f"GPU with {precision}: tensor cores run convolutions in NHWC and cuDNN transposes "
            "NCHW (NVIDIA Deep Learning Performance Guide, 'Tensor Core Requirements'); "
            "TensorFlow's layout optimizer keeps NHWC too, for float16 convolutions on compute "
            "capability ≥ 7.0 and bfloat16 on ≥ 8.0, every GPU from Volta and Ampere on "
            "(grappler/optimizers/generic_layout_optimizer.cc, GetNumGPUs)",
        )
    if on_gpu:
        return Setting(
            "channels_first",
            "GPU in float32: cuDNN's NCHW kernels; TensorFlow's layout optimizer turns NHWC "
            "convolutions into NCHW on a GPU when they run in float32 "
            "(grappler/optimizers/generic_layout_optimizer.cc), so NCHW saves the transposes",
        )
    kernels = "CPU and oneDNN kernels" if onednn else "CPU kernels"
    return Setting(
        "channels_last",
        f"CPU: NHWC is the layout TensorFlow's {kernels} are fastest with "
        "(TensorFlow performance guide: channels_last on CPU)",
    )
