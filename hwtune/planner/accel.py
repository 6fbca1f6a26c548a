"""XLA, mixed precision and data layout: which device does the math decides all three.

Mixed precision *eligibility* is a hardware fact kept apart from *enabling*, which the intent
decides: GPUs of compute capability ≥ 7.0 have float16 tensor cores (Volta), ≥ 8.0 bfloat16 too
(Ampere) — the Keras mixed-precision guide's thresholds; CPUs with AVX512_BF16 or AMX-BF16 run
bf16 through oneDNN, and only with oneDNN on.
"""

from __future__ import annotations

from hwtune.models.hardware import Gpu, Hardware
from hwtune.models.profile import Intent, Setting
from hwtune.planner.knowledge import version_tuple

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
        "the matmuls (a 3×512 Keras MLP trained 1.3-1.45× faster here, TF 2.21, 2-core EPYC); "
        "Keras keeps XLA off on CPU-only machines unless compile() gets "
        "jit_compile=report.jit_compile",
    ),
    "conv": (
        "off",
        "convolutional model on a CPU: XLA runs convolutions with Eigen instead of oneDNN "
        "(xla/service/cpu/runtime_conv2d.cc): a small Keras CNN trained at 0.76-0.8× here "
        "(TF 2.21, 2-core EPYC)",
    ),
    "unknown": (
        "off",
        "model kind unknown: on a CPU, XLA made a small Keras CNN 0.76-0.8× and a 3×512 MLP "
        "1.3-1.45× as fast here (TF 2.21, 2-core EPYC); off is the safe side — say --model "
        "dense, or let `hwtune tune` measure",
    ),
}


def gpus_tensorflow_can_use(hw: Hardware) -> tuple[tuple[Gpu, ...], str]:
    """The GPUs TensorFlow will run on, and why none when it will not."""
    if not hw.gpus:
        return (), "no NVIDIA GPU found"
    tf = hw.tensorflow
    if tf is not None and not tf.cuda_build:
        return (), (
            f"the installed TensorFlow ({tf.distribution} {tf.version}) is built without CUDA, "
            f"so it cannot use the {len(hw.gpus)} GPU{'s' if len(hw.gpus) > 1 else ''}"
        )
    return hw.gpus, ""


def eligible_precisions(hw: Hardware, gpus: tuple[Gpu, ...]) -> tuple[tuple[str, ...], str]:
    """Keras policy names this slice's compute device runs fast, and why."""
    if gpus:
        ccs = {gpu.index: version_tuple(gpu.compute_capability or "") for gpu in gpus}
        unknown = [index for index, cc in ccs.items() if not cc]
        if unknown:
            return (
                (),
                f"compute capability unknown for GPU {unknown[0]}: no policy can be vouched for",
            )
        lowest = min(ccs.values())
        shown = ".".join(str(p) for p in lowest)
        if lowest >= (8, 0):
            return ("mixed_float16", "mixed_bfloat16"), (
                f"lowest compute capability {shown} ≥ 8.0: float16 and bfloat16 tensor cores"
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
        # The Keras guide recommends mixed_float16 on GPUs (model.fit applies loss scaling).
        return "mixed_float16", "auto: mixed_float16, the Keras guide's policy for GPUs"
    if not onednn_on:
        return None, (
            "auto: mixed_bfloat16 is eligible but TF_ENABLE_ONEDNN_OPTS=0: bf16 without oneDNN "
            "ran 40× slower here"
        )
    return "mixed_bfloat16", "auto: mixed_bfloat16 with oneDNN on (1.5× on a small Keras CNN here)"


def jit_rule(on_gpu: bool, model: str = "unknown") -> Setting:
    if on_gpu:
        return Setting(
            "autoclustering",
            "GPU: XLA auto-clustering fuses ops into fewer kernels (tensorflow.org/xla: "
            "TF_XLA_FLAGS=--tf_xla_auto_jit=2)",
        )
    level, reason = CPU_XLA_REASONS.get(model, CPU_XLA_REASONS["unknown"])
    return Setting(level, reason)


def xla_flags(level: str, on_gpu: bool) -> str | None:
    """TF_XLA_FLAGS for a jit level; None when XLA stays off."""
    flags = XLA_FLAGS.get(level)
    if flags is None:
        return None
    return flags if on_gpu else f"{flags} {CPU_XLA_FLAG}"


def data_format_rule(on_gpu: bool) -> Setting:
    if on_gpu:
        return Setting(
            "channels_first",
            "GPU: cuDNN's native NCHW layout (TensorFlow performance guide: channels_first on "
            "GPU; grappler's layout optimizer still transposes where tensor cores want NHWC)",
        )
    return Setting(
        "channels_last",
        "CPU: NHWC is the layout TensorFlow's CPU and oneDNN kernels are fastest with "
        "(TensorFlow performance guide: channels_last on CPU)",
    )
