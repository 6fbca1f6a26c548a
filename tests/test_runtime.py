"""hwtune.configure(): environment, cache, TensorFlow before and after import (real TF)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import hwtune
from hwtune.apply.marker import marker_value
from hwtune.apply.render import env_map, thread_counts
from hwtune.pipeline.request import PlanRequest, profile_for
from tests.apply_profiles import PYTHON

try:
    import importlib.util

    HAVE_TF = importlib.util.find_spec("tensorflow") is not None
except ImportError:  # pragma: no cover
    HAVE_TF = False
_skip_without_tf = pytest.mark.skipif(not HAVE_TF, reason="TensorFlow is not installed")


def needs_tf(test: Callable[..., None]) -> Callable[..., None]:
    """Runs a real TensorFlow in a subprocess: marked `tf`, skipped without TensorFlow."""
    return pytest.mark.tf(_skip_without_tf(test))  # type: ignore[no-any-return]


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A process environment with a private cache and config, and no launcher variables."""
    for name in list(os.environ):
        if name.startswith(("HWTUNE_", "SLURM_", "OMPI_", "TF_", "KMP_", "OMP_")) or name in (
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
        ):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
    return dict(os.environ)


def test_configure_sets_planned_env_and_restores_it(clean_env: dict[str, str]) -> None:
    planned = env_map(profile_for(PlanRequest(clean_env)).profile)
    os.environ["TF_NUM_INTEROP_THREADS"] = "7"  # the user's own choice
    with hwtune.configure(tensorflow=False) as report:
        assert report.env_user == {
            "TF_NUM_INTEROP_THREADS": ("7", planned["TF_NUM_INTEROP_THREADS"])
        }
        assert os.environ["TF_NUM_INTEROP_THREADS"] == "7"
        for name, value in planned.items():
            if name != "TF_NUM_INTEROP_THREADS":
                assert os.environ[name] == value and report.env_set[name] == value
        assert "kept: set by the user" in report.summary()
    assert {k: v for k, v in os.environ.items() if k.startswith(("TF_", "KMP_", "OMP_"))} == {
        "TF_NUM_INTEROP_THREADS": "7",
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }


def test_second_configure_replaces_its_own_values(clean_env: dict[str, str]) -> None:
    first = hwtune.configure(tensorflow=False)
    try:
        second = hwtune.configure(tensorflow=False, mode="latency")
        assert not second.env_user  # the first call's values are not the user's
        second.restore()
    finally:
        first.restore()


