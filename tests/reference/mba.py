"""Plain numpy MBA, one event at a time, from the paper's equations (seed 004).

Gultekin, Saha, Ratnaparkhi, Paisley, "MBA: Mini-Batch AUC Optimization": eq. (9) and
(13) for the moments, Algorithm 1 lines 6–10 for the sampled pairs, line 12 / eq. (10)
for the solve; spec solam-mba §3, specs README (exact moments, λ = 1e-3·tr(Σ)/d,
forgetting as a half-life, re-solve every max(100, d) events).

Independent of the numba kernels: the exact moments are kept as raw weighted sums
(Σa, Σa·x, Σa·xxᵀ per class, every one decayed by ρ at every event) and combined with
the spec's Σ_N = Q₊ + Q₋ − m₊m₋ᵀ − m₋m₊ᵀ, where the kernels keep lazily decayed centred
(Welford) moments; the ridge solve is ``np.linalg.solve`` (LU), not a Cholesky; lasso /
elastic net is a coordinate descent that recomputes each residual from scratch. Only the
random stream is shared: the reservoir and pair draws come from ``models._rng`` seeded
as the learner's, so that both see the same pairs.
"""

from __future__ import annotations

import numpy as np

from aucstream.models._rng import below, new_state


# ------------------------------------------------------------------- brute force
def all_pairs_moments(pos, neg, a=None, b=None):
    """Eq. (9), literally: μ_N, Σ_N over every (positive, negative) pair, optionally
    with per-row weights a (positives) and b (negatives), each pair weighted a_i·b_j."""
    pos = np.asarray(pos, dtype=float)
    neg = np.asarray(neg, dtype=float)
    a = np.ones(len(pos)) if a is None else np.asarray(a, dtype=float)
    b = np.ones(len(neg)) if b is None else np.asarray(b, dtype=float)
    diffs = (pos[:, None, :] - neg[None, :, :]).reshape(-1, pos.shape[1])
    weights = np.outer(a, b).reshape(-1)
    total = weights.sum()
    mu = (weights[:, None] * diffs).sum(axis=0) / total
    sigma = (weights[:, None] * diffs).T @ diffs / total
    return mu, sigma


def pairwise_objective(w, pos, neg):
    """Eq. (7)–(8) with the PSL: (1/(2N₊N₋)) Σ_ij (1 − wᵀ(x_i⁺ − x_j⁻))² − ½."""
    diffs = np.asarray(pos)[:, None, :] - np.asarray(neg)[None, :, :]
    t = diffs @ w
    return float(np.mean((1.0 - t) ** 2)) / 2.0 - 0.5


def objective(w, mu, sigma, l1, l2):
    """Eq. (10): ½wᵀΣw − wᵀμ + λ1‖w‖₁ + (λ2/2)‖w‖²."""
    return 0.5 * w @ sigma @ w - w @ mu + l1 * np.abs(w).sum() + 0.5 * l2 * w @ w


def lambdas(penalty: str, lam: float, lam_scale: str, sigma) -> tuple[float, float]:
    """(λ1, λ2): MBA-ℓ2, MBA-ℓ1, MBA-EL (λ1 = λ2 = λ/2); λ scaled by tr(Σ)/d if asked."""
    if lam_scale == "trace":
        lam = lam * np.trace(sigma) / sigma.shape[0]
    return {"l2": (0.0, lam), "l1": (lam, 0.0), "elasticnet": (lam / 2, lam / 2)}[penalty]


def ridge(mu, sigma, l2):
    """Closed form of line 12 with λ1 = 0: (Σ + λ2 I)⁻¹ μ."""
    return np.linalg.solve(sigma + l2 * np.eye(len(mu)), mu)


def elastic_net(mu, sigma, l1, l2, w0, tol=1e-14, max_sweeps=100_000):
    """Line 12 by coordinate descent from w0, each residual recomputed in full:
    w_j = soft(μ_j − Σ_j·w + Σ_jj w_j, λ1)/(Σ_jj + λ2), until a sweep moves no weight by
    more than tol·max|w|."""
    w = np.array(w0, dtype=float)
    for _ in range(max_sweeps):
        moved = 0.0
        for j in range(len(w)):
            den = sigma[j, j] + l2
            if den <= 0.0:
                new = 0.0
            else:
                r = mu[j] - sigma[j] @ w + sigma[j, j] * w[j]
                new = np.sign(r) * max(abs(r) - l1, 0.0) / den
            moved = max(moved, abs(new - w[j]))
            w[j] = new
        if moved <= tol * np.abs(w).max():
            break
    return w


