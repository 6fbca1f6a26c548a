"""Overrides from config files, HWTUNE_* variables, --set and flags: precedence and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwtune.errors import ConfigError
from hwtune.pipeline.config import (
    Overrides,
    default_config_paths,
    load_overrides,
    parse_config_text,
    with_flags,
)

FULL = """
mode = "latency"
instances = 2
instance = 1
precision = "auto"
tf_version = "2.19"
jit = "off"
data_format = "channels_last"

[threads]
intra_op = 8
inter_op = 1

[env]
TF_CPP_MIN_LOG_LEVEL = "2"
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_full_config_file(tmp_path: Path) -> None:
    path = write(tmp_path / "config.toml", FULL)
    got = load_overrides({}, [], [path])
    assert (got.mode, got.instances, got.instance, got.precision) == ("latency", 2, 1, "auto")
    assert (got.tf_version, got.jit, got.data_format) == ("2.19", "off", "channels_last")
    assert (got.intra_op, got.inter_op) == (8, 1)
    assert got.env == {"TF_CPP_MIN_LOG_LEVEL": "2"}
    assert got.origin("mode") == str(path) and got.origin("env.TF_CPP_MIN_LOG_LEVEL") == str(path)


def test_precedence_system_user_environ_sets_flags(tmp_path: Path) -> None:
    system = write(
        tmp_path / "etc.toml",
        'mode = "latency"\ninstances = 4\n[env]\nA = "system"\nB = "system"\n',
    )
    user = write(tmp_path / "user.toml", 'instances = 3\n[env]\nB = "user"\n')
    environ = {"HWTUNE_INSTANCES": "2", "HWTUNE_KNOWLEDGE_DIR": "/elsewhere"}
    got = load_overrides(environ, ["B=flag"], [system, user, tmp_path / "missing.toml"])
    assert got.mode == "latency" and got.origin("mode") == str(system)
    assert got.instances == 2 and got.origin("instances") == "HWTUNE_INSTANCES"
    assert got.env == {"A": "system", "B": "flag"} and got.origin("env.B") == "--set"
    flagged = with_flags(got, mode="throughput", instances=None)
    assert flagged.mode == "throughput" and flagged.origin("mode") == "--mode"
    assert flagged.instances == 2


def test_default_paths_follow_xdg(tmp_path: Path) -> None:
    assert (
        default_config_paths({"XDG_CONFIG_HOME": str(tmp_path)})[1]
        == tmp_path / "hwtune" / "config.toml"
    )
    assert default_config_paths({"HOME": "/home/u"})[1] == Path(
        "/home/u/.config/hwtune/config.toml"
    )
    assert default_config_paths({})[0] == Path("/etc/hwtune/config.toml")


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        ('mdoe = "latency"', "at 'mdoe': unknown key", "did you mean 'mode'?"),
        (
            "[threads]\nintra_ops = 2",
            "at 'threads.intra_ops': unknown key",
            "did you mean 'intra_op'?",
        ),
        ('instances = "two"', "at 'instances'", None),
        ("[env]\nOMP_NUM_THREADS = 4", "at 'env.OMP_NUM_THREADS': expected str", None),
        ('mode = "fast"', "is not one of", None),
        ('mode = "LATENCY"', "is not one of", "did you mean 'latency'?"),
        ("threads = 3", "at 'threads': expected a table, got int 3", None),
        ("instances = 0", "'instances': 0 is below the minimum 1", None),
        ('tf_version = "latest"', "is not a TensorFlow version", "e.g. 2.19"),
        ('[env]\n"1BAD" = "x"', "is not an environment variable name", None),
        (
            '[env]\nX_NUL = "a\\u0000b"',
            "'[env].X_NUL': the value of X_NUL contains a NUL character",
            "remove the NUL (\\u0000 in TOML) from the value",
        ),
        ("mode = ", "invalid TOML", None),
    ],
)
def test_bad_config_names_file_key_and_hint(text: str, message: str, hint: str | None) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config_text(text, "/etc/hwtune/config.toml")
    assert err.value.message.startswith("/etc/hwtune/config.toml")
    assert message in err.value.message
    if hint:
        assert err.value.hint == hint


def test_invalid_toml_names_the_line() -> None:
    with pytest.raises(ConfigError, match="line 2"):
        parse_config_text('mode = "latency"\nmode = \ninstances = 2\n', "c.toml")


def test_a_byte_order_mark_is_no_error(tmp_path: Path) -> None:
    """Notepad saves UTF-8 with a BOM; tomllib refused it as an invalid statement at line 1.
    Read from a file, as hwtune reads config.toml, so the decoding is the real one."""
    config = tmp_path / "config.toml"
    config.write_bytes(b'\xef\xbb\xbfmode = "latency"\n')
    text = config.read_bytes().decode("utf-8")
    assert parse_config_text(text, str(config)).mode == "latency"


