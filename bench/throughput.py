"""Learner throughput: events/s of every learner next to its plain-numpy oracle, same run.

Two synthetic streams, both deterministic in ``--seed``:

- dense: d = 54 laid out like covertype (10 numeric columns in [0, 1], a 4-way and a
  40-way one-hot block), about 10 % positives from a noisy linear rule;
- sparse: hashed, 2^20 dimensions, about 40 non-zeros per event: 38 categorical fields
  (Zipf-distributed values, each present with probability 0.95, hashed to one column with
  value 1.0) and 4 numeric fields at fixed hashed columns; about 5 % positives.

For each learner (default parameters, ``seed``): a fresh learner learns the first batch
and scores one batch ("first call": numba compile into an empty cache, or loading numba's
on-disk cache with ``--jit-cache``), then the rest of a warm-up prefix (buffers full).
Its state is saved; each repeat restores it and times ``learn`` over the next events in
batches of ``--batch``. The numpy oracle (``tests/reference``, one event per call) is
brought to the same state and, right after each learner repeat, timed on a chunk of the
following events, fewer of them when it is slow (the count is in the table): on the
dense stream it learns the warm-up prefix itself; on the sparse stream (the oracles only
do dense math, 2^20 floats per row) it gets the learner's warm state (weights, buffers in
order, counters, generator) and each row is densified outside the timer. Rates are per
CPU-second of this process (per core, and less sensitive to other work on the machine; the
learner's wall-clock rate is reported too); the ratio is the median over repeats of
learner rate / oracle rate measured back to back. ``score`` rows/s are timed on the warm
learner in the same batches. Finally a copy of the warm learner learns the events the
oracle learned and the largest weight difference relative to the largest weight is
reported (Δ): both sides computed the same thing.

    python -m bench.throughput                      # everything, about 4 minutes
    python -m bench.throughput --quick              # smoke run
    python -m bench.throughput --learners solam oam_gra --streams dense
    python -m bench.throughput --write              # also update bench/RESULTS.md

BLAS is limited to one thread (threadpoolctl) so that both sides use one core; the
numba kernels are serial.

The learners with a 16 000-event Nyström (or Fourier bandwidth) warm-up or periodic batch
solves (``bench.throughput_warm.LEARNERS``: noam_seq, noam_gra, nsauc, nasam, npsam, fasam,
rank_svm, fbam, nbam, nbauc) are measured by ``bench/throughput_warm.py`` instead, on a
longer dense stream, with oracles given the warm state, into their own section of
RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

__all__ = ["dense_stream", "main", "sparse_stream"]

DENSE_D = 54
SPARSE_D = 1 << 20
RESULTS = Path(__file__).with_name("RESULTS.md")
SECTION = "## Learner throughput"

CBR_FAMILY = ("cbr_fifo", "cbr_rs", "cbr_diag_fifo", "cbr_diag_rs", "fcbr_fifo", "fcbr_rs")
OAM_NAMED = ("oam_seq", "oam_gra")
SAM_FAMILY = ("asam", "sam", "psam")
SPARSE_LEARNERS = ("cbr_diag_fifo", "cbr_diag_rs", "oam_gra", "oam_seq", "solam", "uni_exp",
                   *SAM_FAMILY)


# ============================================================================ streams
@dataclass
class Stream:
    name: str
    d: int
    X: Any  # (n, d) array, or a CSR triple (indptr, indices, values)
    y: np.ndarray
    warmup: int

    @property
    def sparse(self) -> bool:
        return isinstance(self.X, tuple)

    def rows(self, a: int, b: int):
        if not self.sparse:
            return self.X[a:b]
        indptr, indices, values = self.X
        lo, hi = indptr[a], indptr[b]
        return indptr[a:b + 1] - lo, indices[lo:hi], values[lo:hi]

    def dense_row(self, i: int) -> np.ndarray:
        if not self.sparse:
            return self.X[i]
        indptr, indices, values = self.X
        row = np.zeros(self.d)
        row[indices[indptr[i]:indptr[i + 1]]] = values[indptr[i]:indptr[i + 1]]
        return row

    def describe(self) -> str:
        n = self.y.shape[0]
        if self.sparse:
            nnz = np.diff(self.X[0])
            return (f"{self.name}: d = 2^20, {n} events, {self.y.mean():.1%} positive, "
                    f"{nnz.mean():.1f} non-zeros per event (min {nnz.min()}, max {nnz.max()})")
        return f"{self.name}: d = {self.d}, {n} events, {self.y.mean():.1%} positive"


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on uint64 arrays (the feature hash)."""
    x = x.astype(np.uint64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def dense_stream(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(n, 54) rows shaped like covertype and labels with about 10 % positives."""
    rng = np.random.default_rng(seed)
    X = np.zeros((n, DENSE_D))
    X[:, :10] = rng.beta(2.0, 5.0, size=(n, 10))
    rows = np.arange(n)
    X[rows, 10 + rng.choice(4, n, p=[0.45, 0.05, 0.4, 0.1])] = 1.0
    soil = 1.0 / np.arange(1, 41) ** 1.1
    X[rows, 14 + rng.choice(40, n, p=soil / soil.sum())] = 1.0
    w = rng.normal(size=DENSE_D)
    s = X @ w + 0.5 * rng.normal(size=n)
    y = (s > np.quantile(s, 0.9)).astype(np.int64)
    return X, y


def sparse_stream(n: int, seed: int = 0, n_cat: int = 38, n_num: int = 4):
    """Hashed CSR rows over 2^20 columns (sorted, unique) and ~5 % positive labels."""
    rng = np.random.default_rng(seed)
    card = np.exp(rng.uniform(np.log(10), np.log(200_000), n_cat)).astype(np.int64)
    value = (rng.zipf(1.3, size=(n, n_cat)) - 1) % card
    key = (np.arange(n_cat, dtype=np.uint64)[None, :] << np.uint64(40)) + value.astype(np.uint64)
    cat_col = (_mix64(key) & np.uint64(SPARSE_D - 1)).astype(np.int64)
    cat_present = rng.random((n, n_cat)) < 0.95
    # each (field, value) has a fixed effect on the label, read off a second hash
    effect = (_mix64(key ^ np.uint64(0x5DEECE66D)) >> np.uint64(11)) * 2.0**-53 - 0.5
    num_col = (_mix64(np.arange(n_num, dtype=np.uint64) + np.uint64(1 << 50))
               & np.uint64(SPARSE_D - 1)).astype(np.int64)
    num_val = np.log1p(rng.exponential(1.0, size=(n, n_num))) / 3.0
    cols = np.concatenate([cat_col, np.broadcast_to(num_col, (n, n_num))], axis=1)
    vals = np.concatenate([np.ones((n, n_cat)), num_val], axis=1)
    mask = np.concatenate([cat_present, num_val > 0.0], axis=1)
    score = (effect * cat_present).sum(1) + num_val @ rng.normal(size=n_num)
    score += 0.3 * rng.normal(size=n)
    y = (score > np.quantile(score, 0.95)).astype(np.int64)
    # canonical rows: sort by column (absent entries last), merge hash collisions
    order = np.argsort(np.where(mask, cols, SPARSE_D), axis=1, kind="stable")
    cols = np.take_along_axis(cols, order, 1)
    vals = np.take_along_axis(vals, order, 1)
    mask = np.take_along_axis(mask, order, 1)
    dup = np.argwhere((cols[:, 1:] == cols[:, :-1]) & mask[:, 1:])
    for r, j in dup[::-1]:
        vals[r, j] += vals[r, j + 1]
        mask[r, j + 1] = False
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(mask.sum(1), out=indptr[1:])
    return (indptr, cols[mask], vals[mask]), y


# ============================================================================ oracles
@dataclass
class Oracle:
    """A numpy reference learner fed one event per call."""

    ref: Any
    step: Callable[[np.ndarray, int], None]
    weights: Callable[[], np.ndarray | None]


def _fresh_oracle(lrn) -> Oracle:
    """The tests' reference for a fresh learner, with the learner's parameters."""
    from tests.reference.adaoam import AdaOAMReference
    from tests.reference.cbr import CBRRef, rff_sincos
    from tests.reference.oam import FOAMRef, NOAMRef, OAMRef
    from tests.reference.opauc import OPAUCReference
    from tests.reference.solam import SOLAMReference
    from tests.reference.uni_exp import UniExpReference

    name, p, d, seed = lrn.name, lrn.params, lrn.n_features, lrn.seed
    if name.startswith(("cbr_", "fcbr_")):
        policy = "fifo" if name.endswith("fifo") else "rs"
        common = {"C": p["C"], "eta": p["eta"], "capacity": p["capacity"], "policy": policy,
                  "seed": seed}
        if name.startswith("fcbr_"):
            theta = lrn.get_state()["theta_"]
            ref = CBRRef(theta.shape[0] * 2, step_scale=p["mean_step_scale"], **common)
            ref.buffers.rng = lrn.get_state()["rng_"].copy()  # θ was drawn first

            unit = p["normalize"]

            def step(x, t, ref=ref, theta=theta, unit=unit):
                if unit:
                    x = x / np.linalg.norm(x)
                ref.learn_one(rff_sincos(x[None], theta)[0], t)

            return Oracle(ref, step, lambda: ref.mu)
        ref = CBRRef(d, diag_mode=p.get("diag_mode"), **common)
        return Oracle(ref, ref.learn_one, lambda: ref.mu)
    if name in OAM_NAMED:
        ref = OAMRef(d, C=p["C"], capacity=p["capacity"], seed=seed,
                     sequential=name == "oam_seq")
        return Oracle(ref, ref.learn_one, lambda: ref.w)
    if name == "foam":
        ref = FOAMRef(d, seed=seed, **{k: p[k] for k in (
            "eta", "sigma", "n_components", "capacity", "normalize", "rff_scale")})
        return Oracle(ref, lambda x, t: ref.learn(x[None], [t]), lambda: ref.w)
    if name == "noam":
        ref = NOAMRef(d, seed=seed, **{k: p[k] for k in (
            "eta", "sigma", "budget", "rank_fraction", "capacity", "normalize")})
        return Oracle(ref, lambda x, t: ref.learn(x[None], [t]),
                      lambda: ref.w if ref.phase == 2 else None)
    if name == "opauc":
        ref = OPAUCReference(d, eta=p["eta"], lam=p["lam"])
        return Oracle(ref, lambda x, t: ref.learn_one(x, 1 if t == 1 else -1), lambda: ref.w)
    if name == "solam":
        ref = SOLAMReference(d, zeta=p["zeta"], R=p["R"], normalize=p["normalize"])
        return Oracle(ref, lambda x, t: ref.learn_one(x, 1 if t == 1 else -1), lambda: ref.wbar)
    if name in SAM_FAMILY:
        from tests.reference.sam import SAMRef

        ref = SAMRef(d, variant=name, seed=seed, **{k: v for k, v in p.items() if k != "storage"})
        return Oracle(ref, ref.learn_one, ref.served)
    if name == "mba":
        from tests.reference.mba import MBAReference

        ref = MBAReference(d, seed=seed, **{k: p[k] for k in (
            "mode", "penalty", "lam", "lam_scale", "half_life", "solve_every", "pairs",
            "capacity")})
        return Oracle(ref, lambda x, t: ref.learn_one(x, 1 if t == 1 else -1), lambda: ref.w)
    if name == "adaoam":
        ref = AdaOAMReference(d, eta=p["eta"], delta=p["delta"], lam=p["lam"])
        return Oracle(ref, lambda x, t: ref.learn_one(x, 1 if t == 1 else -1), lambda: ref.w)
    if name == "uni_exp":
        ref = UniExpReference(d, eta=p["eta"], lam=p["lam"])
        return Oracle(ref, _unit_step(ref, p["normalize"]), lambda: ref.w)
    raise ValueError(f"no numpy oracle for {name!r}")


def _unit_step(ref, normalize: bool) -> Callable[[np.ndarray, int], None]:
    """A reference's learn_one (labels ±1) on unit-L2 rows if ``normalize``."""
    def step(x: np.ndarray, t: int) -> None:
        norm = float(np.linalg.norm(x))
        ref.learn_one(x / norm if normalize and norm > 0 else x, 1 if t == 1 else -1)
    return step


def _buffer_rows(state: dict, d: int) -> list[list[np.ndarray]]:
    """A learner's sparse buffers as dense rows, per class, oldest first."""
    cap = state["order_"].shape[1]
    out: list[list[np.ndarray]] = [[], []]
    for c in (0, 1):
        for slot in state["order_"][c, :min(int(state["n_seen_"][c]), cap)]:
            row = np.zeros(d)
            k = state["bnnz_"][c, slot]
            row[state["bidx_"][c, slot, :k]] = state["bval_"][c, slot, :k]
            out[c].append(row)
    return out


def _transplanted_oracle(lrn) -> Oracle:
    """A fresh oracle given the learner's current state (the sparse stream's warm-up)."""
    oracle = _fresh_oracle(lrn)
    ref = oracle.ref
    s = lrn.get_state()
    if lrn.name.startswith("cbr_diag_"):
        ref.mu, ref.g = s["mu_"].copy(), s["g_"].copy()
        ref.buffers.rows = _buffer_rows(s, lrn.n_features)
        ref.buffers.count = [int(v) for v in s["n_seen_"]]
        ref.buffers.rng = s["rng_"].copy()
    elif lrn.name in OAM_NAMED:
        ref.w = s["w_"].copy()
        ref.res.rows = _buffer_rows(s, lrn.n_features)
        ref.res.n = [int(v) for v in s["n_seen_"]]
        ref.res.rng = s["rng_"].copy()
    elif lrn.name in SAM_FAMILY:
        from tests.reference.sam import SAMRef

        p = lrn.params
        ref = SAMRef(lrn.n_features, variant=lrn.name, seed=lrn.seed,
                     **{k: v for k, v in p.items() if k != "storage"})
        t = int(s["t_"][0])
        ref.t, ref.w = t, lrn.weights("last")
        ref.r_count = p["r_skip"] - t % p["r_skip"]
        if ref.averaging:
            ref.wbar = lrn.weights("average")
            ref.q, ref.a_count = t // p["a_skip"], p["a_skip"] - t % p["a_skip"]
        if "cal_" in s:
            ref.cal_n, ref.cal_sum = int(s["cal_"][0]), float(s["cal_"][1])
            ref.eta0 = float(s["cal_"][2]) if s["cal_"][2] > 0 else None
        ref.res.rows = _buffer_rows(s, lrn.n_features)
        ref.res.n = [int(v) for v in s["n_seen_"]]
        ref.rng = ref.res.rng = s["rng_"].copy()  # one generator: reservoir and pair draws
        return Oracle(ref, ref.learn_one, ref.served)
    elif lrn.name == "uni_exp":
        ref.w, ref.b = lrn.weights(), float(s["bias_"][0])
        ref.t = int(s["n_seen_"].sum())
        ref.p = float(s["n_seen_"][1]) / ref.t
    elif lrn.name == "solam":
        from tests.reference.solam import SOLAMReference

        p = lrn.params
        ref = SOLAMReference(lrn.n_features, zeta=p["zeta"], R=p["R"], normalize=p["normalize"])
        ref.t = int(s["n_seen_"].sum())
        ref.p = float(s["n_seen_"][1]) / ref.t
        ref.w, ref.wbar = lrn.weights("last"), lrn.weights("average")
        ref.a, ref.b, ref.alpha = (float(v) for v in s["aba_"])
        ref.abar, ref.bbar, ref.alphabar = (float(v) for v in s["aba_bar_"])
        ref.gbar, ref.kappa = float(s["gsum_"][0]), float(s["kappa_"][0])
        return Oracle(ref, lambda x, t: ref.learn_one(x, 1 if t == 1 else -1), lambda: ref.wbar)
    else:
        raise ValueError(f"no state transplant for {lrn.name!r}")
    return oracle


def _learner_weights(lrn) -> np.ndarray | None:
    s = lrn.get_state()
    if lrn.name == "solam":
        return lrn.weights("average")
    if lrn.name == "uni_exp":
        return lrn.weights()
    if lrn.name in SAM_FAMILY:
        return lrn.weights()  # the served vector: w̃ (w before the first average)
    if lrn.name == "noam":
        return s["w_"][:int(s["rank_"][0])] if s["phase_"][0] == 1 else None
    return s["mu_"] if "mu_" in s else s["w_"]


# ============================================================================ timing
@dataclass
class Config:
    batch: int = 500
    max_events: int = 200_000
    min_events: int = 1_000
    seconds: float = 0.5
    repeats: int = 5
    oracle_seconds: float = 3.0
    oracle_max: int = 20_000
    seed: int = 0


@dataclass
class Row:
    """One learner on one stream. Rates are per CPU-second of this process (median over
    the repeats) unless named ``wall``; ``ratios`` pairs learner repeat i with numpy
    chunk i, measured back to back."""

    learner: str
    stream: str
    events: int = 0
    rates: list[float] = field(default_factory=list)
    wall_rates: list[float] = field(default_factory=list)
    score_rows: int = 0
    score_rates: list[float] = field(default_factory=list)
    first_call: float = float("nan")
    oracle_events: int = 0
    oracle_rates: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    delta: float = float("nan")

    @property
    def rate(self) -> float:
        return median(self.rates)

    @property
    def wall_rate(self) -> float:
        return median(self.wall_rates)

    @property
    def oracle_rate(self) -> float:
        return median(self.oracle_rates) if self.oracle_rates else float("nan")

    @property
    def ratio(self) -> float:
        return median(self.ratios) if self.ratios else float("nan")

    @property
    def spread(self) -> float:
        """(max − min)/median of the learn rates over the repeats."""
        return (max(self.rates) - min(self.rates)) / self.rate


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall, CPU) seconds of ``fn()``; CPU time is this process's (user + system)."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return max(time.perf_counter() - w0, 1e-9), max(time.process_time() - c0, 1e-9)


def _batches(fn: Callable[[int, int], Any], a: int, b: int, batch: int) -> Callable[[], None]:
    """A thunk calling ``fn(lo, hi)`` over [a, b) in consecutive batches."""

    def run() -> None:
        for lo in range(a, b, batch):
            fn(lo, min(lo + batch, b))

    return run


def _size(rate: float, cfg: Config, limit: int) -> int:
    """Events per repeat: about ``cfg.seconds`` of work, in whole batches, within limits."""
    n = int(rate * cfg.seconds) // cfg.batch * cfg.batch
    return max(cfg.batch, min(max(n, cfg.min_events), cfg.max_events, limit))


def bench_one(name: str, stream: Stream, cfg: Config) -> Row:
    from aucstream import models

    row = Row(name, stream.name)
    W, B, R = stream.warmup, cfg.batch, cfg.repeats
    y = stream.y
    lrn = models.create(name, n_features=stream.d, seed=cfg.seed)

    def first() -> None:
        lrn.learn(stream.rows(0, B), y[:B])
        lrn.score(stream.rows(0, B))

    row.first_call = _timed(first)[0]
    _, cpu = _timed(_batches(lambda a, b: lrn.learn(stream.rows(a, b), y[a:b]), B, W, B))
    warm = lrn.get_state()
    n = row.events = _size((W - B) / cpu, cfg, y.shape[0] - W)

    # numpy oracle in the warm state: the dense stream's warm-up learned by the oracle
    # itself, the sparse stream's copied from the learner (2^20-float rows are too slow)
    if stream.sparse:
        oracle = _transplanted_oracle(models.from_state(warm))
    else:
        oracle = _fresh_oracle(models.create(name, n_features=stream.d, seed=cfg.seed))
        for i in range(W):
            oracle.step(stream.dense_row(i), y[i])
    i = W

    def oracle_events(count: int) -> Callable[[], None]:
        rows = [stream.dense_row(j) for j in range(i, i + count)]  # densified untimed
        labels = y[i:i + count]

        def run() -> None:
            for x, label in zip(rows, labels, strict=True):
                oracle.step(x, label)

        return run

    # probe (untimed for the table): sizes the chunks to about cfg.oracle_seconds in all
    probe_cpu = 0.0
    while probe_cpu < 0.05 * cfg.oracle_seconds and i - W < cfg.oracle_max // 10:
        probe_cpu += _timed(oracle_events(1))[1]
        i += 1
    chunk = int((i - W) / probe_cpu * cfg.oracle_seconds / R)
    chunk = max(1, min(chunk, (cfg.oracle_max - (i - W)) // R))

    # learner repeat r (restored warm state, the same n events) then numpy chunk r
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

    # score: the last twin, rows of the same stream in batches
    def score(a: int, b: int) -> None:
        twin.score(stream.rows(a, b))

    ns = row.score_rows = _size(B / _timed(_batches(score, W, W + B, B))[1], cfg, n)
    for _ in range(R):
        row.score_rates.append(ns / _timed(_batches(score, W, W + ns, B))[1])

    # the same equations: a warm twin learns every event the oracle learned
    check = models.from_state(warm)
    for lo in range(W, i, B):
        check.learn(stream.rows(lo, min(lo + B, i)), y[lo:min(lo + B, i)])
    a, b = _learner_weights(check), oracle.weights()
    if a is not None and b is not None:
        row.delta = float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))
    return row


# ============================================================================ report
def _si(v: float) -> str:
    if not np.isfinite(v):
        return "–"
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v:.3g}"


