"""Throughput of the learners that need a long warm-up or solve periodically (issue 13).

``bench.throughput`` measures each learner from a short warm-up prefix against its numpy
oracle, which learns that prefix itself. That does not fit two kinds of learners:

- the Nyström learners (``noam_seq``, ``noam_gra``, ``nsauc``, ``nasam``, ``npsam``,
  ``nbam``, ``nbauc``): at the defaults they store 16 000 events, fit the k-means++ map
  (m = 1600 landmarks) and replay the window; their numpy references cannot redo that in
  a benchmark (a numpy k-means and 16 000 reference events would take minutes), and their
  per-event cost is set by the map; ``fasam`` likewise stores 16 000 events to fix its
  Fourier map's bandwidth;
- the batch learners (``rank_svm``, ``fbam``, ``nbam``, ``nbauc``): most events only enter
  a buffer, and every ``retrain_every`` (200) events a truncated Newton solve runs on the
  window (2000 rows at the defaults), so a rate means something only over whole periods.

So here, on the same dense stream recipe as ``bench.throughput`` (d = 54, a longer
stream): each learner learns a warm-up prefix of ``WARMUP`` = 18 000 events (the map's
16 000, then 2 000 more; both reservoirs of the batch learners are full by then), its
state is saved, and each repeat restores it and times ``learn`` over the next events, in
whole solve periods. The numpy oracle gets the learner's warm state copied in (the map,
the weights, the buffers in order, the counters, the generator), as ``bench.throughput``
does on its sparse stream, and is timed on chunks of whole periods right after each
learner repeat. The oracles are the tests' references: ``tests.reference.oam.OAMRef`` and
``tests.reference.nsauc.Algorithm3`` on ψ(x), ``tests.reference.sam_kernel.transplant``
(SAMRef on ψ) for NASAM, NPSAM and FASAM, ``tests.reference.newton.BatchRef`` /
``NBAMRef`` (brute-force pairs). ψ(x) is ``tests.reference.newton.nystrom`` (vectorised
numpy, one BLAS matrix-vector product per event; ``sam_kernel``'s ``nystrom_psi`` is the
same), not ``NystromMapRef.psi``, which forms
Σ^{-1/2}·Uᵀ as an r × r by r × m product on every call (4 GFLOP per event at the defaults)
and would make any learner look a thousand times faster.

For the batch learners the solver is also measured alone: one solve from w = 0 on the
warm learner's window (negatives then positives, oldest first; the design rows are the
raw rows, the Fourier features or the mapped rows), through the public
``models.fit_batch("rank_svm", Z, y, C=...)`` (PRSVM+ on Z: buffering, then one solve)
against ``tests.reference.newton.truncated_newton`` (the same stopping rules over the
explicit n₊ × n₋ pair matrix), back to back; and, outside ``--quick``, once more on a
window four times as large (``SCALE_WINDOW`` rows of the stream, mapped with the warm
learner's map), where the reference's pair work (n₊n₋) grows 16-fold and ours
(n log n + the n × D products) about 4-fold.

Run through ``python -m bench.throughput`` (``--learners`` picks them; ``--write`` writes
this module's own section of RESULTS.md).
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median

import numpy as np

from bench.throughput import (
    DENSE_D,
    Config,
    Oracle,
    Row,
    Stream,
    _batches,
    _ratio,
    _si,
    _size,
    _timed,
    dense_stream,
    machine,
)

__all__ = ["BATCH", "LEARNERS", "NYSTROM_ONLINE", "SECTION", "SolverRow", "bench_solver",
           "bench_warm", "section", "warm_stream"]

SECTION = "## Learner throughput: Nyström and batch learners (issue 13)"
NYSTROM_ONLINE = ("noam_seq", "noam_gra", "nsauc")
# ASAM / PSAM on the kernel maps (models/sam_kernel.py): their oracle is
# tests.reference.sam_kernel.transplant (FASAM's b also comes from a 16 000-event window)
KERNEL_SAM = ("nasam", "npsam", "fasam")
BATCH = ("rank_svm", "fbam", "nbam", "nbauc")
NYSTROM_BATCH = ("nbam", "nbauc")
LEARNERS = (*NYSTROM_ONLINE, *KERNEL_SAM, *BATCH)
# Events learned before timing: the Nyström map's default window (16 000), then 2 000 more
# (a multiple of the batch learners' default solve period, 200).
WARMUP = 18_000
# The solver is also timed on a window this large (4× the default 2000 rows) for these
# learners (nbauc is nbam's class), outside --quick.
SCALE_WINDOW = 8_000
SCALE_LEARNERS = ("rank_svm", "fbam", "nbam")


def warm_stream(n_timed: int, seed: int = 0) -> Stream:
    """The dense stream (``bench.throughput.dense_stream``) long enough for the warm-up."""
    X, y = dense_stream(WARMUP + n_timed, seed)
    return Stream("dense", DENSE_D, X, y, WARMUP)


# ============================================================================ oracles
def _window(state: dict, c: int) -> list[np.ndarray]:
    """Class c's dense buffer rows, oldest first."""
    size = int(min(state["n_seen_"][c], state["order_"].shape[1]))
    return [state["buf_"][c, slot].copy() for slot in state["order_"][c, :size]]