def test_cache_is_used_then_invalidated_by_a_config_change(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    # A heavy module counts only when hwtune loaded it: the interpreter's own start-up (site,
    # a venv's .pth files) may load some first, at no cost to configure()'s warm path. In a
    # CUDA image's Python 3.12.3 venv a .pth imports certifi, whose importlib.resources
    # (_common) imports inspect before any script runs (`python3 -X importtime -c pass`).
    probe = textwrap.dedent(
        """
        import sys
        before = set(sys.modules)
        import hwtune, json
        r = hwtune.configure(tensorflow=False)
        heavy = [m for m in ("pydantic", "psutil", "dataclasses", "inspect", "hwtune.probes",
                             "hwtune.planner", "hwtune.models.profile")
                 if m in sys.modules and m not in before]
        print(json.dumps({"cached": r.cached, "heavy": heavy, "env": r.env}))
        """
    )

    def run() -> dict[str, object]:
        out = subprocess.run(
            [PYTHON, "-c", probe],
            capture_output=True,
            text=True,
            timeout=120,
            env=clean_env,
            check=True,
        ).stdout
        return json.loads(out)  # type: ignore[no-any-return]

    cold, warm = run(), run()
    assert cold["cached"] is False and warm["cached"] is True
    assert warm["heavy"] == [], "the warm path imported heavy modules"
    assert warm["env"] == cold["env"]
    config = tmp_path / "config" / "hwtune" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[env]\nHW_FROM_CONFIG = "yes"\n')
    changed = run()
    assert changed["cached"] is False and changed["env"]["HW_FROM_CONFIG"] == "yes"  # type: ignore[index]


def test_a_config_rewritten_with_its_old_mtime_and_size_invalidates_the_cache(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    """`cp -p`, `rsync -a` and `tar x` give a rewritten file back its old mtime: with a value of
    the same length, mtime, size and inode all matched, and `hwtune env` kept printing the old
    cached value. The ctime, which no system call sets back, tells them apart."""
    config = tmp_path / "config" / "hwtune" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[env]\nMYA = "2"\n')

    def hwtune_env() -> str:
        return subprocess.run(
            [PYTHON, "-m", "hwtune", "env"],
            capture_output=True,
            text=True,
            timeout=120,
            env=clean_env,
            check=True,
        ).stdout

    assert "export MYA='2'" in hwtune_env()
    assert "export MYA='2'" in hwtune_env()  # from the cache
    before = config.stat()
    with config.open("r+") as same_inode:
        same_inode.write('[env]\nMYA = "3"\n')
    os.utime(config, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = config.stat()
    assert (after.st_mtime_ns, after.st_size, after.st_ino) == (
        before.st_mtime_ns,
        before.st_size,
        before.st_ino,
    )
    assert after.st_ctime_ns != before.st_ctime_ns
    assert "export MYA='3'" in hwtune_env()


def test_planning_failure_warns_and_strict_raises(
    clean_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HWTUNE_INSTANCES", "4096")  # more instances than cores: PlanError
    with pytest.warns(RuntimeWarning, match="could not plan"):
        report = hwtune.configure(tensorflow=False)
    assert report.env_set == {} and os.environ.get("TF_NUM_INTRAOP_THREADS") is None
    with pytest.raises(hwtune.HwtuneError, match="instances"):
        hwtune.configure(tensorflow=False, strict=True)


STRICT_AFTER_IMPORT = textwrap.dedent(
    """
    import json, os, sys, types
    sys.modules["tensorflow"] = types.ModuleType("tensorflow")  # "imported" before configure()
    before = dict(os.environ)
    import hwtune
    try:
        hwtune.configure(strict=True)
        raised = None
    except hwtune.HwtuneError as err:
        raised = str(err)
    changed = {k for k in {*before, *os.environ} if before.get(k) != os.environ.get(k)}
    hooks = [type(f).__name__ for f in sys.meta_path if "Hook" in type(f).__name__]
    print(json.dumps({"raised": raised, "changed": sorted(changed), "hooks": hooks}))
    """
)


def test_strict_configure_that_raises_leaves_the_environment_as_it_was(
    clean_env: dict[str, str],
) -> None:
    """TensorFlow imported first: strict raises for the variables it would read too late.
    Before, the raise left the plan's variables set, a stale one of an earlier `hwtune env`
    unset, HWTUNE_PROFILE rewritten and the import hook installed."""
    env = {**clean_env, "HW_STALE": "x", "HWTUNE_PROFILE": marker_value({"HW_STALE": "x"})}
    done = subprocess.run(
        [PYTHON, "-c", STRICT_AFTER_IMPORT], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["raised"] and "after TensorFlow was imported" in result["raised"]
    assert result["changed"] == [] and result["hooks"] == []


def test_a_value_no_environment_can_hold_is_a_problem_not_an_exception(
    clean_env: dict[str, str],
) -> None:
    """A NUL in a (damaged) cached profile: configure() reports it and sets the rest; only
    strict raises. (config.py refuses such a value at its source; this is the last guard.)"""
    from hwtune.apply.runtime import ConfigureReport

    payload = {"env": [["HW_NUL", "a\0b", "user"], ["HW_OK", "1", "user"]]}
    report = ConfigureReport(payload, cached=True, cache_path="", strict=False)
    try:
        report._apply_environment()
        assert report.env_set == {"HW_OK": "1"} and "HW_NUL" not in os.environ
        with pytest.warns(RuntimeWarning, match="could not set HW_NUL"):
            report._finish(stacklevel=1)
    finally:
        report.restore()
    strict = ConfigureReport(payload, cached=True, cache_path="", strict=True)
    try:
        strict._apply_environment()
        with pytest.raises(hwtune.HwtuneError, match="HW_NUL"):
            strict._finish(stacklevel=1)
    finally:
        strict.restore()
    assert "HW_OK" not in os.environ


BEFORE_IMPORT = textwrap.dedent(
    """
    import json, os, sys, warnings
    before = dict(os.environ)
    import hwtune
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = hwtune.configure(precision="auto")
        added = {k: v for k, v in os.environ.items() if before.get(k) != v}  # TF adds its own
        import tensorflow as tf
        tf.linalg.matmul(tf.ones((64, 64)), tf.ones((64, 64)))
    tasks = os.listdir("/proc/self/task")
    threads = [open(f"/proc/self/task/{t}/comm").read().strip() for t in tasks]
    print(json.dumps({
        "intra": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter": tf.config.threading.get_inter_op_parallelism_threads(),
        "jit": str(tf.config.optimizer.get_jit()),
        "policy": tf.keras.mixed_precision.global_policy().name,
        "compute_threads": threads.count("tf_Compute"),
        "added": added,
        "warnings": [str(w.message) for w in caught if "hwtune" in str(w.message)],
        "hook_left": [type(f).__name__ for f in sys.meta_path if "Hook" in type(f).__name__],
        "report": report.as_dict(),
    }))
    """
)


@needs_tf
def test_tensorflow_gets_the_plan_when_configured_before_import(clean_env: dict[str, str]) -> None:
    result = subprocess.run(
        [PYTHON, "-c", BEFORE_IMPORT], capture_output=True, text=True, env=clean_env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.splitlines()[-1])
    profile = profile_for(PlanRequest(clean_env, precision="auto")).profile
    intra, inter = thread_counts(profile)
    assert (seen["intra"], seen["inter"]) == (intra, inter)
    assert seen["compute_threads"] == inter  # the inter-op pool really has that size
    planned = env_map(profile)
    # Only planned knobs, and the marker saying they are hwtune's (hwtune.apply.marker).
    assert seen["added"] == {**planned, "HWTUNE_PROFILE": marker_value(planned)}
    assert seen["warnings"] == [] and seen["hook_left"] == []
    if profile.precision.enabled:
        assert seen["policy"] == profile.precision.enabled
    assert seen["jit"] in ("", "False") if profile.jit.level.value == "off" else seen["jit"]


AFTER_IMPORT = textwrap.dedent(
    """
    import json, os, warnings
    import tensorflow as tf
    tf.linalg.matmul(tf.ones((8, 8)), tf.ones((8, 8)))   # the runtime is now initialised
    import hwtune
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = hwtune.configure(precision="auto")
    strict = None
    try:
        hwtune.configure(precision="auto", strict=True)
    except hwtune.HwtuneError as err:
        strict = err.message
    print(json.dumps({
        "warnings": [str(w.message) for w in caught],
        "where": [os.path.basename(w.filename) for w in caught],
        "tensorflow": report.tensorflow,
        "policy": tf.keras.mixed_precision.global_policy().name,
        "strict": strict,
    }))
    """
)


@needs_tf
def test_already_imported_tensorflow_warns_and_applies_what_it_can(
    clean_env: dict[str, str],
) -> None:
    result = subprocess.run(
        [PYTHON, "-c", AFTER_IMPORT], capture_output=True, text=True, env=clean_env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.splitlines()[-1])
    text = "\n".join(seen["warnings"])
    for setting in ("intra_op_parallelism_threads", "inter_op_parallelism_threads"):
        assert f"{setting}=" in text and "already initialised" in text
    assert set(seen["where"]) == {"<string>"}  # warnings point at the caller, not hwtune
    assert seen["tensorflow"]["jit"].startswith("applied")
    profile = profile_for(PlanRequest(clean_env, precision="auto")).profile
    if profile.precision.enabled:
        assert seen["policy"] == profile.precision.enabled
        assert seen["tensorflow"]["precision"].startswith("applied")
    assert seen["strict"] and "could not take effect" in seen["strict"]


ENV_ONLY = textwrap.dedent(
    """
    import json, os, sys
    env = dict(os.environ)  # before TensorFlow adds variables of its own
    import tensorflow as tf
    from google.protobuf import text_format
    tf.linalg.matmul(tf.ones((64, 64)), tf.ones((64, 64)))
    tasks = os.listdir("/proc/self/task")
    threads = [open(f"/proc/self/task/{t}/comm").read().strip() for t in tasks]
    out = sys.argv[1]
    config = text_format.Parse(open(f"{out}/tf_config.pbtxt").read(), tf.compat.v1.ConfigProto())
    data = json.load(open(f"{out}/tf_data_options.json"))["options"]
    options = tf.data.Options()
    options.threading.private_threadpool_size = data["threading"]["private_threadpool_size"]
    options.autotune.enabled = data["autotune"]["enabled"]
    options.autotune.cpu_budget = data["autotune"]["cpu_budget"]
    options.autotune.ram_budget = data["autotune"]["ram_budget"]
    dataset = tf.data.Dataset.range(4).map(lambda x: x * 2).with_options(options)
    items = list(dataset.as_numpy_iterator())
    print(json.dumps({"env": env, "compute_threads": threads.count("tf_Compute"),
                      "getter": tf.config.threading.get_inter_op_parallelism_threads(),
                      "config": [config.intra_op_parallelism_threads,
                                 config.inter_op_parallelism_threads],
                      "jit": config.graph_options.optimizer_options.global_jit_level,
                      "items": [int(i) for i in items]}))
    """
)


@needs_tf
def test_eval_hwtune_env_in_bash_sizes_tensorflows_pools(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    """`hwtune apply` then `eval "$(hwtune env)"` in a job script; TensorFlow reads the files."""
    script = tmp_path / "check.py"
    script.write_text(ENV_ONLY)
    out = tmp_path / "out"
    result = subprocess.run(
        [
            "bash",
            "-c",
            f"set -e; {PYTHON} -m hwtune apply --output {out} >/dev/null; "
            f'eval "$({PYTHON} -m hwtune env)"; exec {PYTHON} {script} {out}',
        ],
        capture_output=True,
        text=True,
        env=clean_env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.splitlines()[-1])
    profile = profile_for(PlanRequest(clean_env)).profile
    skip = ("PWD", "SHLVL", "_", "OLDPWD")
    added = {k: v for k, v in seen["env"].items() if clean_env.get(k) != v and k not in skip}
    planned = env_map(profile)
    assert added == {**planned, "HWTUNE_PROFILE": marker_value(planned)}
    intra, inter = thread_counts(profile)
    assert seen["compute_threads"] == inter
    # tf.config.threading reads back only what was set through it: the pools came from the
    # environment (TF's C++ runtime reads TF_NUM_*), so the getter reports 0 ("default").
    assert seen["getter"] == 0
    assert seen["config"] == [intra, inter]
    levels = {"off": -1, "on": 1, "autoclustering": 2}  # OFF, ON_1, ON_2 (config.proto)
    assert seen["jit"] == levels[str(profile.jit.level.value)]
    assert seen["items"] == [0, 2, 4, 6]


def test_fingerprint_config_paths_match_the_config_loader(tmp_path: Path) -> None:
    from hwtune.apply.fingerprint import config_paths
    from hwtune.pipeline.config import default_config_paths

    for environ in ({"XDG_CONFIG_HOME": str(tmp_path)}, {"HOME": "/home/someone"}):
        assert config_paths(environ) == [str(p) for p in default_config_paths(environ)]


FINGERPRINT = (
    "import json, os; from hwtune.apply.fingerprint import fingerprint; "
    "print(json.dumps(fingerprint()))"
)


def test_fingerprint_follows_affinity_and_hwtune_variables(clean_env: dict[str, str]) -> None:
    def take(*prefix: str, **extra: str) -> dict[str, object]:
        out = subprocess.run(
            [*prefix, PYTHON, "-c", FINGERPRINT],
            capture_output=True,
            text=True,
            env={**clean_env, **extra},
            check=True,
            timeout=60,
        ).stdout
        return json.loads(out)  # type: ignore[no-any-return]

    base = take()
    assert take() == base  # stable
    assert take(HWTUNE_MODE="latency")["hwtune_env"] == [["HWTUNE_MODE", "latency"]]
    if len(os.sched_getaffinity(0)) > 1:
        pinned = take("taskset", "-c", str(min(os.sched_getaffinity(0))))
        assert pinned["affinity"] != base["affinity"]
    assert base["tensorflow"] or not HAVE_TF  # the TF install is part of it


def test_cache_files_are_tolerant(clean_env: dict[str, str], tmp_path: Path) -> None:
    from hwtune.apply.cache import cache_key, load, store

    assert cache_key({"mode": "latency", "instances": 2}, (1, 2)).startswith(
        "mode=latency_instances=2_rank=1of2-"
    )
    assert cache_key({}, None) == "default"
    path = tmp_path / "c.json"
    path.write_text("{not json")
    assert load(str(path), {"x": 1}) is None
    good = {
        "intent": {},
        "env": [["A", "1", "why", "rule"]],
        "threads": {},
        "cpus": [],
        "gpus": [],
        "notes": [],
        "tf_data": {},
    }
    store(str(path), {"x": [1]}, good)
    assert load(str(path), {"x": [1]}) == good
    assert load(str(path), {"x": [2]}) is None
    # Hand-edited with its fingerprint intact: a miss (planned afresh), never a traceback.
    for broken in (
        {**good, "env": [["A", "1"]]},
        {**good, "env": "A=1"},
        {**good, "env": [["A", 1, "why", "rule"]]},
        {**good, "threads": None},
        {key: value for key, value in good.items() if key != "notes"},
    ):
        store(str(path), {"x": [1]}, broken)
        assert load(str(path), {"x": [1]}) is None, broken
    store("/proc/forbidden/c.json", {}, {})  # an unwritable cache only costs speed


def test_workload_names_a_file_name_folds_together_keep_their_own_cache(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    """`a:b`, `a/b`, `a b` and `a-b` all made the cache file `configure-workload=a-b.json`: the
    profile with `a:b`'s measured settings was then handed to `configure(workload="a-b")`."""
    from hwtune.apply.cache import cache_key
    from hwtune.pipeline.measured import save_result

    environ = {**clean_env, "HWTUNE_TUNED_DIR": str(tmp_path / "tuned")}
    profile = profile_for(PlanRequest(environ)).profile
    ruled = profile.env.get("TF_ENABLE_ONEDNN_OPTS")
    tuned = "1" if ruled is not None and ruled.value == "0" else "0"
    record = {"fingerprint": profile.fingerprint, "ratio": 1.5, "mode": profile.intent.mode}
    save_result(
        {**record, "workload": "a:b", "settings": {"env.TF_ENABLE_ONEDNN_OPTS": tuned}}, environ
    )

    def onednn(workload: str) -> list[object]:
        probe = (
            f"import hwtune, json; r = hwtune.configure(tensorflow=False, workload={workload!r})"
            "; print(json.dumps([r.cached, r.env.get('TF_ENABLE_ONEDNN_OPTS')]))"
        )
        out = subprocess.run(
            [PYTHON, "-c", probe], capture_output=True, text=True, timeout=120, env=environ
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)  # type: ignore[no-any-return]

    assert onednn("a:b") == [False, tuned]
    assert onednn("a-b") == [False, ruled.value if ruled else None]
    assert onednn("a:b") == [True, tuned]
    names = ("a:b", "a/b", "a b", "a-b")
    assert len({cache_key({"workload": name}, None) for name in names}) == len(names)


def test_a_cache_file_of_the_old_format_is_not_read(clean_env: dict[str, str]) -> None:
    """A schema-2 file has no request in it: it may hold the profile of a request whose name
    folded to the same file, so it is planned afresh, never used."""
    from hwtune.apply.cache import cache_key, cache_path, lookup
    from hwtune.apply.fingerprint import fingerprint

    path = Path(cache_path(clean_env, cache_key({"workload": "a-b"}, None)))
    path.parent.mkdir(parents=True)
    payload = {
        "intent": {},
        "env": [["HW_PLANTED", "1", "another workload's", "measured"]],
        "threads": {},
        "cpus": [],
        "gpus": [],
        "notes": [],
        "tf_data": {},
    }
    old = {"schema": 2, "fingerprint": fingerprint(clean_env), "payload": payload}
    path.write_text(json.dumps(old))
    fresh, cached, _ = lookup({"workload": "a-b"}, clean_env)
    assert not cached and "HW_PLANTED" not in {entry[0] for entry in fresh["env"]}
    assert lookup({"workload": "a-b"}, clean_env)[1] is True


def test_post_import_hook_runs_after_the_module_and_goes_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from hwtune.apply.importhook import PostImportHook

    package = tmp_path / "hwtune_fake_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("READY = True\n")
    (package / "data.txt").write_text("resource")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[object] = []
    hook = PostImportHook()
    hook.watch("hwtune_fake_pkg", lambda module: seen.append(module.READY))
    assert sys.meta_path[0] is hook
    try:
        import hwtune_fake_pkg  # type: ignore[import-not-found]

        assert seen == [True]
        assert hook not in sys.meta_path
        assert type(hwtune_fake_pkg.__loader__).__name__ == "SourceFileLoader"
        from importlib.resources import files

        assert (files("hwtune_fake_pkg") / "data.txt").read_text() == "resource"
    finally:
        sys.modules.pop("hwtune_fake_pkg", None)
        if hook in sys.meta_path:
            sys.meta_path.remove(hook)


def test_a_tuned_result_reaches_configure_where_named_and_invalidates_its_cache(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    from hwtune.pipeline.measured import save_result

    environ = {**clean_env, "HWTUNE_TUNED_DIR": str(tmp_path / "tuned")}

    def run(arguments: str = "", **extra: str) -> list[object]:
        probe = (
            f"import hwtune, json; r = hwtune.configure(tensorflow=False, {arguments}); "
            "print(json.dumps([r.cached, r.env]))"
        )
        out = subprocess.run(
            [PYTHON, "-c", probe],
            capture_output=True,
            text=True,
            timeout=120,
            env={**environ, **extra},
            check=True,
        ).stdout
        return json.loads(out)  # type: ignore[no-any-return]

    named = 'workload="builtin:test"'
    assert run(named)[0] is False and run(named)[0] is True
    profile = profile_for(PlanRequest(environ)).profile
    # A knob the tuner searches, set the other way from the rules' choice.
    ruled = profile.env.get("TF_ENABLE_ONEDNN_OPTS")
    tuned = "1" if ruled is not None and ruled.value == "0" else "0"
    record = {
        "fingerprint": profile.fingerprint,
        "workload": "builtin:test",
        "ratio": 1.5,
        "mode": profile.intent.mode,
        "settings": {"env.TF_ENABLE_ONEDNN_OPTS": tuned},
    }
    save_result(record, environ)
    cached, env = run(named)
    assert cached is False and env["TF_ENABLE_ONEDNN_OPTS"] == tuned  # type: ignore[index]
    assert run(HWTUNE_WORKLOAD="builtin:test")[1]["TF_ENABLE_ONEDNN_OPTS"] == tuned  # type: ignore[index]
    # Another job, or one that asks for rules only, is not changed by it.
    assert run()[1]["TF_ENABLE_ONEDNN_OPTS"] != tuned  # type: ignore[index]
    assert run(f"{named}, measured=False")[1]["TF_ENABLE_ONEDNN_OPTS"] != tuned  # type: ignore[index]


# ------------------------------------------------------------------------- tuner trials

TRIAL_KNOBS = {
    "TF_NUM_INTRAOP_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "2",
    "TF_ENABLE_ONEDNN_OPTS": "0",
}


@pytest.mark.parametrize(
    ("trial", "jit", "jit_compile", "precision"),
    [
        (
            {"HWTUNE_TRIAL_JIT": "on", "HWTUNE_TRIAL_PRECISION": "mixed_bfloat16"},
            "autoclustering",
            True,
            "mixed_bfloat16",
        ),
        ({"HWTUNE_TRIAL_JIT": "off", "HWTUNE_TRIAL_PRECISION": "float32"}, "off", False, None),
        ({}, None, "auto", None),  # the "TF defaults" trial: nothing to apply
    ],
)
def test_a_trial_keeps_its_own_settings(
    clean_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    trial: dict[str, str],
    jit: str | None,
    jit_compile: bool | str,
    precision: str | None,
) -> None:
    """Under HWTUNE_TRIAL=1 a program's configure() must not undo the settings being measured:
    no profile variable is set, only the trial's JIT and precision are reported for applying."""
    for name, value in {
        "HWTUNE_TRIAL": "1",
        "HWTUNE_MODE": "latency",
        **TRIAL_KNOBS,
        **trial,
    }.items():
        monkeypatch.setenv(name, value)
    before = dict(os.environ)
    with hwtune.configure(tensorflow=False, strict=True) as report:
        assert dict(os.environ) == before
        assert report.env_set == {} and report.env_user == {} and report.problems == []
        assert (report.jit, report.jit_compile, report.precision) == (jit, jit_compile, precision)
        assert report.cache_path == ""  # no profile was looked up
        assert "hwtune tune trial" in report.summary()
    assert dict(os.environ) == before


def test_jit_compile_follows_the_planned_level(clean_env: dict[str, str]) -> None:
    """Keras needs `jit_compile=` itself on a CPU: the report says what the plan decided. The
    level is this machine's: XLA for a dense model, except with one intra-op thread on
    oneDNN's AVX-512 kernels (planner/accel.py, jit_rule), as on one core of an AVX-512 CPU."""
    planned = {
        model: profile_for(PlanRequest(clean_env, model=model)).profile.jit.level.value
        for model in ("dense", "conv")
    }
    dense = hwtune.configure(model="dense", tensorflow=False, use_cache=False)
    conv = hwtune.configure(model="conv", tensorflow=False, use_cache=False)
    assert dense.payload["intent"]["model"] == "dense"
    assert (dense.jit, conv.jit) == (planned["dense"], planned["conv"])
    assert dense.jit_compile is (planned["dense"] != "off")
    assert conv.jit_compile is (planned["conv"] != "off")
    conv.restore()
    dense.restore()


TRIAL_PROGRAM = textwrap.dedent(
    """
    import json, os
    import hwtune
    report = hwtune.configure()
    import keras
    import tensorflow as tf
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse", jit_compile=report.jit_compile)
    print(json.dumps({
        "env": {k: os.environ.get(k) for k in ("TF_NUM_INTRAOP_THREADS",
                                               "TF_NUM_INTEROP_THREADS",
                                               "TF_ENABLE_ONEDNN_OPTS")},
        "tf_jit": str(tf.config.optimizer.get_jit()),
        "keras_jit": model.jit_compile,
        "policy": keras.mixed_precision.global_policy().name,
        "notes": report.notes,
    }))
    """
)


@needs_tf
def test_a_trial_program_that_calls_configure_is_measured_as_the_trial_asked(
    clean_env: dict[str, str],
) -> None:
    """The tuner's trials run the user's program, which calls hwtune.configure(): with real
    TensorFlow and Keras, the trial's threads, JIT and policy are what the program runs with."""
    env = {
        **clean_env,
        "HWTUNE_TRIAL": "1",
        "HWTUNE_TRIAL_JIT": "on",
        "HWTUNE_TRIAL_PRECISION": "mixed_bfloat16",
        **TRIAL_KNOBS,
    }
    result = subprocess.run(
        [PYTHON, "-c", TRIAL_PROGRAM], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["env"] == TRIAL_KNOBS
    assert seen["tf_jit"] == "autoclustering" and seen["keras_jit"] is True
    assert seen["policy"] == "mixed_bfloat16"
    assert any("trial" in note for note in seen["notes"])


def test_trial_variable_names_match_the_tuner() -> None:
    """runtime.py and trial_env.py spell the names out (importing the tuner would cost
    start-up time)."""
    from hwtune.apply import runtime, trial_env
    from hwtune.tune import config

    assert trial_env.TRIAL_ENV == runtime.TRIAL_ENV
    assert (runtime.TRIAL_ENV, trial_env.TRIAL_JIT_ENV, trial_env.TRIAL_PRECISION_ENV) == (
        config.TRIAL_ENV,
        config.TRIAL_JIT_ENV,
        config.TRIAL_PRECISION_ENV,
    )
