"""The fault benchmark: the real service under 16 clients while its process, its store
or its disk fail, and while clients send poison inputs; nothing acknowledged may be lost.

For each store (the embedded SQLite store; a throw-away redis-server with ``appendonly
yes`` and ``appendfsync always``) and each scenario it starts a fresh ``python -m
aucstream.service.cli serve``, creates a hashed ``cbr_diag_fifo`` model (2^18, ad-click events of
``loadtest/feed.py``) and a dense ``cbr_fifo`` model (d = 8), and drives them with
``--clients`` threads (httpx) for ``--duration`` seconds while it injects the fault:

- ``kill9``: SIGKILL of the service mid-load, restart at once (time to ready, to scoring);
- ``redis-kill``: SIGKILL of redis-server, restarted 3 s later (the AOF brings data back);
- ``redis-stall``: SIGSTOP of redis-server for 8 s, then SIGCONT;
- ``full-disk``: the store's directory on a small tmpfs that fills up, then is freed
  (skipped, with the reason, where ``mount -t tmpfs`` is refused);
- ``poison``: feature values 1.8e308, 1e160, -1e200, 5e-324, NaN/Infinity tokens,
  invalid UTF-8 in a feature name, ``noam`` with sigma=1e-300 and ``opauc`` with
  eta=1e30 at POST /models, oversized bodies and too many events;
- ``poison-open``: the same with the feature-value bound opened, so that huge values
  reach the durable log and the model's all-or-nothing apply must refuse them.

Clients follow the contract: 503 (nothing learned) is retried with the same body, 504
``outcome_unknown`` only by requests with ids; one request in five has no ids. Every
event carries a unique number in its payload, so that afterwards — the service killed
and restarted once more, then stopped — the durable log is read back event by event
(``open_store``/``read_log``/``decode_batch``) and replayed into a fresh learner as
recovery does (an entry that would make it non-finite is refused). The table gives
acknowledged events, **lost** ones (acknowledged, not held by the durable model), events
**learned twice** (with ids; and without, with the answers their attempts got), 5xx
answers by code, the slowest acknowledgement, time to ready, whether every model serves
finite scores and learns after the restart, and whether the service's recovered model
equals the replay (event count, scores bit for bit). Then PASS/FAIL per target.

    python -m loadtest.faults                               # both stores, every scenario
    python -m loadtest.faults --store sqlite --scenario poison --duration 5
    python -m loadtest.faults --write                       # also bench/RESULTS.md

Progress goes to stderr, the report (markdown) to stdout. Without ``--write`` nothing
tracked is written (everything lives in a temporary directory). Every process and mount
it started is stopped, also on Ctrl-C or failure. Needs root for the tmpfs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from loadtest._faults_load import POISON
from loadtest._faults_run import SCENARIOS, Options, Row, run_one, say
from loadtest.bench_service import (
    RESULTS,
    code_version,
    cpu_model,
    markdown_table,
    write_marked,
)

__all__ = ["SCENARIOS", "Options", "Row", "main", "report", "run", "targets"]

BEGIN, END = "<!-- faults:begin -->", "<!-- faults:end -->"
HEADING = "## Fault benchmark"


def run(stores: Sequence[str], scenarios: Sequence[str], opts: Options) -> list[Row]:
    """Every scenario on every store, one after the other, in a temporary directory."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="aucstream-faults-") as tmp:
        for store in stores:
            for scenario in scenarios:
                rows.append(run_one(store, scenario, opts, Path(tmp)))
    return rows


# ---------------------------------------------------------------------------- verdicts
def poison_verdict(kind: str, outcomes: dict[str, int], bad_body: int) -> str:
    """'ok' or what is wrong with the answers to one poison kind."""
    if kind.endswith(": learn"):
        fives = sum(n for s, n in outcomes.items() if s.startswith("5"))
        return "ok" if not fives else f"{fives} × 5xx"
    expect = POISON[kind][0]
    codes = {s: n for s, n in outcomes.items()}
    fives = sum(n for s, n in codes.items() if s.startswith("5"))
    if expect == "no-5xx":
        return "ok" if not fives else f"{fives} × 5xx"
    wrong = {s: n for s, n in codes.items() if s not in ("413", "422")}
    problems = []
    if wrong:
        problems.append("answered " + ", ".join(f"{n} × {s}" for s, n in sorted(wrong.items())))
    if bad_body:
        problems.append(f"{bad_body} × 4xx without the error body")
    return "; ".join(problems) or "ok"