def _map(state: dict) -> tuple[np.ndarray, np.ndarray, float]:
    return state["landmarks_"], state["proj_"], float(state["bandwidth_"][0])


def warm_oracle(lrn, prefix: np.ndarray) -> Oracle:
    """The numpy reference in ``lrn``'s state; ``prefix`` are the raw events it learned
    (FBAM's reference recomputes b from them at each solve)."""
    from tests.reference.newton import BatchRef, NBAMRef, nystrom
    from tests.reference.nsauc import Algorithm3
    from tests.reference.oam import OAMRef

    name, p, s = lrn.name, lrn.params, lrn.get_state()
    rng = s["rng_"].copy()
    if name in KERNEL_SAM:
        from tests.reference.sam_kernel import transplant

        ref = transplant(lrn)
        return Oracle(ref, ref.learn_one, ref.served)
    if name in ("noam_seq", "noam_gra", "nsauc"):
        L, P, b = _map(s)
        r = P.shape[1]
        if name == "nsauc":
            ref = Algorithm3(r, rng, **{k: p[k] for k in (
                "lam", "eta_scale", "r_skip", "a_skip", "capacity", "pairs")})
            t = int(s["t_"][0])
            ref.t, ref.w, ref.wbar = t, s["w_"].copy(), s["wbar_"].copy()
            ref.rcount = p["r_skip"] - t % p["r_skip"]
            ref.acount, ref.q = p["a_skip"] - t % p["a_skip"], t // p["a_skip"]
            ref.cal_n, ref.cal_sum = int(s["cal_"][0]), float(s["cal_"][1])
            ref.eta0 = float(s["cal_"][2]) if s["cal_"][2] > 0 else None
            weights = ref.served
        else:
            ref = OAMRef(r, C=p["C"], capacity=p["capacity"], seed=lrn.seed,
                         sequential=name == "noam_seq")
            ref.w = s["w_"].copy()
            ref.res.rng = rng
            weights = lambda: ref.w  # noqa: E731
        ref.res.rows = [_window(s, 0), _window(s, 1)]
        ref.res.n = [int(v) for v in s["n_seen_"]]

        def step(x: np.ndarray, t: int) -> None:
            ref.learn_one(nystrom(x[None], L, P, b)[0], t)

        return Oracle(ref, step, weights)
    if name in BATCH:
        common = {k: p[k] for k in ("C", "capacity", "buffer", "retrain_every")}
        if name in NYSTROM_BATCH:
            ref = NBAMRef(lrn.n_features, n_components=p["n_components"], warmup=p["warmup"],
                          seed=lrn.seed, **common)
            ref.map = _map(s)
        elif name == "fbam":
            ref = BatchRef(lrn.n_features, seed=lrn.seed, n_components=p["n_components"],
                           bandwidth=p["bandwidth"], **common)
            ref.freq, ref.phase = s["freq_"].copy(), s["phase_"].copy()
            ref.b = float(s["bw_"][0])
            ref.first_rows = [row.copy() for row in prefix[:ref.bandwidth_events]]
        else:
            ref = BatchRef(lrn.n_features, seed=lrn.seed, **common)
        ref.w = s["w_"].copy()
        ref.buffers.rows = [_window(s, 0), _window(s, 1)]
        ref.buffers.n = [int(v) for v in s["n_seen_"]]
        ref.buffers.rng = rng
        ref.t = int(s["n_seen_"].sum())
        return Oracle(ref, ref.learn_one, lambda: ref.w)
    raise ValueError(f"no warm numpy oracle for {name!r}")


