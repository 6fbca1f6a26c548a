"""The folklore recipe: the CPU settings users copy into their TensorFlow jobs today.

As the public guides give it:
- TensorFlow's performance guide, "Tuning MKL for the best performance" (TF 1.x guide, still
  the most copied page: https://github.com/tensorflow/docs/blob/master/site/en/r1/guide/
  performance/overview.md): intra_op_parallelism_threads = number of physical cores,
  inter_op_parallelism_threads = number of sockets, OMP_NUM_THREADS = physical cores,
  KMP_BLOCKTIME = 0 or 1, KMP_AFFINITY = granularity=fine,verbose,compact,1,0;
- Intel, "Maximize TensorFlow Performance on CPU: Considerations and Recommendations for
  Inference Workloads" (https://www.intel.com/content/www/us/en/developer/articles/technical/
  maximize-tensorflow-performance-on-cpu-considerations-and-recommendations-for-inference.html):
  the same variables, KMP_BLOCKTIME=1, and `numactl` to bind each instance of a multi-instance
  run to its own cores;
- Intel Model Zoo's launch_benchmark.py (https://github.com/IntelAI/models): one instance per
  core group, `numactl --physcpubind`, OMP_NUM_THREADS and intra-op = the group's cores.

"verbose" is left out of KMP_AFFINITY: it only prints the binding. Under a CPU quota the
recipe still counts physical cores (the guides do not mention quotas: that is the folklore).
"""

from __future__ import annotations

from collections.abc import Sequence

from hwtune.models.hardware import Hardware
from hwtune.tune.config import TrialConfig

KMP_BLOCKTIME = "1"
KMP_AFFINITY = "granularity=fine,compact,1,0"


def recipe(hw: Hardware, instances: int, slices: Sequence[Sequence[int]] = ()) -> TrialConfig:
    """The folklore configuration for `instances` copies of a job on `hw`; `slices`: each
    copy's CPUs (numactl-style pinning when there are several copies)."""
    from hwtune.planner.instances import physical_cores, usable_cpus

    cores = len(physical_cores(hw, usable_cpus(hw))) or 1
    sockets = hw.cpu.sockets or 1
    per_instance = max(1, cores // instances)
    # A copy bound to a core group on one socket runs one op at a time per socket it spans.
    inter = sockets if instances == 1 else max(1, sockets // instances)
    env = (
        ("KMP_AFFINITY", KMP_AFFINITY),
        ("KMP_BLOCKTIME", KMP_BLOCKTIME),
        ("OMP_NUM_THREADS", str(per_instance)),
    )
    pinned = tuple(tuple(s) for s in slices) if instances > 1 else ()
    return TrialConfig(
        intra=per_instance, inter=inter, instances=instances, cpus=pinned, extra_env=env
    )
