"""Renderers: exact quoting per format, checked by the real readers (bash, dash, docker)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hwtune.apply.render import (
    ENV_FILES,
    EnvEntry,
    dotenv_line,
    env_map,
    quote_sh,
    quote_systemd,
    render_all,
    render_env,
    render_env_entries,
    render_tf_config,
    setting_text,
)
from hwtune.errors import ApplyError
from tests.apply_profiles import HOSTILE, hostile_values, make_hardware, make_profile
from tests.conftest import DATA, run_cli
from tests.gpu_roots import t4_under_cuda_11

SHELLS = [s for s in ("bash", "dash") if shutil.which(s)]


def _env0(output: bytes) -> dict[str, str]:
    pairs = (item.partition(b"=") for item in output.split(b"\0") if item)
    return {k.decode(): v.decode() for k, _, v in pairs}


def _source(shell: str, script: str, tmp_path: Path) -> dict[str, str]:
    """Run `script` in a clean shell and return the environment it exports (env -0)."""
    result = subprocess.run(
        [shell, "-c", f"{script}\nenv -0"],
        capture_output=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        check=True,
    )
    return _env0(result.stdout)


def test_sh_quoting_is_single_quotes_with_escaped_quote() -> None:
    assert quote_sh("it's") == "'it'\\''s'"
    assert quote_sh("$x `y` \\") == "'$x `y` \\'"


def test_systemd_quoting_escapes_exactly_the_four_characters() -> None:
    assert quote_systemd('a"b\\c`d$e\nf') == '"a\\"b\\\\c\\`d\\$e\nf"'


def test_setting_text_renders_scalars() -> None:
    assert [setting_text(v) for v in (True, False, 3, 0.5, "x", None)] == [
        "true",
        "false",
        "3",
        "0.5",
        "x",
        None,
    ]


def test_env_map_adds_thread_variables_from_threads() -> None:
    env = env_map(make_profile({"A": "1"}, intra=3, inter=2))
    assert env == {"A": "1", "TF_NUM_INTEROP_THREADS": "2", "TF_NUM_INTRAOP_THREADS": "3"}


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("fmt", ["sh", "systemd"])
def test_hostile_values_round_trip_through_shell_sourcing(
    shell: str, fmt: str, tmp_path: Path
) -> None:
    canary = tmp_path / "canary"
    values = hostile_values(canary)
    if fmt == "systemd":  # refused there: older systemd drops it (test_render_systemd.py)
        values.pop("HW_CR")
    path = tmp_path / "profile.env"
    path.write_text(render_env(make_profile(values), fmt))  # type: ignore[arg-type]
    script = f". {path}" if fmt == "sh" else f"set -a; . {path}; set +a"
    exported = _source(shell, script, tmp_path)
    assert {k: exported.get(k) for k in values} == values
    assert not canary.exists(), "a value was executed"


@pytest.mark.parametrize("shell", SHELLS)
def test_eval_of_command_substitution_keeps_values(shell: str, tmp_path: Path) -> None:
    """`eval "$(hwtune env)"`: command substitution strips trailing newlines of the output
    only, so a value ending in a newline survives inside its quotes."""
    canary = tmp_path / "canary"
    values = hostile_values(canary)
    path = tmp_path / "profile.env"
    path.write_text(render_env(make_profile(values), "sh"))
    exported = _source(shell, f'eval "$(cat {path})"', tmp_path)
    assert {k: exported.get(k) for k in values} == values
    assert not canary.exists()


def test_dotenv_refuses_what_docker_cannot_hold() -> None:
    for bad in ("a\nb", "a\rb", "'wrapped'", '"wrapped"', "x" * 70000):
        with pytest.raises(ApplyError) as err:
            dotenv_line("NAME", bad)
        assert "NAME" in err.value.message
    assert dotenv_line("NAME", "'half") == "NAME='half"
    assert dotenv_line("NAME", " spaced $HOME `x` ") == "NAME= spaced $HOME `x` "


def test_dotenv_render_names_the_variable_it_refuses() -> None:
    with pytest.raises(ApplyError, match=r"HW_NEWLINE.*docker"):
        render_env(make_profile({"HW_NEWLINE": "a\nb"}), "dotenv")


def test_names_and_nul_are_refused_in_every_format() -> None:
    for fmt in ("sh", "systemd", "dotenv", "json"):
        with pytest.raises(ApplyError, match="portable name"):
            render_env_entries([EnvEntry("BAD-NAME", "x")], fmt)
        with pytest.raises(ApplyError, match="NUL"):
            render_env_entries([EnvEntry("OK", "a\0b")], fmt)


def test_comments_cannot_swallow_the_next_line() -> None:
    """A reason with a newline or a trailing backslash stays one comment line."""
    entry = EnvEntry("A", "1", reason="first\nA=evil \\")
    for fmt in ("sh", "systemd", "dotenv"):
        lines = render_env_entries([entry], fmt).splitlines()
        assert lines[0].startswith("# A: first A=evil") and not lines[0].endswith("\\")
        # The entry, then the HWTUNE_PROFILE marker (hwtune.apply.marker): no third variable.
        assert len(lines) == 4 and "HWTUNE_PROFILE=" in lines[3]


def test_json_format_is_the_env_map() -> None:
    values = {k: v for k, v in HOSTILE.items()}
    profile = make_profile(values)
    assert json.loads(render_env(profile, "json")) == env_map(profile)


def test_render_all_names_and_bazelrc() -> None:
    files = render_all(make_profile(), make_hardware())
    assert list(files)[:4] == list(ENV_FILES)
    assert files["tensorflow.bazelrc"] == "build --copt=-march=native\n"
    assert "tensorflow.bazelrc" not in render_all(make_profile(bazelrc=None), make_hardware())
    assert json.loads(files["hwtune.json"])["TF_NUM_INTRAOP_THREADS"] == "2"
    assert json.loads(files["hardware.json"])["memory"]["available_bytes"] is None


def test_tf_config_lists_gpus_only_for_a_slice() -> None:
    text = render_tf_config(make_profile(jit="autoclustering"))
    assert "intra_op_parallelism_threads: 2" in text and "global_jit_level: ON_2" in text
    assert "gpu_options" not in text
    split = make_profile(instances=((0,), (1,)), index=1, gpus=((0,), (1, 2)))
    assert 'visible_device_list: "1,2"' in render_tf_config(split)
    with pytest.raises(ApplyError, match=r"jit\.level"):
        render_tf_config(make_profile(jit="sometimes"))


def test_a_user_cuda_visible_devices_cannot_add_config_lines() -> None:
    """The user's value is quoted in a comment; a newline in it must not start a field."""
    profile = make_profile(
        {"CUDA_VISIBLE_DEVICES": "1\nintra_op_parallelism_threads: 64"},
        instances=((0,), (1,)),
        index=1,
        gpus=((0,), (1,)),
    )
    text = render_tf_config(profile)
    assert "intra_op_parallelism_threads: 64" not in text.splitlines()
    (comment,) = [line for line in text.splitlines() if "CUDA_VISIBLE_DEVICES" in line]
    assert comment.startswith("#") and "already restricts" in comment


