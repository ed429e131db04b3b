"""Plain numpy PRSVM by brute force over every (positive, negative) pair, and the online
batch learners (rank_svm, FBAM) built on it, one event at a time.

Dissertation (seed 000) eq. 3.1 and Algorithm 1, in the explicit-pair form that PRSVM+
replaces: the slack of every pair is an entry of an n₊ × n₋ matrix
D_ij = 1 − (o_i − o_j), the active pairs are D_ij > 0, and

    F = ½‖w‖² + c Σ_active D_ij²,              c = C̃/(n₊n₋)
    ∇F = w − 2c Xᵀ Aᵀ D                        (Aᵀ D: row sums to the positives, minus
                                                column sums to the negatives)
    H v = v + 2c Xᵀ A_svᵀ A_sv X v.

No sort, no running sums, no centring: O(n₊n₋) per evaluation. The truncated Newton
loop is written from the specs README (CG with relative residual 1e-3, ≤ 100 iterations;
exact line search; stop after the step whose −sᵀg < 1e-4·F, or 50 steps), with its
line search also over the explicit pairs. Independent of ``models._newton``; only the
random stream is shared with the learners (``models._rng`` for the reservoir draws, and
``models._features.draw_rff`` for FBAM's frequencies), so that both see the same rows, and
NBAM's Nyström map is fitted by ``models._nystrom.fit_map`` (another module, with its own
tests), then applied here in numpy.
"""

from __future__ import annotations

import math

import numpy as np

from aucstream.models._features import draw_rff
from aucstream.models._nystrom import fit_map
from aucstream.models._rng import below, new_state, uniform


# ------------------------------------------------------------------ brute force
def _split(X, pos):
    X = np.asarray(X, dtype=float)
    pos = np.asarray(pos, dtype=bool)
    return X, pos, np.flatnonzero(pos), np.flatnonzero(~pos)


def pair_slacks(o, pos):
    """D_ij = 1 − (o_i − o_j) for every positive i (rows) and negative j (columns)."""
    o = np.asarray(o, dtype=float)
    pos = np.asarray(pos, dtype=bool)
    return 1.0 - (o[pos][:, None] - o[~pos][None, :])


def score_loss(o, pos):
    """L(o) = Σ_pairs max(0, D_ij)² and its gradient in the scores, −2AᵀD."""
    pos = np.asarray(pos, dtype=bool)
    D = pair_slacks(o, pos)
    D = np.where(D > 0, D, 0.0)
    r = np.zeros(len(pos))
    r[pos] = -2.0 * D.sum(axis=1)
    r[~pos] = 2.0 * D.sum(axis=0)
    return float(np.sum(D * D)), r


def score_hessian(o, pos, delta):
    """2·A_svᵀ A_sv δ: for each active pair, 2(δ_i − δ_j) to i and −2(δ_i − δ_j) to j."""
    pos = np.asarray(pos, dtype=bool)
    delta = np.asarray(delta, dtype=float)
    active = pair_slacks(o, pos) > 0
    diff = np.where(active, delta[pos][:, None] - delta[~pos][None, :], 0.0)
    out = np.zeros(len(pos))
    out[pos] = 2.0 * diff.sum(axis=1)
    out[~pos] = -2.0 * diff.sum(axis=0)
    return out


def objective(X, pos, C, w, v=None):
    """F(w), ∇F(w) and Hv over the explicit pairs (eq. 3.1 with c = C̃/(n₊n₋))."""
    X, pos, ip, ineg = _split(X, pos)
    c = C / (len(ip) * len(ineg))
    w = np.asarray(w, dtype=float)
    o = X @ w
    L, r = score_loss(o, pos)
    F = 0.5 * float(w @ w) + c * L
    g = w + c * (X.T @ r)
    hv = None
    if v is not None:
        v = np.asarray(v, dtype=float)
        hv = v + c * (X.T @ score_hessian(o, pos, X @ v))
    return F, g, hv


def objective_by_pairs(X, pos, C, w):
    """F and ∇F with every pair difference x_i − x_j formed (small problems only)."""
    X, pos, ip, ineg = _split(X, pos)
    c = C / (len(ip) * len(ineg))
    diffs = (X[ip][:, None, :] - X[ineg][None, :, :]).reshape(-1, X.shape[1])
    slack = 1.0 - diffs @ w
    act = slack > 0
    F = 0.5 * float(w @ w) + c * float(np.sum(slack[act] ** 2))
    g = w - 2.0 * c * diffs[act].T @ slack[act]
    return F, g