def _ratio(v: float) -> str:
    return "–" if not np.isfinite(v) else f"{v:,.0f}×" if v >= 100 else f"{v:.3g}×"


def table(rows: list[Row]) -> str:
    head = ("| learner | stream | learn ev/s | (wall) | (spread) | events | numpy ev/s "
            "| numpy events | ratio | score rows/s | first call s | Δ vs numpy |")
    out = [head, "|" + "---|" * 12]
    for r in rows:
        out.append(
            f"| {r.learner} | {r.stream} | {_si(r.rate)} | {_si(r.wall_rate)} | "
            f"{r.spread:.0%} | {r.events:,} | {_si(r.oracle_rate)} | {r.oracle_events:,} | "
            f"{_ratio(r.ratio)} | {_si(median(r.score_rates))} | {r.first_call:.2g} | "
            + ("–" if not np.isfinite(r.delta) else f"{r.delta:.0e}") + " |"
        )
    return "\n".join(out)


def targets(rows: list[Row]) -> list[str]:
    """The issue's targets, each marked met / not met with its numbers."""
    by = {(r.learner, r.stream): r for r in rows}

    def ratio_line(label, names, goal):
        got = [(n, s, by[n, s].ratio) for n in names for s in ("dense", "sparse") if (n, s) in by]
        if not got:
            return f"- {label} ≥ {goal}× numpy: not measured in this run"
        ok = all(v >= goal for *_, v in got)
        worst = min(got, key=lambda g: g[2])
        detail = ", ".join(f"{n}/{s} {_ratio(v)}" for n, s, v in got)
        return (f"- {label} ≥ {goal}× numpy: **{'met' if ok else 'NOT met'}** "
                f"(lowest {worst[0]}/{worst[1]} {_ratio(worst[2])}; {detail})")

    def rate_line(label, key, goal):
        if key not in by:
            return f"- {label}: not measured in this run"
        v = by[key].rate
        return f"- {label}: **{'met' if v >= goal else 'NOT met'}** ({_si(v)} events/s)"

    return [
        ratio_line("CBR family (cbr_*, cbr_diag_*, fcbr_*)", CBR_FAMILY, 10),
        ratio_line("SOLAM", ("solam",), 100),
        ratio_line("OAM (oam_seq, oam_gra)", OAM_NAMED, 100),
        rate_line("SOLAM ≥ 1M dense events/s at d = 54, one core", ("solam", "dense"), 1e6),
        rate_line("cbr_diag_fifo ≥ 50k events/s on the sparse stream",
                  ("cbr_diag_fifo", "sparse"), 5e4),
        # issue 13 (the second wave)
        ratio_line("O(d) second-wave learners (sam, asam, psam, uni_exp)",
                   (*SAM_FAMILY, "uni_exp"), 100),
        ratio_line("adaoam, mba", ("adaoam", "mba"), 10),
        rate_line("MBA ≥ 200k dense events/s at d = 54", ("mba", "dense"), 2e5),
    ]


