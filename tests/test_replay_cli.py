"""``aucstream replay FILE --model M`` against ``aucstream serve``: CSV, LIBSVM and JSON
lines; a resumed replay learns no row twice, even after the service forgot old ids."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from aucstream import Client
from tests.test_client import _serve

CLI = [sys.executable, "-m", "aucstream.service.cli", "replay"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # a small dedup window, trimmed often: a resume must not lean on old ids
    proc, url = _serve(tmp_path_factory.mktemp("replay"), AUCSTREAM_DEDUP_WINDOW="10",
                       AUCSTREAM_CHECKPOINT_EVERY="50", AUCSTREAM_LOG_RETENTION="0",
                       AUCSTREAM_SYNC_INTERVAL="0.05")
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def _replay(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args, "--url", url], capture_output=True, text=True,
                          timeout=120)


def _write(path, rows):
    path.write_text("".join(rows))
    return str(path)


def test_csv_libsvm_and_jsonl(server, tmp_path):
    csv_rows = ["a,b,label\n"] + [f"{k % 5},{-k % 3},{int(k % 4 == 0)}\n" for k in range(230)]
    f = _write(tmp_path / "d.csv", csv_rows)
    r = _replay(server, f, "--model", "csv", "--learner", "cbr_fifo", "--batch", "50")
    assert r.returncode == 0, r.stderr
    assert "version 230" in r.stdout and "230 / 230 rows (100 %)" in r.stderr
    c = Client(server)
    info = c.get_model("csv")
    assert info["features"] == {"kind": "dense", "dim": 2} and info["learner"] == "cbr_fifo"
    svm = [f"{1 if k % 3 == 0 else -1} 1:{k % 7} 4:{k % 2}\n" for k in range(120)]
    r = _replay(server, _write(tmp_path / "d.svm", svm), "--model", "svm")
    assert r.returncode == 0, r.stderr
    info = c.get_model("svm")
    assert info["features"] == {"kind": "dense", "dim": 4} and info["learner"] == "auto"
    assert info["version"] == 120
    jl = [json.dumps({"features": {"site": f"s{k % 4}"}, "label": k % 2}) + "\n"
          for k in range(80)]
    r = _replay(server, _write(tmp_path / "d.jsonl", jl), "--model", "jl", "--bits", "12")
    assert r.returncode == 0, r.stderr
    assert c.get_model("jl")["features"] == {"kind": "hashed", "bits": 12}
    assert c.get_model("jl")["version"] == 80


def test_a_resumed_replay_learns_no_row_twice(server, tmp_path):
    rows = ["x,y,label\n"] + [f"{k % 9},{k % 4},{int(k % 5 == 0)}\n" for k in range(1000)]
    f = _write(tmp_path / "r.csv", rows)
    r = _replay(server, f, "--model", "res", "--learner", "cbr_diag_fifo", "--batch", "40",
                "--limit", "333")
    assert r.returncode == 0, r.stderr
    c = Client(server)
    assert c.get_model("res")["version"] == 333
    r = _replay(server, f, "--model", "res")  # exists: refuses without --resume
    assert r.returncode == 2 and "--resume continues it at its version (333)" in r.stderr
    r = _replay(server, f, "--model", "res", "--resume", "--batch", "40")
    assert r.returncode == 0, r.stderr
    info = c.get_model("res")
    assert info["version"] == 1000  # 333 + 667: each row once, ids long forgotten
    assert sum(info["events"].values()) == 1000


@pytest.mark.parametrize(("content", "says"), [
    ("a,b\n1,2\n", "no 'label' column"),
    ("a,label\nx,1\n", "non-numeric value; pass --bits"),
    ("a,label\n1,maybe\n", "the label 'maybe' is not"),
])
def test_a_bad_file_is_one_line(server, tmp_path, content, says):
    r = _replay(server, _write(tmp_path / "bad.csv", [content]), "--model", "bad")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert says in r.stderr.strip().splitlines()[-1]


def test_an_unreachable_service_is_one_line(tmp_path):
    r = subprocess.run([*CLI, _write(tmp_path / "a.csv", ["a,label\n1,1\n"]), "--model", "m",
                        "--url", "http://127.0.0.1:9", "--retries", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "cannot reach http://127.0.0.1:9" in r.stderr
    assert "Traceback" not in r.stderr
