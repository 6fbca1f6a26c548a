"""Built-in workloads in a real TensorFlow: one short smoke trial; all four with -m slow."""

from __future__ import annotations

import importlib.util
import os

import pytest

from hwtune.tune.config import TrialConfig
from hwtune.tune.trial import TrialRunner
from hwtune.tune.workloads import BUILTINS, builtin

pytestmark = [
    pytest.mark.tf,
    pytest.mark.skipif(
        importlib.util.find_spec("tensorflow") is None, reason="TensorFlow not installed"
    ),
]
QUIET = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}


def test_cnn_trial_with_bf16_and_one_thread_reports_steady_state_throughput() -> None:
    # A short window: this checks the chain (env -> Keras policy and threads -> metric line),
    # not the speed (bench/ measures that).
    runner = TrialRunner(builtin("cnn", seconds=0.3), environ=QUIET, timeout_s=300)
    config = TrialConfig(intra=1, inter=1, onednn=True, jit=False, precision="mixed_bfloat16")
    result = runner.run(config)
    assert result.ok, f"{result.failure}\n{result.stderr_tail}"
    assert result.metric == "samples_per_sec" and (result.value or 0) > 0
    assert "policy=mixed_bfloat16 jit=False" in result.stderr_tail


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_every_builtin_runs_with_xla_and_two_instances(name: str) -> None:
    runner = TrialRunner(builtin(name, seconds=0.5), environ=QUIET, timeout_s=600)
    cpu = min(os.sched_getaffinity(0))
    result = runner.run(TrialConfig(jit=True, instances=2, cpus=((cpu,), (cpu,))))
    assert result.ok, f"{result.failure}\n{result.stderr_tail}"
    assert len(result.per_instance) == 2 and all(v > 0 for v in result.per_instance)