def test_hwtune_variables() -> None:
    got = load_overrides(
        {"HWTUNE_MODE": "latency", "HWTUNE_INTRA_OP": "4", "HWTUNE_JIT": ""}, [], []
    )
    assert got.mode == "latency" and got.intra_op == 4 and got.jit is None
    with pytest.raises(ConfigError, match="HWTUNE_INSTANCES='many': expected a whole number"):
        load_overrides({"HWTUNE_INSTANCES": "many"}, [], [])
    with pytest.raises(ConfigError) as err:
        load_overrides({"HWTUNE_MDOE": "latency"}, [], [])
    assert err.value.hint == "did you mean HWTUNE_MODE?"
    with pytest.raises(ConfigError) as err:
        load_overrides({"HWTUNE_PRECISION": "autp"}, [], [])
    assert err.value.hint == "did you mean 'auto'?"


def test_model_kind_from_file_variable_and_flag(tmp_path: Path) -> None:
    path = write(tmp_path / "config.toml", 'model = "conv"\n')
    got = load_overrides({}, [], [path])
    assert got.model == "conv" and got.origin("model") == str(path)
    got = load_overrides({"HWTUNE_MODEL": "dense"}, [], [path])
    assert got.model == "dense" and got.origin("model") == "HWTUNE_MODEL"
    flagged = with_flags(got, model="unknown")
    assert flagged.model == "unknown" and flagged.origin("model") == "--model"
    with pytest.raises(ConfigError) as err:
        load_overrides({}, [], [write(tmp_path / "bad.toml", 'model = "dnese"\n')])
    assert "bad.toml" in err.value.message and err.value.hint == "did you mean 'dense'?"


def test_sets() -> None:
    got = load_overrides({}, ["KMP_BLOCKTIME=0", "EMPTY=", "URL=a=b"], [])
    assert got.env == {"KMP_BLOCKTIME": "0", "EMPTY": "", "URL": "a=b"}
    with pytest.raises(ConfigError, match="expected NAME=VALUE"):
        load_overrides({}, ["KMP_BLOCKTIME"], [])
    with pytest.raises(ConfigError, match="not an environment variable name"):
        load_overrides({}, ["BAD NAME=1"], [])
    with pytest.raises(ConfigError, match="--set X: the value of X contains a NUL"):
        load_overrides({}, ["X=a\0b"], [])
    raw = b"\xff caf\xe9".decode("utf-8", "surrogateescape")  # argv bytes that are not UTF-8
    assert load_overrides({}, [f"RAW={raw}"], []).env == {"RAW": raw}


def test_merged_keeps_earlier_values_where_later_is_unset() -> None:
    early = Overrides(mode="latency", env={"A": "1"}, origins={"mode": "x"})
    late = Overrides(instances=2, env={"B": "2"})
    got = early.merged(late)
    assert got.mode == "latency" and got.instances == 2 and got.env == {"A": "1", "B": "2"}


def test_a_later_count_without_an_index_starts_the_index_over() -> None:
    """An index belongs to the count it came with: HWTUNE_INSTANCE=1 (a parent exec's) is not
    the index of `--instances 1`."""
    early = Overrides(instances=4, instance=3, origins={"instances": "x", "instance": "x"})
    count = early.merged(Overrides(instances=2, origins={"instances": "--instances"}))
    assert (count.instances, count.instance) == (2, None)
    assert count.origins == {"instances": "--instances"}
    both = early.merged(Overrides(instances=8, instance=5))
    assert (both.instances, both.instance) == (8, 5)
    index = early.merged(Overrides(instance=1))
    assert (index.instances, index.instance) == (4, 1)
    other = early.merged(Overrides(mode="latency"))
    assert (other.instances, other.instance) == (4, 3)


def test_relative_xdg_is_ignored_and_other_modules_agree(tmp_path: Path) -> None:
    from hwtune.pipeline.config import config_paths

    assert config_paths({"XDG_CONFIG_HOME": "rel", "HOME": "/h"})[1] == Path(
        "/h/.config/hwtune/config.toml"
    )
    environ = {"XDG_CONFIG_HOME": str(tmp_path), "HOME": "/h"}
    try:  # the daemon watches the same files the planner reads
        from hwtune.daemon.inputs import config_paths as watched
    except ImportError:
        pytest.skip("no daemon module")
    assert [Path(p) for p in watched(environ)] == list(config_paths(environ))


def test_a_config_path_that_is_no_regular_file_is_an_error(tmp_path: Path) -> None:
    """Absent is fine; a directory or a dangling link named config.toml is a mistake to report,
    with the run's exit status (`hwtune plan` exits 1), not a config silently skipped."""
    import subprocess
    import sys

    home = tmp_path / "config"
    (home / "hwtune" / "config.toml").mkdir(parents=True)
    config = home / "hwtune" / "config.toml"
    with pytest.raises(ConfigError, match=r"config.toml: a directory, not a regular file"):
        load_overrides({}, config_paths=[config])
    config.rmdir()
    config.symlink_to(tmp_path / "dotfiles" / "hwtune.toml")
    with pytest.raises(ConfigError, match=r"a symbolic link to .*hwtune.toml.*does not exist"):
        load_overrides({}, config_paths=[config])
    assert load_overrides({}, config_paths=[tmp_path / "absent.toml"]) == load_overrides(
        {}, config_paths=[]
    )
    done = subprocess.run(
        [sys.executable, "-m", "hwtune", "plan", "--json"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
    )
    assert done.returncode == 1 and "does not exist" in done.stderr, done.stderr