def machine() -> list[str]:
    import numba

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=root, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "models", "bench"],
                               capture_output=True, text=True, cwd=root,
                               check=True).stdout.strip()
        commit = head + (" (models/ or bench/ modified)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return [
        f"CPU: {cpu}; {os.cpu_count()} logical cores, {len(os.sched_getaffinity(0))} usable; "
        f"load average {os.getloadavg()[0]:.2f} at the end of the run",
        f"Python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}"
        f"; BLAS limited to 1 thread; commit {commit}",
    ]


def section(rows: list[Row], streams: dict[str, Stream], cfg: Config, command: str,
            cold: bool) -> str:
    date = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        SECTION,
        "",
        "Events/s of `learn` per learner (default parameters) against the plain-numpy",
        "per-event oracle of the same equations (`tests/reference/`), measured in the same",
        "run. Written by `bench/throughput.py`; method in its docstring.",
        "",
        f"Command: `{command}` ({date})",
        "",
        *(f"- {m}" for m in machine()),
        *(f"- stream {s.describe()}; warm-up {s.warmup} events" for s in streams.values()),
        "",
        "Rates are events per CPU-second of the benchmark process (user + system, one "
        "thread: the per-core rate, less sensitive to other work on the machine); `wall` is the "
        "learner's wall-clock rate in the same repeats.",
        "",
        f"- learn: batches of {cfg.batch} from the warm state (buffers full), median of "
        f"{cfg.repeats} repeats over `events` events (about {cfg.seconds} s of work, at "
        f"most {cfg.max_events:,}); spread = (max − min)/median over the repeats",
        f"- numpy: one call per event, continuing from the same warm state, in "
        f"{cfg.repeats} chunks of about {cfg.oracle_seconds / cfg.repeats:.2g} s (at most "
        f"{cfg.oracle_max:,} events in all), chunk i timed right after learner repeat i; "
        "ratio = median over i of the two rates' quotient. Sparse stream: the oracles do "
        "dense math, so each row is densified to 2^20 floats outside the timer and the "
        "learner's warm state (weights, buffers, counters, generator) is copied in",
        "- score rows/s: `score` in batches of the same size on the warm learner",
        "- first call: a fresh learner's first `learn` + `score` batch, "
        + ("compiling its numba kernels (empty cache; kernels shared with a learner "
           "earlier in the table are already compiled)" if cold else
           "loading numba's on-disk cache (`--jit-cache`)"),
        "- Δ vs numpy: max |w_numba − w_numpy| / max |w_numpy| after the oracle's events "
        "(w̄ for SOLAM; – where no comparable vector exists, e.g. NOAM before its switch)",
        "",
        table(rows),
        "",
        "Targets (issue 2):",
        "",
        *targets(rows),
        "",
    ]
    return "\n".join(lines)