def learner_weights(lrn) -> np.ndarray:
    """The vector that scores ψ(x) (or x): w̃ for the ASAM family once averaged, else w."""
    if lrn.name == "nsauc" or lrn.name in KERNEL_SAM:
        return lrn.weights()
    return lrn.get_state()["w_"]


def period(lrn) -> int:
    """Events per solve period (1 for the online learners)."""
    return int(lrn.params["retrain_every"]) if lrn.name in BATCH else 1


# ============================================================================ timing
@dataclass
class WarmRow(Row):
    """A ``bench.throughput.Row`` plus the warm-up's cost and the solve period."""

    warmup_cpu: float = float("nan")
    period: int = 1
    state: dict | None = field(default=None, repr=False)  # the warm learner's state


def bench_warm(name: str, stream: Stream, cfg: Config) -> WarmRow:
    """``bench.throughput.bench_one`` for a learner with a long warm-up or a solve period:
    the oracle is given the warm state; learner repeats and oracle chunks are whole
    periods, aligned to the learner's schedule."""
    from aucstream import models

    row = WarmRow(name, stream.name)
    W, B, R, y = stream.warmup, cfg.batch, cfg.repeats, stream.y
    lrn = models.create(name, n_features=stream.d, seed=cfg.seed)
    p = row.period = period(lrn)
    if W % p:
        raise ValueError(f"{name}: the warm-up ({W}) is not a whole number of periods ({p})")

    def first() -> None:
        lrn.learn(stream.rows(0, B), y[:B])
        lrn.score(stream.rows(0, B))

    row.first_call = _timed(first)[0]
    _, row.warmup_cpu = _timed(_batches(lambda a, b: lrn.learn(stream.rows(a, b), y[a:b]),
                                        B, W, B))
    warm = row.state = lrn.get_state()

    # events per repeat: ~cfg.seconds at the rate of the last periods of the warm-up,
    # whole batches and whole periods (lcm)
    tail = max(B, p) * 2
    probe = models.from_state(warm)
    _, cpu = _timed(_batches(lambda a, b: probe.learn(stream.rows(a, b), y[a:b]),
                             W, W + tail, B))
    unit = B * p // math.gcd(B, p)
    n = _size(tail / cpu, cfg, y.shape[0] - W)
    n = row.events = max(unit, -(-n // unit) * unit)
    if W + n > y.shape[0]:
        n = row.events = (y.shape[0] - W) // unit * unit

    oracle = warm_oracle(models.from_state(warm), stream.X[:W])
    i = W

    def oracle_events(count: int) -> Callable[[], None]:
        rows = [stream.dense_row(j) for j in range(i, i + count)]
        labels = y[i:i + count]

        def run() -> None:
            for x, label in zip(rows, labels, strict=True):
                oracle.step(x, label)

        return run

    # probe whole periods until ~5 % of the budget, then chunks of whole periods
    probe_cpu = 0.0
    while probe_cpu < 0.05 * cfg.oracle_seconds and i - W < cfg.oracle_max // 10:
        probe_cpu += _timed(oracle_events(p))[1]
        i += p
    chunk = int((i - W) / probe_cpu * cfg.oracle_seconds / R) // p * p
    chunk = max(p, min(chunk, (cfg.oracle_max - (i - W)) // R // p * p))

    for _ in range(R):
        twin = models.from_state(warm)
        wall, cpu = _timed(_batches(lambda a, b, t=twin: t.learn(stream.rows(a, b), y[a:b]),
                                    W, W + n, B))
        row.wall_rates.append(n / wall)
        row.rates.append(n / cpu)
        _, ocpu = _timed(oracle_events(chunk))
        i += chunk
        row.oracle_rates.append(chunk / ocpu)
        row.ratios.append(row.rates[-1] / row.oracle_rates[-1])
    row.oracle_events = chunk * R

    def score(a: int, b: int) -> None:
        twin.score(stream.rows(a, b))

    ns = row.score_rows = _size(B / _timed(_batches(score, W, W + B, B))[1], cfg, n)
    for _ in range(R):
        row.score_rates.append(ns / _timed(_batches(score, W, W + ns, B))[1])

    check = models.from_state(warm)
    for lo in range(W, i, B):
        check.learn(stream.rows(lo, min(lo + B, i)), y[lo:min(lo + B, i)])
    a, b = learner_weights(check), oracle.weights()
    if a is not None and b is not None and a.shape == b.shape:
        row.delta = float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))
    return row


@dataclass
class SolverRow:
    """One solve from w = 0 on a warm learner's window: ``fit_batch`` against the
    brute-force numpy solver, ``repeats`` pairs back to back."""

    learner: str
    rows: int
    positives: int
    dim: int
    C: float
    source: str = "window"  # the learner's window, or "stream" rows mapped alike
    seconds: list[float] = field(default_factory=list)
    oracle_seconds: list[float] = field(default_factory=list)
    newton: int = 0
    cg: int = 0
    oracle_newton: int = 0
    oracle_cg: int = 0
    delta: float = float("nan")

    @property
    def ratio(self) -> float:
        return median(o / s for s, o in zip(self.seconds, self.oracle_seconds, strict=True))


def design_window(lrn) -> tuple[np.ndarray, np.ndarray]:
    """The solver's rows for the warm learner's window (negatives, then positives, each
    oldest first) and the labels (1 positive, 0 negative)."""
    from tests.reference.newton import fourier

    s = lrn.get_state()
    neg, pos = _window(s, 0), _window(s, 1)
    X = np.array(neg + pos)
    if lrn.name == "fbam":
        X = fourier(X, s["freq_"], s["phase_"], float(s["bw_"][0]))
    y = np.r_[np.zeros(len(neg), np.int64), np.ones(len(pos), np.int64)]
    return np.ascontiguousarray(X), y


def stream_window(lrn, stream: Stream, per_class: int) -> tuple[np.ndarray, np.ndarray]:
    """A larger window: the stream's first ``per_class`` negatives and positives (in that
    order), mapped as the learner maps its window (raw, Fourier or Nyström rows)."""
    from tests.reference.newton import fourier, nystrom

    s = lrn.get_state()
    idx = np.r_[np.flatnonzero(stream.y == 0)[:per_class],
                np.flatnonzero(stream.y == 1)[:per_class]]
    if idx.shape[0] < 2 * per_class:
        raise ValueError(f"the stream has fewer than {per_class} rows of a class")
    X = np.array([stream.dense_row(i) for i in idx])
    if lrn.name == "fbam":
        X = fourier(X, s["freq_"], s["phase_"], float(s["bw_"][0]))
    elif lrn.name in NYSTROM_BATCH:
        L, P, b = _map(s)
        X = np.concatenate([nystrom(X[a:a + 256], L, P, b) for a in range(0, len(X), 256)])
    y = np.r_[np.zeros(per_class, np.int64), np.ones(per_class, np.int64)]
    return np.ascontiguousarray(X), y


def bench_solver(lrn, repeats: int, window: tuple[np.ndarray, np.ndarray] | None = None
                 ) -> SolverRow:
    """``models.fit_batch('rank_svm', Z, y, C=C)`` vs ``truncated_newton`` on the learner's
    window (or on ``window`` = (Z, y), e.g. from :func:`stream_window`)."""
    from aucstream import models
    from tests.reference.newton import truncated_newton

    Z, y = design_window(lrn) if window is None else window
    C = float(lrn.params["C"])
    row = SolverRow(lrn.name, Z.shape[0], int(y.sum()), Z.shape[1], C,
                    "window" if window is None else "stream")
    pos = y == 1
    fit = ref = trace = None
    for _ in range(repeats):
        def ours() -> None:
            nonlocal fit
            fit = models.fit_batch("rank_svm", Z, y, C=C)

        def theirs() -> None:
            nonlocal ref, trace
            ref, trace = truncated_newton(Z, pos, C, np.zeros(Z.shape[1]))

        row.seconds.append(_timed(ours)[1])
        row.oracle_seconds.append(_timed(theirs)[1])
    stats = fit.solve_stats
    row.newton, row.cg = stats["newton_iters"], stats["cg_iters"]
    row.oracle_newton, row.oracle_cg = len(trace.steps), trace.cg_iters
    w = fit.get_state()["w_"]
    row.delta = float(np.max(np.abs(w - ref)) / max(np.max(np.abs(ref)), 1e-300))
    return row


# ============================================================================ report
def table(rows: list[WarmRow]) -> str:
    head = ("| learner | period | learn ev/s | (wall) | (spread) | events | numpy ev/s "
            "| numpy events | ratio | score rows/s | warm-up s | first call s | Δ vs numpy |")
    out = [head, "|" + "---|" * 13]
    for r in rows:
        out.append(
            f"| {r.learner} | {r.period} | {_si(r.rate)} | {_si(r.wall_rate)} | "
            f"{r.spread:.0%} | {r.events:,} | {_si(r.oracle_rate)} | {r.oracle_events:,} | "
            f"{_ratio(r.ratio)} | {_si(median(r.score_rates))} | {r.warmup_cpu:.3g} | "
            f"{r.first_call:.2g} | "
            + ("–" if not np.isfinite(r.delta) else f"{r.delta:.0e}") + " |"
        )
    return "\n".join(out)


def solver_table(rows: list[SolverRow]) -> str:
    out = ["| learner | rows (positives) | D | C̃ | fit_batch s | numpy s | ratio "
           "| Newton / CG iterations (numpy's) | Δw vs numpy |", "|" + "---|" * 9]
    for r in rows:
        what = "its window" if r.source == "window" else "stream rows"
        out.append(
            f"| {r.learner} | {r.rows:,} ({r.positives:,}), {what} | {r.dim} | {r.C:g} | "
            f"{median(r.seconds):.3g} | {median(r.oracle_seconds):.3g} | {_ratio(r.ratio)} | "
            f"{r.newton} / {r.cg} ({r.oracle_newton} / {r.oracle_cg}) | {r.delta:.0e} |")
    return "\n".join(out)


def targets(rows: list[WarmRow], solvers: list[SolverRow]) -> list[str]:
    """Issue 13: each learner's numba kernels ≥ 10× its numpy reference."""
    out = []
    for r in rows:
        ok = r.ratio >= 10
        out.append(f"- {r.learner} learn ≥ 10× numpy: **{'met' if ok else 'NOT met'}** "
                   f"({_ratio(r.ratio)})")
    for s in solvers:
        ok = s.ratio >= 10
        out.append(f"- {s.learner} solver ≥ 10× numpy on {s.rows:,} rows: "
                   f"**{'met' if ok else 'NOT met'}** ({_ratio(s.ratio)} at D = {s.dim})")
    return out


def section(rows: list[WarmRow], solvers: list[SolverRow], stream: Stream, cfg: Config,
            command: str, cold: bool) -> str:
    date = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        SECTION,
        "",
        "Events/s of `learn` (default parameters) for the learners with a Nyström warm-up",
        "or periodic solves, against their numpy references given the same warm state;",
        "and the batch learners' solver alone. Written by `bench/throughput_warm.py` (run",
        "by `bench/throughput.py`); method in its docstring.",
        "",
        f"Command: `{command}` ({date})",
        "",
        *(f"- {m}" for m in machine()),
        f"- stream {stream.describe()}; warm-up {stream.warmup:,} events (the Nyström map's "
        "window of 16,000, then 2,000 more: reservoirs full, map fitted and replayed)",
        "",
        "Rates are events per CPU-second of the benchmark process, as in the section above.",
        "",
        f"- learn: batches of {cfg.batch} from the warm state, median of {cfg.repeats} "
        "repeats over `events` events, a whole number of solve periods (`period`: events "
        "between two solves; 1 for the online learners)",
        "- numpy: the tests' reference, one call per event, given a copy of the warm state "
        "(map, weights, buffers in order, counters, generator), timed in chunks of whole "
        "periods right after each learner repeat; ratio = median of the quotients. The "
        "map of the numpy side is `tests.reference.newton.nystrom` (vectorised, one BLAS "
        "matrix-vector product of m × r per event; see the module docstring)",
        "- warm-up s: CPU seconds of learning the warm-up prefix (for the Nyström learners "
        "it includes k-means++ on 16,000 × 54 rows with 1600 centres, the 1600 × 1600 "
        "eigendecomposition, the replay of the window"
        + (", and compiling the map's kernels)" if cold else ")"),
        "- first call: a fresh learner's first `learn` + `score` batch "
        + ("(numba compile, empty cache" if cold else "(numba's on-disk cache")
        + "; the Nyström learners only buffer then: their map kernels compile in the "
        "warm-up)",
        "- Δ vs numpy: max |w − w_numpy| / max |w_numpy| after the oracle's events (w̃ "
        "for the ASAM family: nsauc, nasam, npsam, fasam). The batch learners' solvers "
        "stop on the same rule, not at the same "
        "bits, so their Δ is the solver tolerance's",
        "",
        table(rows),
        "",
    ]
    if solvers:
        lines += [
            "The solver alone: one solve from w = 0 on the warm learner's window (the "
            "design rows: raw, Fourier or mapped), `models.fit_batch('rank_svm', Z, y, "
            "C=C̃)` (buffering the rows, then the sort-based PRSVM+ truncated Newton in "
            "numba) against `tests.reference.newton.truncated_newton` (the same Newton, "
            "CG and line-search rules over the explicit n₊ × n₋ pair matrix, numpy with "
            "BLAS on one thread); CPU seconds, median of "
            f"{len(solvers[0].seconds)} pairs run back to back. 'stream rows': a window "
            f"{SCALE_WINDOW // 2000}× the default (the stream's first "
            f"{SCALE_WINDOW // 2:,} negatives and positives, mapped with the warm learner's "
            "map), one pair: the numpy side's pair work grows as n₊n₋, ours as n log n.",
            "",
            solver_table(solvers),
            "",
        ]
    lines += ["Targets (issue 13):", "", *targets(rows, solvers), ""]
    return "\n".join(lines)


def run(names: list[str], cfg: Config, quick: bool) -> tuple[list[WarmRow], list[SolverRow],
                                                            Stream]:
    """Measure ``names`` (a subset of ``LEARNERS``) on one warm stream."""
    from aucstream import models

    stream = warm_stream(cfg.max_events, cfg.seed)
    print(stream.describe() + f"; warm-up {stream.warmup}", flush=True)
    rows: list[WarmRow] = []
    solvers: list[SolverRow] = []
    for name in names:
        r = bench_warm(name, stream, cfg)
        rows.append(r)
        print(f"[warm] {name}: learn {_si(r.rate)} ev/s ({r.events} events, spread "
              f"{r.spread:.0%}), numpy {_si(r.oracle_rate)} ev/s ({r.oracle_events} events), "
              f"ratio {_ratio(r.ratio)}, score {_si(median(r.score_rates))} rows/s, warm-up "
              f"{r.warmup_cpu:.3g} s, Δ {r.delta:.1e}", flush=True)
        if name in BATCH:
            lrn = models.from_state(r.state)
            s = bench_solver(lrn, 1 if quick else 3)
            solvers.append(s)
            print(f"[solver] {name}: {s.rows} rows × {s.dim}: fit_batch "
                  f"{median(s.seconds):.3g} s, numpy {median(s.oracle_seconds):.3g} s, ratio "
                  f"{_ratio(s.ratio)}, Δw {s.delta:.1e}", flush=True)
            if name in SCALE_LEARNERS and not quick:
                s = bench_solver(lrn, 1, stream_window(lrn, stream, SCALE_WINDOW // 2))
                solvers.append(s)
                print(f"[solver] {name}: {s.rows} stream rows × {s.dim}: fit_batch "
                      f"{median(s.seconds):.3g} s, numpy {median(s.oracle_seconds):.3g} s, "
                      f"ratio {_ratio(s.ratio)}, Δw {s.delta:.1e}", flush=True)
    return rows, solvers, stream