# --------------------------------------------------------------------- learner
class MBAReference:
    """MBA over a stream, one event at a time (both modes)."""

    def __init__(self, d: int, *, mode: str = "exact", penalty: str = "l2", lam: float = 1e-3,
                 lam_scale: str = "trace", half_life: float = 0.0, solve_every: int = 0,
                 pairs: int = 10, capacity: int = 1000, seed: int = 0):
        self.d = d
        self.mode, self.penalty, self.lam, self.lam_scale = mode, penalty, lam, lam_scale
        self.rho = 2.0 ** (-1.0 / half_life) if half_life > 0 else 1.0
        self.every = solve_every if solve_every > 0 else max(100, d)
        self.B, self.capacity = pairs, capacity
        self.rng = new_state(seed)
        self.t = 0
        self.n = [0, 0]                      # events per class (negatives, positives)
        self.w = np.zeros(d)
        # exact: raw weighted sums per class
        self.A = np.zeros(2)                 # Σ a_i
        self.Sx = np.zeros((2, d))           # Σ a_i x_i
        self.Sxx = np.zeros((2, d, d))       # Σ a_i x_i x_iᵀ
        # sampled: reservoirs (insertion order) and pair sums
        self.rows: list[list[np.ndarray]] = [[], []]
        self.S = 0.0                         # number of pairs (decayed)
        self.mu_sum = np.zeros(d)
        self.sig_sum = np.zeros((d, d))

    # ---------------------------------------------------------------- moments
    def moments(self):
        """(μ, Σ) of the current state, or None before both classes / any pair."""
        if self.mode == "exact":
            if min(self.n) == 0:
                return None
            m_neg, m_pos = self.Sx[0] / self.A[0], self.Sx[1] / self.A[1]
            Q_neg, Q_pos = self.Sxx[0] / self.A[0], self.Sxx[1] / self.A[1]
            mu = m_pos - m_neg
            sigma = Q_pos + Q_neg - np.outer(m_pos, m_neg) - np.outer(m_neg, m_pos)
            return mu, sigma
        if self.S <= 0:
            return None
        return self.mu_sum / self.S, self.sig_sum / self.S

    def _add_exact(self, x, c):
        self.A *= self.rho                   # every earlier event decays by ρ
        self.Sx *= self.rho
        self.Sxx *= self.rho
        self.A[c] += 1.0
        self.Sx[c] += x
        self.Sxx[c] += np.outer(x, x)

    def _add_sampled(self, x, c):
        # own reservoir first (Algorithm R, counter includes the event)
        if len(self.rows[c]) < self.capacity:
            self.rows[c].append(x)
        else:
            j = int(below(self.rng, self.n[c]))
            if j < self.capacity:
                del self.rows[c][j]
                self.rows[c].append(x)
        self.S *= self.rho
        self.mu_sum *= self.rho
        self.sig_sum *= self.rho
        opposite = self.rows[1 - c]
        if not opposite:
            return
        for _ in range(self.B):              # lines 6–8: B uniform draws, with replacement
            z = opposite[int(below(self.rng, len(opposite)))]
            diff = x - z if c == 1 else z - x     # x⁺ − x⁻
            self.mu_sum += diff                  # line 9 (unnormalised)
            self.sig_sum += np.outer(diff, diff)  # line 10 (unnormalised)
        self.S += self.B

    def solve(self):
        mom = self.moments()
        if mom is None:
            return
        mu, sigma = mom
        l1, l2 = lambdas(self.penalty, self.lam, self.lam_scale, sigma)
        if l1 == 0.0:
            self.w = ridge(mu, sigma, l2)
        else:
            self.w = elastic_net(mu, sigma, l1, l2, self.w)

    # ---------------------------------------------------------------- stream
    def learn_one(self, x, y: int) -> float:
        """One event, y in {−1, +1}; returns its prequential score."""
        x = np.array(x, dtype=float)
        score = float(self.w @ x)
        c = 1 if y == 1 else 0
        self.t += 1
        self.n[c] += 1
        if self.mode == "exact":
            self._add_exact(x, c)
        else:
            self._add_sampled(x, c)
        t, k = self.t, self.every
        if t % k == 0 or (t < k and (t & (t - 1)) == 0):
            self.solve()
        return score

    def learn(self, X, y) -> MBAReference:
        for x, label in zip(np.asarray(X), np.asarray(y), strict=True):
            self.learn_one(x, 1 if label == 1 else -1)
        return self

    def score_then_learn(self, X, y) -> np.ndarray:
        return np.array([self.learn_one(x, 1 if label == 1 else -1)
                         for x, label in zip(np.asarray(X), np.asarray(y), strict=True)])