def write_results(text: str, path: Path = RESULTS, heading: str = SECTION) -> None:
    """Replace the section ``heading`` of RESULTS.md (up to the next ``## `` heading) or
    append it."""
    old = path.read_text() if path.exists() else "# aucstream benchmark results\n"
    lines = old.splitlines()
    try:
        start = lines.index(heading)
    except ValueError:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")),
                   len(lines))
        new = "\n".join([*lines[:start], *text.rstrip("\n").splitlines(), "", *lines[end:]])
    path.write_text(new.rstrip("\n") + "\n")


# ============================================================================ CLI
def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.throughput",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--learners", nargs="+", metavar="NAME", help="default: all")
    ap.add_argument("--streams", nargs="+", choices=("dense", "sparse"),
                    default=["dense", "sparse"])
    ap.add_argument("--events", type=int, help="max timed events per repeat (200000)")
    ap.add_argument("--seconds", type=float, help="target seconds per timed repeat (0.5)")
    ap.add_argument("--repeats", type=int, help="timed repeats, median reported (5)")
    ap.add_argument("--oracle-seconds", type=float, help="numpy oracle time budget (3)")
    ap.add_argument("--oracle-events", type=int, help="max numpy oracle events (20000)")
    ap.add_argument("--batch", type=int, default=500, help="events per learn call (500)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 2 repeats, short budgets, short warm-ups")
    ap.add_argument("--jit-cache", action="store_true",
                    help="use numba's on-disk cache (first call = cache load, not compile)")
    ap.add_argument("--write", action="store_true", help=f"update {RESULTS.name}")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> list[Row]:
    args = _parse(argv)
    quick = args.quick
    cfg = Config(
        batch=args.batch,
        max_events=args.events or (20_000 if quick else 200_000),
        min_events=args.batch if quick else 1_000,
        seconds=args.seconds or (0.1 if quick else 0.5),
        repeats=args.repeats or (2 if quick else 5),
        oracle_seconds=args.oracle_seconds or (0.5 if quick else 3.0),
        oracle_max=args.oracle_events or (2_000 if quick else 20_000),
        seed=args.seed,
    )
    cold = not args.jit_cache
    tmp = None
    if cold:
        if "numba" in sys.modules:
            raise SystemExit("numba is already imported; run as `python -m bench.throughput`")
        tmp = tempfile.TemporaryDirectory(prefix="aucstream-numba-")
        os.environ["NUMBA_CACHE_DIR"] = tmp.name
    from threadpoolctl import threadpool_limits

    from aucstream import models

    # auto is its candidates' learning at once: measured end to end (bench.auto) instead
    names = args.learners or [n for n in models.available() if n != "auto"]
    unknown = sorted(set(names) - set(models.available()))
    if unknown:
        raise SystemExit(f"unknown learners: {', '.join(unknown)}")
    # issue 13's Nyström and batch learners: a long warm-up, whole solve periods
    # (bench/throughput_warm.py, its own section of RESULTS.md; dense stream only)
    from bench import throughput_warm

    warm_names = [n for n in names if n in throughput_warm.LEARNERS and "dense" in args.streams]
    names = [n for n in names if n not in throughput_warm.LEARNERS]
    warm_rows: list = []
    warm = {"dense": 1000 if quick else 2000, "sparse": 2000 if quick else 4000}
    streams: dict[str, Stream] = {}
    rows: list[Row] = []
    try:
        with threadpool_limits(1):
            for kind in args.streams:
                todo = names if kind == "dense" else [n for n in names if n in SPARSE_LEARNERS]
                if not todo:
                    continue
                total = warm[kind] + cfg.max_events
                X, y = (dense_stream if kind == "dense" else sparse_stream)(total, cfg.seed)
                s = Stream(kind, DENSE_D if kind == "dense" else SPARSE_D, X, y, warm[kind])
                streams[kind] = s
                print(s.describe(), flush=True)
                for name in todo:
                    r = bench_one(name, s, cfg)
                    rows.append(r)
                    print(f"[{kind}] {name}: learn {_si(r.rate)} ev/s ({r.events} events, "
                          f"spread {r.spread:.0%}), numpy {_si(r.oracle_rate)} ev/s "
                          f"({r.oracle_events} events), ratio {_ratio(r.ratio)}, score "
                          f"{_si(median(r.score_rates))} rows/s, first call "
                          f"{r.first_call:.2g} s, Δ {r.delta:.1e}", flush=True)
            if warm_names:
                warm_rows, solvers, warm_stream = throughput_warm.run(warm_names, cfg, quick)
    finally:
        if tmp is not None:
            tmp.cleanup()
    command = "python -m bench.throughput" + "".join(
        " " + shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    if rows:
        text = section(rows, streams, cfg, command, cold)
        print()
        print(text)
        if args.write:
            write_results(text)
            print(f"wrote {RESULTS}")
    if warm_rows:
        text = throughput_warm.section(warm_rows, solvers, warm_stream, cfg, command, cold)
        print()
        print(text)
        if args.write:
            write_results(text, heading=throughput_warm.SECTION)
            print(f"wrote {RESULTS} ({throughput_warm.SECTION[3:]})")
    return rows + warm_rows


if __name__ == "__main__":
    main()