# ------------------------------------------------------------------ truncated Newton
def line_search(o, p, pos, c, w, s, F0, tol=1e-12, max_iter=60):
    """Exact minimiser of φ(t) = F(w + t s) by a bracketed 1-D Newton on φ'."""
    wd, dd, ww = float(w @ s), float(s @ s), float(w @ w)
    t, lo, hi = 0.0, 0.0, math.inf
    Ft = F0
    evals = 0
    while evals < max_iter:
        evals += 1
        u = o + t * p
        L, r = score_loss(u, pos)
        d1 = wd + t * dd + c * float(r @ p)
        d2 = dd + c * float(score_hessian(u, pos, p) @ p)
        Ft = 0.5 * (ww + t * (2.0 * wd + t * dd)) + c * L
        if d1 < 0:
            lo = t
        elif d1 > 0:
            hi = t
        else:
            break
        if d1 * d1 <= tol * d2 * F0:
            break
        t_new = t - d1 / d2
        if not (lo < t_new < hi):
            t_new = 0.5 * (lo + hi)
        if t_new == t:
            break
        t = t_new
    return t, Ft, evals


class NewtonTrace:
    """What a reference solve did: per Newton step (F before it, −sᵀg, t)."""

    def __init__(self):
        self.steps: list[tuple[float, float, float]] = []
        self.status = "max_iter"
        self.cg_iters = 0
        self.objective = math.nan


def truncated_newton(X, pos, C, w0, tol=1e-4, max_newton=50, cg_tol=1e-3, max_cg=100):
    """Minimise F from ``w0``; returns (w, NewtonTrace)."""
    X, pos, ip, ineg = _split(X, pos)
    c = C / (len(ip) * len(ineg))
    w = np.array(w0, dtype=float)
    w[~(X != 0).any(axis=0)] = 0.0  # dead columns: F separates into ½w_j²
    trace = NewtonTrace()
    while len(trace.steps) < max_newton:
        o = X @ w
        F, g, _ = objective(X, pos, C, w)
        trace.objective = F
        if not np.isfinite(F) or not np.isfinite(g).all():
            trace.status = "nonfinite"
            return w, trace
        if not g.any():
            trace.status = "converged"
            return w, trace

        def H(v, o=o):
            return v + c * (X.T @ score_hessian(o, pos, X @ v))

        # conjugate gradient on H s = −g from s = 0
        s = np.zeros_like(w)
        res = -g
        d = res.copy()
        rr = float(res @ res)
        for _ in range(max_cg):
            trace.cg_iters += 1
            q = H(d)
            a = rr / float(d @ q)
            s = s + a * d
            res = res - a * q
            rr_new = float(res @ res)
            if rr_new <= cg_tol**2 * float(g @ g):
                break
            d = res + (rr_new / rr) * d
            rr = rr_new
        decrement = -float(s @ g)
        t, F_new, _ = line_search(o, X @ s, pos, c, w, s, F)
        w = w + t * s
        trace.steps.append((F, decrement, t))
        trace.objective = F_new
        if decrement < tol * F:
            trace.status = "converged"
            break
    return w, trace


# ------------------------------------------------------------------ Fourier features
def fourier(X, freq, phase, b):
    """√(2/m)·cos(θx + φ) with θ = freq·√(2/b) (variant A, exp(−‖x − y‖²/b))."""
    theta = np.asarray(freq) * math.sqrt(2.0 / b)
    m = theta.shape[0]
    return math.sqrt(2.0 / m) * np.cos(np.asarray(X, dtype=float) @ theta.T + phase)


def nystrom(X, landmarks, proj, b):
    """ψ(x) = projᵀ k_x, k_x = [exp(−‖x − u_j‖²/b)]_j."""
    X = np.asarray(X, dtype=float)
    sq = ((X[:, None, :] - landmarks[None, :, :]) ** 2).sum(axis=2)
    return np.exp(-sq / b) @ proj


# ------------------------------------------------------------------ online learners
class Buffers:
    """Two per-class buffers as lists in insertion order: a reservoir (Algorithm R: the
    counter includes the new row; once full, j ~ U{0..N−1} and the j-th oldest is
    replaced iff j < capacity, the new row appended as the newest) or a FIFO ring."""

    def __init__(self, capacity: int, policy: str, rng: np.ndarray) -> None:
        self.capacity, self.policy, self.rng = capacity, policy, rng
        self.rows: list[list[np.ndarray]] = [[], []]
        self.n = [0, 0]

    def add(self, c: int, row: np.ndarray) -> None:
        self.n[c] += 1
        if len(self.rows[c]) < self.capacity:
            self.rows[c].append(row)
            return
        if self.policy == "fifo":
            j = 0
        else:
            j = int(below(self.rng, self.n[c]))
            if j >= self.capacity:
                return
        del self.rows[c][j]
        self.rows[c].append(row)


