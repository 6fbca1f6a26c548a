"""`hwtune.data_options()` and the tf.data part of `configure()`'s report.

The real-TensorFlow test runs in a subprocess with a private cache and compares with what
`hwtune plan --json` plans for the same machine and intent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hwtune.apply.cache import CACHE_SCHEMA, cache_key, cache_path, lookup
from hwtune.apply.fingerprint import fingerprint
from hwtune.apply.tfdata import planned_values
from tests.conftest import needs_two_cores
from tests.test_runtime import clean_env, needs_tf  # noqa: F401 - a fixture, used by name

PROGRAM = """
import json, sys
import hwtune
before = "tensorflow" in sys.modules
options = hwtune.data_options(**json.loads(sys.argv[1]))
import tensorflow as tf
ds = tf.data.Dataset.range(64).map(lambda x: x * 2, num_parallel_calls=tf.data.AUTOTUNE)
it = iter(ds.with_options(options))
total = int(sum(int(v) for v in it))
report = hwtune.configure(tensorflow=False, **json.loads(sys.argv[1]))
print(json.dumps({
    "tf_before": before,
    "pool": options.threading.private_threadpool_size,
    "cpu_budget": options.autotune.cpu_budget,
    "ram_budget": options.autotune.ram_budget,
    "total": total,
    "report": report.as_dict(),
    "summary": report.summary(),
}))
"""


def _plan(cli, *flags: str) -> dict[str, object]:  # type: ignore[no-untyped-def]
    result = cli(["plan", "--json", *flags])
    assert result.exit_status == 0, result.stderr
    plan: dict[str, object] = json.loads(result.stdout)
    return plan


@needs_tf
@pytest.mark.parametrize(
    ("intent", "flags"),
    [
        ({}, ()),
        pytest.param(
            {"instances": 2, "instance": 1},
            ("--instances", "2", "--instance", "1"),
            marks=needs_two_cores,
        ),
    ],
)
def test_data_options_carry_the_plan_into_tensorflow(
    clean_env: dict[str, str],  # noqa: F811
    cli,  # type: ignore[no-untyped-def]
    intent: dict[str, int],
    flags: tuple[str, ...],
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, json.dumps(intent)],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    plan = _plan(cli, *flags)
    tf_data = {k: v["value"] for k, v in plan["tf_data"].items()}  # type: ignore[attr-defined]
    assert seen["tf_before"] is False  # `import hwtune` and the attribute import nothing heavy
    assert seen["pool"] == tf_data["private_threadpool_size"]
    assert seen["cpu_budget"] == tf_data["autotune_cpu_budget"]
    assert seen["ram_budget"] == tf_data["autotune_ram_budget"]
    assert seen["total"] == 2 * sum(range(64))  # the options run
    report = seen["report"]
    assert report["tf_data"] == tf_data
    assert report["data_format"] == plan["data_format"]["value"]  # type: ignore[index]
    strategy = plan["distribution"]["strategy"]["value"] if plan.get("distribution") else None  # type: ignore[index]
    assert report["distribution"] == strategy
    assert "tf.data (hwtune.data_options())" in seen["summary"]


def test_planned_values_keep_only_what_options_take() -> None:
    payload = {
        "tf_data": {
            "private_threadpool_size": 4,
            "autotune_cpu_budget": 4,
            "autotune_ram_budget": None,  # memory unknown: TF keeps its default
            "parallel_calls": -1,  # an op argument, not an Option
            "prefetch": -1,
        }
    }
    assert planned_values(payload) == {"private_threadpool_size": 4, "autotune_cpu_budget": 4}
    assert planned_values({}) == {}
    assert planned_values({"tf_data": {"private_threadpool_size": True}}) == {}


def test_a_cache_from_before_tf_data_is_planned_again(
    clean_env: dict[str, str],  # noqa: F811
) -> None:
    # A cache file written by the previous schema has no tf_data: using it would give
    # data_options() nothing to set.
    path = Path(cache_path(clean_env, cache_key({}, None)))
    path.parent.mkdir(parents=True)
    old = {"schema": 1, "fingerprint": fingerprint(clean_env), "payload": {"env": []}}
    path.write_text(json.dumps(old))
    payload, cached, _ = lookup({}, clean_env)
    assert not cached and CACHE_SCHEMA >= 2
    assert planned_values(payload)  # the fresh plan has the values
    assert lookup({}, clean_env)[1] is True  # and is cached from now on


def test_import_hwtune_stays_light() -> None:
    code = (
        "import sys, hwtune; hwtune.data_options; "
        "print(sorted(m for m in ('tensorflow', 'pydantic', 'psutil') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ)
    )
    assert done.stdout.strip() == "[]", done.stderr
