"""The ``aucstream`` command as a user meets it: --version, clean one-line errors for bad
flags and settings, and a quiet exit when its output is cut short."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "aucstream.service.cli"]


def _run(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})}, **kw)


def test_version():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    r = _run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"aucstream {version}"


@pytest.mark.parametrize(("args", "env", "says"), [
    (("serve", "--port", "99999"), {}, "a port is 1 to 65535; got 99999"),
    (("serve", "--port", "http"), {}, "not a port number: 'http'"),
    (("serve", "--log-level", "foo"), {}, "invalid choice: 'foo'"),
    (("serve", "--workers", "0"), {}, "at least 1 worker; got 0"),
    (("serve",), {"AUCSTREAM_PORT": "abc"}, "AUCSTREAM_PORT: Input should be a valid integer"),
    (("serve",), {"AUCSTREAM_MAX_MODELS": "0"}, "AUCSTREAM_MAX_MODELS:"),
    (("nonsense",), {}, "invalid choice: 'nonsense'"),
])
def test_a_bad_flag_or_setting_is_one_line_not_a_traceback(args, env, says):
    r = _run(*args, env=env)
    assert r.returncode == 2, r
    assert "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("aucstream")]
    assert len(errors) == 1 and says in errors[0], r.stderr


def test_learners_piped_into_a_reader_that_stops_early_exits_quietly():
    proc = subprocess.Popen([*CLI, "learners"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)  # like `| head -c 10`
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0
    assert "BrokenPipeError" not in err and "Traceback" not in err, err
