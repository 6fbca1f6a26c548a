"""configure()'s record for verify: private, atomic, tied to one process, checked on read."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

from hwtune.apply import record
from tests.apply_profiles import PYTHON


def test_written_private_and_read_back(tmp_path: Path) -> None:
    environ = {"XDG_RUNTIME_DIR": str(tmp_path)}
    path = record.write({"env": {"A": "1"}}, environ)
    assert path == str(tmp_path / "hwtune" / f"configure-{os.getpid()}.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "hwtune").st_mode) == 0o700
    assert [p.name for p in (tmp_path / "hwtune").iterdir()] == [Path(path).name]  # no temp
    data, why = record.read(os.getpid(), [environ])
    assert why == "" and data is not None and data["env"] == {"A": "1"}


def test_a_record_others_can_write_or_of_another_process_is_refused(tmp_path: Path) -> None:
    environ = {"XDG_RUNTIME_DIR": str(tmp_path)}
    path = Path(str(record.write({"env": {}}, environ)))
    path.chmod(0o666)
    data, why = record.read(os.getpid(), [environ])
    assert data is None and "not trusted" in why
    path.chmod(0o600)
    body = json.loads(path.read_text())
    path.write_text(json.dumps({**body, "start": "1"}))  # a recycled pid's old record
    data, why = record.read(os.getpid(), [environ])
    assert data is None and "earlier process" in why


def test_a_fallback_dir_that_is_not_ours_is_not_used(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / f"hwtune-{os.getuid()}").symlink_to(target)
    assert record.write({"env": {}}, {"TMPDIR": str(tmp_path)}) is None
    assert list(target.iterdir()) == []


def test_configure_leaves_a_record_and_removes_it_at_exit(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "TF_"))}
    env.update(
        XDG_RUNTIME_DIR=str(tmp_path / "run"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
    )
    (tmp_path / "run").mkdir()  # the login made it; hwtune makes only its own level
    probe = (
        "import hwtune, json, os; r = hwtune.configure(tensorflow=False); "
        "from hwtune.apply.record import record_path; p = record_path(os.environ, os.getpid()); "
        "print(json.dumps([r.env_set, json.load(open(p))['env']]))"
    )
    out = subprocess.run(
        [PYTHON, "-c", probe], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    env_set, recorded = json.loads(out.stdout)
    assert env_set and {k: recorded[k] for k in env_set} == env_set
    assert list((tmp_path / "run" / "hwtune").iterdir()) == []  # removed when it exited
