"""``aucstream serve --workers 2``: every scrape of /metrics adds up both workers, and each
worker serves every model (each is a replica)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.redis_servers import free_port


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_two_workers_share_their_metrics_and_models(tmp_path):
    port = free_port()
    env = {**os.environ, "AUCSTREAM_DATA_DIR": str(tmp_path / "data"),
           "AUCSTREAM_LOG_LEVEL": "info", "AUCSTREAM_SYNC_INTERVAL": "0.05"}
    env.pop("AUCSTREAM_REDIS_URL", None)
    # the folder the CLI would make itself, here where the test can look into it
    prom = tmp_path / "prom"
    prom.mkdir()
    env["PROMETHEUS_MULTIPROC_DIR"] = str(prom)
    # the server's log, shown (pytest prints a failing test's output) when this fails
    server_log = tmp_path / "server.log"
    with server_log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "aucstream.service.cli", "serve",
                                 "--port", str(port), "--workers", "2"], env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240  # a cold numba cache: compiling
        while True:
            assert proc.poll() is None
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.1)
        # every request on a fresh connection: the kernel spreads them over both workers
        spec = {"name": "w", "learner": "cbr_diag_fifo", "features": {"kind": "dense",
                                                                     "dim": 2}}
        assert httpx.post(f"{url}/models", json=spec).status_code == 201
        sent = 0
        # until both workers have learned some (each writes its own counter file)
        while sent < 12 or len(list(prom.glob("counter_*.db"))) < 2:
            events = [{"x": [0.1 * j, 1.0], "label": j % 2, "id": f"{sent}-{j}"}
                      for j in range(10)]
            # (longer than the server's wait for the owner's publication, 10 s: a slow
            # owner shows as a 202 and a warning in the log, not as a client timeout)
            r = httpx.post(f"{url}/learn", json={"model": "w", "events": events}, timeout=30)
            assert r.status_code == 200, r.text
            sent += 1
            assert sent < 200, "every request went to one worker"
        seen = set()
        for _ in range(10):
            m = _samples(httpx.get(f"{url}/metrics").text)
            learned = sum(v for (name, labels), v in m.items()
                          if name == "aucstream_events_learned_total"
                          and ("model", "w") in labels)
            assert learned == 10 * sent  # each event once, whichever worker learned it
            requests = m[("aucstream_learn_latency_seconds_count", (("model", "w"),))]
            assert requests == sent
            seen.add(m.get(("aucstream_model_version", (("model", "w"),))))
        assert seen == {10.0 * sent}
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        print(server_log.read_text()[-30_000:])