def targets(rows: Sequence[Row]) -> list[tuple[str, bool, str]]:
    """(target, met, where it failed) over every run that was not skipped."""
    ran = [r for r in rows if not r.skipped]
    broken = [r for r in ran if r.error]
    ran = [r for r in ran if not r.error]

    def where(bad: list[Row], what) -> str:  # type: ignore[no-untyped-def]
        return "; ".join(f"{r.store} {r.scenario}: {what(r)}" for r in bad)

    out = [("every run completed", not broken, where(broken, lambda r: r.error))]
    bad = [r for r in ran if r.lost]
    out.append(("0 acknowledged events lost", not bad, where(bad, lambda r: f"{r.lost:,}" + (
        f" ({r.lost_poison:,} of poison requests answered 200)" if r.lost_poison else ""))))
    bad = [r for r in ran if r.twice_ids]
    out.append(("0 events with ids learned twice", not bad, where(bad, lambda r: r.twice_ids)))
    bad = [r for r in ran if r.twice_noids]
    out.append(("503 means nothing learned: 0 id-less events learned twice (clients retry "
                "id-less requests only after a 503 or a refused connection)", not bad,
                where(bad, lambda r: dict(r.twice_noids_after))))
    bad = [r for r in ran if r.statuses["500"]]
    out.append(("0 × 500 for any input", not bad, where(bad, lambda r: r.statuses["500"])))
    bad = [r for r in ran if r.serving]
    out.append(("every model ready, serving finite scores and learning after a kill -9 "
                "restart", not bad, where(bad, lambda r: "; ".join(r.serving[:3]))))
    bad = [r for r in ran if any(v != 0 for v in r.model_vs_log.values())
           or not all(r.scores_match.values())]
    out.append(("the recovered model equals a replay of the durable log (events learned, "
                "scores bit for bit)", not bad,
                where(bad, lambda r: f"model − log {r.model_vs_log}, scores equal "
                      f"{r.scores_match}")))
    pois = [r for r in ran if r.scenario.startswith("poison")]
    if pois:
        bad = [r for r in pois if r.created or r.learned_despite_4xx or any(
            poison_verdict(k, v, r.poison_bad_body[k]) != "ok" for k, v in r.poison.items())]
        out.append(("poison inputs: a 4xx with the error body, nothing learned, no model "
                    "created", not bad,
                    where(bad, lambda r: ", ".join(
                        [k for k, v in r.poison.items()
                         if poison_verdict(k, v, r.poison_bad_body[k]) != "ok"]
                        + [f"created {n}" for n in r.created]
                        + ([f"{r.learned_despite_4xx} events learned despite a 4xx"]
                           if r.learned_despite_4xx else [])))))
    return out


# ---------------------------------------------------------------------------- report
def _pair(a: float | None, b: float | None) -> str:
    f = lambda v: "never" if v is None else f"{v:.1f}"  # noqa: E731
    return f"{f(a)} / {f(b)}"


def table(rows: Sequence[Row]) -> str:
    out = []
    for r in rows:
        if r.skipped or r.error:
            why = f"skipped: {r.skipped}" if r.skipped else f"FAILED: {r.error}"
            out.append((r.store, r.scenario, why, *[""] * 13))
            continue
        other = ", ".join(f"{k} {n:,}" for k, n in sorted(r.statuses.items())
                          if k not in ("200", "201", "202", "500", "503", "504")
                          and not k.startswith("4"))
        mvl = ", ".join(("n/a" if v is None else f"{v:+d}") + {
            True: "", False: " scores ≠", None: " scores n/a"}[r.scores_match.get(name)]
            for name, v in r.model_vs_log.items())
        lost = f"{r.lost:,}" + (f" ({r.lost_poison:,} poison)" if r.lost_poison else "")
        out.append((r.store, r.scenario, r.acked, lost, r.twice_ids, r.twice_noids,
                    r.unacked_learned, r.statuses["500"], r.statuses["503"],
                    r.statuses["504"], other or "0", f"{r.slowest_ack:.1f}",
                    _pair(r.mid_ready, r.mid_scoring) if r.scenario == "kill9" else "",
                    _pair(r.final_ready, r.final_scoring),
                    "yes" if not r.serving else "NO", mvl))
    return markdown_table(
        ["store", "scenario", "acked events", "lost", "learned twice (ids)",
         "learned twice (no ids)", "learned, not acked", "500", "503", "504",
         "other failed attempts", "slowest ack s", "kill -9 mid-load: ready / scoring s",
         "final kill -9: ready / scoring s", "models serving",
         "model − log replay (hashed, dense)"], out)


def poison_table(rows: Sequence[Row]) -> str:
    out = []
    for r in rows:
        for kind, outcomes in r.poison.items():
            expect = "no 5xx" if kind.endswith(": learn") else (
                "413/422 + error body" if POISON[kind][0] == "reject" else "no 5xx")
            answers = ", ".join(f"{n} × {s}" for s, n in sorted(outcomes.items()))
            out.append((f"{r.store} {r.scenario}", kind, expect, answers,
                        poison_verdict(kind, outcomes, r.poison_bad_body[kind])))
    return markdown_table(["run", "input", "expected", "answers", "verdict"], out)