@pytest.mark.parametrize("text", ["a\\ \\", "a \\\\", "x\\\n\\"])
def test_comments_never_end_in_a_backslash(text: str) -> None:
    from hwtune.apply.render import _comment

    assert not _comment(text).endswith("\\")


class _FakeDocker:
    """Enough of the Docker Engine API for `docker create` to send its request and stop."""

    def __init__(self, socket_path: Path) -> None:
        import http.server
        import socketserver
        import threading

        bodies: list[bytes] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _send(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Api-Version", "1.41")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_HEAD(self) -> None:
                self._send(200, b"")

            def do_GET(self) -> None:
                self._send(200 if self.path.endswith("/_ping") else 404, b"{}")

            def do_POST(self) -> None:
                bodies.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                self._send(500, b'{"message": "test daemon stops here"}')

            def log_message(self, *args: object) -> None:
                pass

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self.bodies = bodies
        self.server = Server(str(socket_path), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.skipif(shutil.which("docker") is None, reason="the docker CLI is not installed")
def test_dotenv_values_reach_docker_exactly(tmp_path: Path) -> None:
    """The real docker CLI parses hwtune.dotenv; a stub daemon captures the container's Env."""
    canary = tmp_path / "canary"
    holdable = {
        k: v for k, v in hostile_values(canary).items() if k not in ("HW_NEWLINE", "HW_CR")
    }
    holdable["HW_HALF_QUOTE"] = "'starts with a quote"
    env_file = tmp_path / "hwtune.dotenv"
    env_file.write_text(render_env(make_profile(holdable), "dotenv"))
    daemon = _FakeDocker(tmp_path / "docker.sock")
    try:
        subprocess.run(
            ["docker", "create", "--env-file", str(env_file), "busybox"],
            capture_output=True,
            env={
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "HOME": str(tmp_path),
                "DOCKER_HOST": f"unix://{tmp_path / 'docker.sock'}",
            },
            timeout=60,
            check=False,
        )
    finally:
        daemon.close()
    assert daemon.bodies, "docker sent no create request"
    sent = dict(item.partition("=")[::2] for item in json.loads(daemon.bodies[-1])["Env"])
    assert {k: sent.get(k) for k in holdable} == holdable
    assert not canary.exists()


def test_env_command_formats_and_refusal(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    environ = {k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "SLURM_"))}
    environ["XDG_CACHE_HOME"] = str(tmp_path)
    as_json = run_cli(["env", "--format", "json"], environ)
    assert as_json.exit_status == 0 and "TF_NUM_INTRAOP_THREADS" in json.loads(as_json.stdout)
    assert list(tmp_path.glob("hwtune/configure-*.json")), "hwtune env fills the profile cache"
    sh = run_cli(["env", "--set", "HW_X=a'b"], environ)
    assert sh.exit_status == 0 and "export HW_X='a'\\''b'" in sh.stdout
    refused = run_cli(["env", "--format", "dotenv", "--set", "HW_X=a\nb"], environ)
    assert refused.exit_status == 1 and refused.stdout == ""
    assert "HW_X" in refused.stderr and "docker" in refused.stderr and "hint:" in refused.stderr


def test_tf_config_jit_level_matches_the_env_files_and_says_what_a_cpu_needs(
    tmp_path: Path,
) -> None:
    """`--tf_xla_auto_jit=2` in the env files is global_jit_level ON_2 (config.proto: ON_1 = 1,
    ON_2 = 2), and on a CPU the pbtxt says the level alone clusters nothing without
    --tf_xla_cpu_global_jit; on a GPU it says nothing of the kind."""
    cpu_out, gpu_out = tmp_path / "cpu", tmp_path / "gpu"
    host = DATA / "hosts" / "utillinux-x86_64-epyc_7451"
    done = run_cli(["apply", "--output", str(cpu_out), "--root", str(host), "--model", "dense"])
    assert done.exit_status == 0, done.stderr
    env = (cpu_out / "hwtune.env").read_text()
    assert "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit" in env
    pbtxt = (cpu_out / "tf_config.pbtxt").read_text()
    assert "global_jit_level: ON_2" in pbtxt and "ON_1" not in pbtxt
    (note,) = [line for line in pbtxt.splitlines() if "tf_xla_cpu_global_jit" in line]
    assert note.startswith("# ") and "which hwtune's env files set" in note

    t4 = t4_under_cuda_11(tmp_path)
    # --precision auto: on a GPU XLA is planned with mixed precision only (planner/accel.py).
    gpu_args = ["--root", str(t4), "--model", "dense", "--precision", "auto"]
    done = run_cli(["apply", "--output", str(gpu_out), *gpu_args])
    assert done.exit_status == 0, done.stderr
    assert "--tf_xla_auto_jit=2" in (gpu_out / "hwtune.env").read_text()
    pbtxt = (gpu_out / "tf_config.pbtxt").read_text()
    assert "global_jit_level: ON_2" in pbtxt and "tf_xla_cpu_global_jit" not in pbtxt


def test_env_on_stdout_does_not_claim_apply_rewrites_it(tmp_path: Path) -> None:
    """`hwtune env` prints where no file is written: its header must not say the file is
    rewritten by `hwtune apply`, as the file apply writes does."""
    host = DATA / "hosts" / "utillinux-x86_64-epyc_7451"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "SLURM_"))}
    environ["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    rewritten = "Rewritten by `hwtune apply`"
    for argv in (["env"], ["env", "--root", str(host)], ["env", "--format", "systemd"]):
        printed = run_cli(argv, environ)
        assert printed.exit_status == 0 and "Generated by hwtune" in printed.stdout, argv
        assert rewritten not in printed.stdout, argv
    done = run_cli(["apply", "--output", str(tmp_path / "out"), "--root", str(host)], environ)
    assert done.exit_status == 0, done.stderr
    written = [p.read_text() for p in (tmp_path / "out").iterdir() if p.name.endswith(".env")]
    assert written and all(rewritten in text for text in written)
