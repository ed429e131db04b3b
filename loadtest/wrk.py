"""Score load from wrk (a C load generator) instead of the benchmark's own Python client.

On a two-core machine the aiohttp client takes ~0.45 of a core at ~4,000 /score
requests/s, CPU the replicas it measures no longer have. wrk sends the same
pre-serialised bodies over the same number of keep-alive connections (a closed loop per
connection, as the Python client) for a fraction of that. Each target gets its own wrk
process; their latency histograms (1 µs resolution) are merged here.

wrk comes from Debian (``apt-get install wrk``); :func:`available` says whether it is
on the PATH.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["WrkRun", "available", "parse_output", "run_score_load", "version"]

# Pre-formats every body once per thread, cycles through them, and prints the summary
# and the latency histogram as plain lines for parse_output.
_SCRIPT = r"""
local requests, n, at = {}, 0, 0
function init(args)
  local dir, count = args[1], tonumber(args[2])
  for i = 1, count do
    local f = assert(io.open(dir .. "/" .. i .. ".json", "rb"))
    local body = f:read("*a")
    f:close()
    requests[i] = wrk.format("POST", "/score", {["Content-Type"] = "application/json"}, body)
  end
  n = count
end
function request()
  at = at % n + 1
  return requests[at]
end
function done(summary, latency, requests_)
  local e = summary.errors
  io.write(string.format("WRK-SUMMARY %d %d %d %d %d %d %d\n", summary.requests,
    summary.duration, e.connect, e.read, e.write, e.status, e.timeout))
  for i = 1, #latency do
    local value, count = latency(i)
    if count > 0 then io.write(string.format("WRK-LAT %d %d\n", value, count)) end
  end
end
"""


def available() -> bool:
    return shutil.which("wrk") is not None


def version() -> str:
    """What ``wrk --version`` says of itself (its first words), e.g. 'wrk debian/4.1.0-3+b2'."""
    out = subprocess.run(["wrk", "--version"], capture_output=True, text=True).stdout
    return " ".join(out.split()[:2]) or "wrk"


@dataclass
class WrkRun:
    """One wrk process's result: requests, seconds, errors and latencies (µs → count)."""

    requests: int = 0
    seconds: float = 0.0
    errors: Counter = field(default_factory=Counter)
    histogram: Counter = field(default_factory=Counter)

    def latencies_s(self) -> list[float]:
        """Every request's latency in seconds (expanded from the histogram)."""
        return [us / 1e6 for us, count in sorted(self.histogram.items()) for _ in range(count)]


def parse_output(text: str) -> WrkRun:
    """The lines the script's ``done`` prints; anything else wrk prints is ignored."""
    run = WrkRun()
    seen_summary = False
    for line in text.splitlines():
        parts = line.split()
        if parts[:1] == ["WRK-SUMMARY"] and len(parts) == 8:
            req, dur, *errs = (int(p) for p in parts[1:])
            run.requests, run.seconds = req, dur / 1e6
            for name, n in zip(("connect", "read", "write", "status", "timeout"), errs,
                               strict=True):
                if n:
                    run.errors[name] += n
            seen_summary = True
        elif parts[:1] == ["WRK-LAT"] and len(parts) == 3:
            run.histogram[int(parts[1])] += int(parts[2])
    if not seen_summary:
        raise RuntimeError(f"wrk printed no summary: {text[-500:]!r}")
    return run


async def _one(base: str, bodies_dir: Path, count: int, script: Path, connections: int,
               seconds: float) -> WrkRun:
    url = urlsplit(base)
    proc = await asyncio.create_subprocess_exec(
        "wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "30s",
        "-s", str(script), f"{url.scheme}://{url.netloc}/score", "--", str(bodies_dir),
        str(count), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"wrk exited {proc.returncode}: {out.decode()[-500:]}")
    return parse_output(out.decode())


async def run_score_load(bases: Sequence[str], bodies: Sequence[bytes], connections: int,
                         seconds: float) -> list[WrkRun]:
    """``connections`` closed-loop connections to each base URL's /score for ``seconds``,
    one wrk process (one thread) per base."""
    if not available():
        raise RuntimeError("wrk is not on the PATH (Debian: apt-get install wrk)")
    with tempfile.TemporaryDirectory(prefix="aucstream-wrk-") as tmp:
        d = Path(tmp)
        for i, body in enumerate(bodies, 1):
            (d / f"{i}.json").write_bytes(body)
        script = d / "score.lua"
        script.write_text(_SCRIPT)
        return list(await asyncio.gather(*(
            _one(b, d, len(bodies), script, connections, seconds) for b in bases)))