def report(rows: Sequence[Row], opts: Options, command: str, redis_version: str) -> str:
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"{when}; `{command}`; {code_version()}; {cpu_model()}, nproc {os.cpu_count()}, "
        f"Python {platform.python_version()}, redis-server {redis_version}. "
        f"{opts.duration:g} s of load per run, {opts.clients} client threads, batches of "
        f"{opts.batch} events, one request in 5 without ids; each run ends with a kill -9 "
        "and restart of the service, then the durable log is audited event by event.",
        "", table(rows), "", "Targets:", ""]
    for name, met, where in targets(rows):
        lines.append(f"- **{'PASS' if met else 'FAIL'}** {name}" + (f" — {where}" if where
                                                                      else ""))
    if any(r.poison for r in rows):
        lines += ["", "Poison inputs (each attempt's answer):", "", poison_table(rows)]
        created = [f"{r.store}: {', '.join(r.created)}" for r in rows if r.created]
        if created:
            lines += ["", "Poison models the service created (201): " + "; ".join(created)]
    notes = []
    for r in rows:
        prefix = f"{r.store} {r.scenario}"
        notes += [f"- {prefix}: {n}" for n in r.notes]
        notes += [f"- {prefix}: unexpected answer: {u}" for u in r.unexpected]
        if r.twice_noids_after:
            notes.append(f"- {prefix}: id-less events learned twice, by their requests' "
                         f"answers: {dict(r.twice_noids_after)}")
        notes += [f"- {prefix}: serving: {s}" for s in r.serving]
    if notes:
        lines += ["", "Notes (times from the start of the load):", "", *notes]
    return "\n".join(lines)


def preamble() -> str:
    return ("Written by `python -m loadtest.faults --write` (see its docstring): the "
            "service under 16 clients while its process is killed (SIGKILL), Redis is "
            "killed or stalled (SIGSTOP 8 s), the store's disk fills up, and clients send "
            "poison inputs. Every event carries a unique number in its payload; after each "
            "run the durable log is replayed into a fresh learner, as recovery does "
            "(entries that would make it non-finite are refused). 'lost' = acknowledged "
            "(200) events the durable model does not hold; 'learned twice' = events held "
            "more than once; 'slowest ack' = first attempt to 200, retries included; "
            "'model − log replay' = the recovered service model's event count minus the "
            "replay's (per model: hashed cbr_diag_fifo, dense cbr_fifo; 'scores ≠' if their "
            "scores differ). 503/504 are expected during store faults; 500 never.")


def write_results(path: Path, body: str) -> None:
    write_marked(path, BEGIN, END, HEADING, preamble() + "\n\n" + body)


# ---------------------------------------------------------------------------- main
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtest.faults",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", choices=["sqlite", "redis", "both"], default="both")
    p.add_argument("--scenario", action="append", choices=SCENARIOS,
                   help="repeatable; default: all")
    p.add_argument("--duration", type=float, default=20.0, help="seconds of load per run")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--batch", type=int, default=25, help="events per learn request")
    p.add_argument("--drain", type=float, default=30.0,
                   help="seconds retries may go on after the load stops")
    p.add_argument("--disk-mb", type=int, default=256, help="size of the full-disk tmpfs")
    p.add_argument("--write", action="store_true", help=f"update {RESULTS.name}")
    p.add_argument("--results", type=Path, default=RESULTS)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = "python -m loadtest.faults " + " ".join(sys.argv[1:] if argv is None else argv)
    stores = ["sqlite", "redis"] if args.store == "both" else [args.store]
    scenarios = args.scenario or list(SCENARIOS)
    opts = Options(duration=args.duration, clients=args.clients, batch=args.batch,
                   drain=args.drain, disk_mb=args.disk_mb)
    redis_version = "n/a"
    if "redis" in stores:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("--store redis needs redis-server on PATH")
        redis_version = subprocess.run([binary, "--version"], capture_output=True,
                                       text=True).stdout.split("v=")[-1].split()[0]

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # unwinds through every clean-up

    signal.signal(signal.SIGTERM, on_term)
    try:
        rows = run(stores, scenarios, opts)
    except KeyboardInterrupt:
        say("interrupted: every process and mount started was stopped")
        return 130
    text = report(rows, opts, command, redis_version)
    print(text)
    if args.write:
        write_results(args.results, text)
        say(f"wrote {args.results}")
    return 0 if all(met for _, met, _ in targets(rows)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
