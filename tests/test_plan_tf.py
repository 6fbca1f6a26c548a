"""A real TensorFlow, started with the planned environment, runs the planned thread pools.

`tf.config.threading.get_intra_op_parallelism_threads()` reports only values set through
tf.config/ConfigProto (0 otherwise), so the check counts the pools' threads instead: the
inter-op pool's threads are named tf_Compute, the intra-op (Eigen) pool's threads inherit the
process name and appear when TensorFlow runs its first op (after the import).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from hwtune.apply.render import env_map
from hwtune.models.overrides import Overrides
from hwtune.models.profile import Profile
from hwtune.planner import load_knowledge, plan
from hwtune.probes import detect

pytestmark = [
    pytest.mark.tf,
    pytest.mark.skipif(
        importlib.util.find_spec("tensorflow") is None, reason="TensorFlow not installed"
    ),
]

PROBE = r"""
import json, os
def names():
    tasks = sorted(os.listdir("/proc/self/task"), key=int)  # the main thread first
    return [open(f"/proc/self/task/{t}/comm").read().strip() for t in tasks]
me = names()[0]
import tensorflow as tf
before = names().count(me)  # importing starts one helper thread of its own
x = tf.random.normal((64, 64))
tf.linalg.matmul(x, x).numpy()
after = names()
print(json.dumps({
    "intra_pool": after.count(me) - before,
    "inter_pool": after.count("tf_Compute"),
    "getter_intra": tf.config.threading.get_intra_op_parallelism_threads(),
}))
"""


def run_tensorflow(profile: Profile) -> tuple[dict[str, int], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "OMP_", "KMP_"))}
    env.update(env_map(profile))  # the variables apply writes, thread counts included
    env["TF_CPP_MIN_LOG_LEVEL"] = "0"
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_tensorflow_runs_the_planned_pools() -> None:
    knowledge = load_knowledge(extra_dirs=())
    hw = detect("/", gpus=False)
    planned = plan(hw, knowledge=knowledge)
    got, stderr = run_tensorflow(planned)
    assert got["intra_pool"] == planned.threads.intra_op.value
    assert got["inter_pool"] == planned.threads.inter_op.value
    assert got["getter_intra"] == 0  # why this test counts threads rather than asking
    onednn_on = "oneDNN custom operations are on" in stderr
    assert onednn_on == (planned.env["TF_ENABLE_ONEDNN_OPTS"].value == "1")
    # And an override moves the pools: the planned environment is what TensorFlow obeys.
    other = plan(
        hw,
        knowledge=knowledge,
        overrides=Overrides(intra_op=3, inter_op=2, env={"TF_ENABLE_ONEDNN_OPTS": "0"}),
    )
    got, stderr = run_tensorflow(other)
    assert (got["intra_pool"], got["inter_pool"]) == (3, 2)
    assert "oneDNN custom operations are on" not in stderr