class BatchRef:
    """rank_svm (``n_components=None``) or FBAM, event by event: buffer the row, then
    solve on the window (negatives, then positives, oldest first) after event t when
    t % retrain_every == 0 or t is a power of two below it, from the last w. FBAM's b
    (unless fixed) is the mean squared distance to the mean of the first
    ``bandwidth_events`` events, computed whole at each solve."""

    def __init__(self, d, *, C, capacity, buffer, retrain_every, seed, n_components=None,
                 bandwidth=0.0, bandwidth_events=80_000):
        self.C = C
        self.every = retrain_every
        rng = new_state(seed)
        self.m = n_components
        if n_components is not None:
            self.freq = draw_rff(rng, n_components, d, 1.0)
            self.phase = np.array([2.0 * math.pi * uniform(rng) for _ in range(n_components)])
        self.fixed_b = bandwidth
        self.b = bandwidth
        self.bandwidth_events = bandwidth_events
        self.first_rows: list[np.ndarray] = []  # FBAM's b: the first events, kept whole
        self.buffers = Buffers(capacity, buffer, rng)
        self.w = np.zeros(d if n_components is None else n_components)
        self.t = 0
        self.solves = 0
        self.trace = None

    def learn(self, X, y):
        for x, label in zip(np.asarray(X, dtype=float), y, strict=True):
            self.learn_one(x, label)
        return self

    def learn_one(self, x, label) -> None:
        if len(self.first_rows) < self.bandwidth_events:
            self.first_rows.append(np.array(x, dtype=float))
        self.buffers.add(1 if label == 1 else 0, np.array(x, dtype=float))
        self.t += 1
        t = self.t
        if t % self.every == 0 or (t < self.every and t & (t - 1) == 0):
            self.solve()

    def admit(self, x, label) -> None:
        """Buffer a row and count it, with no solve (NBAM's replay)."""
        self.buffers.add(1 if label == 1 else 0, np.array(x, dtype=float))
        self.t += 1

    def window(self):
        neg, pos_rows = self.buffers.rows
        X = np.array(neg + pos_rows, dtype=float).reshape(len(neg) + len(pos_rows), -1)
        return X, np.array([False] * len(neg) + [True] * len(pos_rows))

    def solve(self) -> None:
        if not self.buffers.rows[0] or not self.buffers.rows[1]:
            return
        X, pos = self.window()
        if self.m is not None:
            if self.fixed_b == 0.0:  # mean squared distance to the mean, first events
                F = np.array(self.first_rows)
                b = float(np.mean(np.sum((F - F.mean(axis=0)) ** 2, axis=1)))
                self.b = b if b > 0 else (self.b if self.b > 0 else 1.0)
            X = fourier(X, self.freq, self.phase, self.b)
        self.w, self.trace = truncated_newton(X, pos, self.C, self.w)
        self.solves += 1

    def score(self, X):
        X = np.asarray(X, dtype=float)
        if self.m is None:
            return X @ self.w
        if self.b == 0.0:
            return np.zeros(len(X))
        return fourier(X, self.freq, self.phase, self.b) @ self.w


class NBAMRef(BatchRef):
    """NBAM / NBAUC: the first ``warmup`` events are kept; at the last of them the map is
    fitted (k-means++ from the generator seeded with ``seed``), the kept events are
    replayed into the buffers as ψ(x) in order without solves, one solve runs, and the
    schedule goes on from t = warmup on ψ(x)."""

    def __init__(self, d, *, n_components, warmup, **kw):
        super().__init__(d, **kw)
        self.m_landmarks, self.warmup = n_components, warmup
        self.kept: list[tuple[np.ndarray, int]] = []
        self.map = None
        self.w = np.zeros(0)

    def learn_one(self, x, label) -> None:
        if self.map is None:
            self.kept.append((np.array(x, dtype=float), label))
            if len(self.kept) == self.warmup:
                X = np.array([r for r, _ in self.kept])
                self.map = fit_map(X, self.m_landmarks, self.buffers.rng)
                self.w = np.zeros(self.map[1].shape[1])
                for row, lab in zip(nystrom(X, *self.map), [lab for _, lab in self.kept],
                                    strict=True):
                    self.admit(row, lab)
                self.solve()
            return
        super().learn_one(nystrom(np.asarray(x)[None], *self.map)[0], label)

    def score(self, X):
        if self.map is None:
            return np.zeros(len(X))
        return nystrom(X, *self.map) @ self.w
