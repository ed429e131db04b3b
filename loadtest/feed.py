"""Deterministic synthetic event streams for load tests: ad clicks (hashed) and dense rows.

:class:`AdClickFeed` yields events shaped like an ad-impression log (Avazu/Criteo style):
named categorical features (site, app, device, hour, ad, a few anonymous ``c14``..``c21``
columns, a ``device`` and a ``user`` namespace, 0-4 interest tags) plus a few numerics,
30-40 features per event, for models with ``{"kind": "hashed", ...}`` features.
:class:`DenseFeed` yields rows of ``d`` floats (default 54, shaped like covtype: 10
continuous columns and two one-hot groups) for ``{"kind": "dense", "dim": d}`` models.

Labels come from a hidden logistic model (a weight per categorical value, per numeric,
and a device-type x banner-position interaction) whose intercept is solved so that the
positive rate is ``ctr`` (default 3 %), so AUC is learnable and its ceiling is known
(:meth:`AdClickFeed.draw` returns the hidden logits too).

Both feeds are pure functions of ``seed`` and the event's position: events are made in
blocks of :data:`BLOCK` from a generator seeded by ``(seed, block)``, so ``batch(100)``
twice gives the same events as ``batch(200)``, and ``events(start, stop)`` gives any
slice. Event ids are ``<prefix><position>``, unique per seed.

>>> feed = AdClickFeed(seed=1)
>>> ev = feed.batch(2)
>>> sorted(ev[0]) == ["features", "id", "label"] and ev[0]["id"] == "ad1-0"
True
>>> AdClickFeed(seed=1).events(0, 2) == ev
True
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["BLOCK", "AdClickFeed", "DenseFeed", "sigmoid"]

BLOCK = 1024  # events per deterministic block

# Stream tags keep the generators of the different purposes apart.
_WEIGHTS, _EVENTS, _CALIBRATION = 1, 2, 3


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _solve_intercept(logits: np.ndarray, ctr: float) -> float:
    """The bias b with mean(sigmoid(logits + b)) == ctr (bisection; the mean is monotone)."""
    lo, hi = -40.0, 40.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if sigmoid(logits + mid).mean() < ctr:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Field:
    """A categorical column: ``cardinality`` values drawn Zipf(``zipf``), weights N(0, scale)."""

    name: str
    cardinality: int
    zipf: float
    scale: float
    namespace: str = ""  # "" = top level, else a nested object (hashing namespace)
    source: str = ""  # "site" / "app": present only for that kind of traffic
    render: str = "hex"  # "hex" ids, "int" small codes ("07"), "word" readable words


_WORDS = {
    "site_category": ["news", "sports", "games", "finance", "travel", "food", "tech",
                      "music", "video", "auto", "health", "shopping", "social", "weather",
                      "education", "kids", "fashion", "home", "jobs", "realestate", "science",
                      "dating", "religion", "pets", "misc"],
    "type": ["phone", "tablet", "desktop", "tv", "console"],
    "os": ["android", "ios", "windows", "macos", "linux", "chromeos", "tizen", "other"],
    "conn": ["wifi", "4g", "5g", "3g", "ethernet"],
    "age": ["13-17", "18-24", "25-34", "35-44", "45-54", "55-64", "65+"],
    "gender": ["f", "m", "u"],
    "creative_size": ["320x50", "300x250", "728x90", "160x600", "300x600", "320x480",
                      "480x320", "970x250", "336x280", "468x60", "234x60", "120x600"],
}

_INTERESTS = ["sports", "travel", "cooking", "gaming", "finance", "music", "movies", "fitness",
              "fashion", "tech", "cars", "pets", "books", "outdoors", "parenting", "crypto"]

AD_FIELDS: tuple[Field, ...] = (
    Field("site_id", 5000, 1.1, 0.45, source="site"),
    Field("site_domain", 2000, 1.1, 0.25, source="site"),
    Field("site_category", 25, 1.0, 0.25, source="site", render="word"),
    Field("app_id", 3000, 1.1, 0.45, source="app"),
    Field("app_domain", 800, 1.1, 0.25, source="app"),
    Field("app_category", 30, 1.0, 0.25, source="app", render="int"),
    Field("hour", 24, 0.0, 0.2, render="int"),
    Field("weekday", 7, 0.0, 0.1, render="int"),
    Field("banner_pos", 7, 1.5, 0.3, render="int"),
    Field("ad_id", 20000, 1.05, 0.4),
    Field("advertiser", 500, 1.1, 0.3),
    Field("campaign", 3000, 1.1, 0.25),
    Field("creative_size", 12, 1.2, 0.2, render="word"),
    Field("c14", 2500, 1.1, 0.3),
    Field("c15", 8, 1.5, 0.1, render="int"),
    Field("c16", 9, 1.5, 0.1, render="int"),
    Field("c17", 400, 1.1, 0.2),
    Field("c18", 4, 1.0, 0.15, render="int"),
    Field("c19", 60, 1.1, 0.1, render="int"),
    Field("c20", 170, 1.1, 0.15),
    Field("c21", 60, 1.1, 0.15, render="int"),
    Field("model", 6000, 1.1, 0.2, namespace="device"),
    Field("make", 200, 1.2, 0.1, namespace="device"),
    Field("type", 5, 1.5, 0.2, namespace="device", render="word"),
    Field("os", 8, 1.3, 0.1, namespace="device", render="word"),
    Field("conn", 5, 1.3, 0.15, namespace="device", render="word"),
    Field("country", 120, 1.2, 0.2, namespace="user", render="int"),
    Field("language", 40, 1.3, 0.1, namespace="user", render="int"),
    Field("age", 7, 0.5, 0.2, namespace="user", render="word"),
    Field("gender", 3, 0.5, 0.1, namespace="user", render="word"),
    Field("segment", 50, 1.0, 0.3, namespace="user", render="int"),
)

# Numerics: name, hidden weight (on the value as sent).
AD_NUMERICS: tuple[tuple[str, float], ...] = (
    ("bid_floor", -0.4),  # log-normal floor price: pricier slots click less
    ("user_ctr", 6.0),  # the user's smoothed historical CTR
    ("session_depth", -0.05),  # pages seen in this session
    ("slot_visibility", 0.8),  # fraction of the slot in view
    ("recency", -0.15),  # log1p(hours since the user's last click)
)


def _render(field: Field, k: np.ndarray | int) -> str:
    k = int(k)
    if field.render == "word":
        return _WORDS[field.name][k]
    if field.render == "int":
        return f"{k:02d}"
    # Knuth's multiplicative hash: stable, hex-id looking, distinct for k < 2^32
    return f"{(k * 2654435761 + 0x9E3779B9) % (1 << 32):08x}"


def _zipf_cdf(cardinality: int, a: float) -> np.ndarray:
    p = (np.arange(1, cardinality + 1, dtype=np.float64)) ** -a
    c = np.cumsum(p)
    return c / c[-1]


class AdClickFeed:
    """Ad-impression events with named features and a hidden-logistic click label.

    Parameters
    ----------
    seed : the stream; the same seed gives the same events, weights and ids.
    ctr : positive rate the hidden model is calibrated to.
    app_share : fraction of impressions from apps (the rest from sites).
    id_prefix : event ids are ``id_prefix + position``; default ``f"ad{seed}-"``.
    """

    fields = AD_FIELDS
    numerics = AD_NUMERICS

    def __init__(self, seed: int = 0, *, ctr: float = 0.03, app_share: float = 0.4,
                 id_prefix: str | None = None) -> None:
        if not 0.0 < ctr < 1.0:
            raise ValueError(f"ctr must be in (0, 1); got {ctr}")
        self.seed = int(seed)
        self.ctr = float(ctr)
        self.app_share = float(app_share)
        self.id_prefix = f"ad{self.seed}-" if id_prefix is None else id_prefix
        rng = np.random.default_rng([self.seed, _WEIGHTS])
        self._cdf = [_zipf_cdf(f.cardinality, f.zipf) for f in self.fields]
        # value ids are permuted so that the popular values are not the low codes
        self._perm = [rng.permutation(f.cardinality) for f in self.fields]
        self._weights = [rng.normal(0.0, f.scale, f.cardinality) for f in self.fields]
        self._vocab = [[_render(f, k) for k in range(f.cardinality)] for f in self.fields]
        n_type = next(f.cardinality for f in self.fields if f.name == "type")
        n_pos = next(f.cardinality for f in self.fields if f.name == "banner_pos")
        self._interaction = rng.normal(0.0, 0.3, (n_type, n_pos))
        self._interest_w = rng.normal(0.0, 0.2, len(_INTERESTS))
        self._bias = 0.0
        calib = self._block_arrays(np.random.default_rng([self.seed, _CALIBRATION]), 20_000)
        self._bias = _solve_intercept(calib["logit"], self.ctr)
        self._cursor = 0
        self._cache: tuple[int, list[dict[str, Any]], np.ndarray] | None = None

    # ------------------------------------------------------------------ public
    def batch(self, n: int) -> list[dict[str, Any]]:
        """The next ``n`` events of the stream."""
        out = self.events(self._cursor, self._cursor + n)
        self._cursor += n
        return out

    def draw(self, n: int) -> tuple[list[dict[str, Any]], np.ndarray]:
        """The next ``n`` events and their hidden logits (the Bayes-optimal scores)."""
        start = self._cursor
        events = self.batch(n)
        return events, self.logits(start, start + n)

    def events(self, start: int, stop: int) -> list[dict[str, Any]]:
        """Events at positions ``start <= i < stop`` (independent of earlier calls)."""
        out: list[dict[str, Any]] = []
        for b, lo, hi in _blocks(start, stop):
            out.extend(self._block(b)[1][lo:hi])
        return out

    def logits(self, start: int, stop: int) -> np.ndarray:
        parts = [self._block(b)[2][lo:hi] for b, lo, hi in _blocks(start, stop)]
        return np.concatenate(parts) if parts else np.empty(0)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while True:
            yield from self.batch(BLOCK)

    # ------------------------------------------------------------------ internals
    def _block(self, b: int) -> tuple[int, list[dict[str, Any]], np.ndarray]:
        if self._cache is not None and self._cache[0] == b:
            return self._cache
        rng = np.random.default_rng([self.seed, _EVENTS, b])
        arr = self._block_arrays(rng, BLOCK)
        events = self._to_events(arr, b * BLOCK)
        self._cache = (b, events, arr["logit"])
        return self._cache

    def _block_arrays(self, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
        is_app = rng.random(n) < self.app_share
        codes = []
        logit = np.full(n, self._bias)
        for f, cdf, perm, w in zip(self.fields, self._cdf, self._perm, self._weights,
                                   strict=True):
            rank = np.minimum(np.searchsorted(cdf, rng.random(n), side="right"),
                              f.cardinality - 1)
            k = perm[rank]
            codes.append(k)
            present = np.ones(n, bool)
            if f.source == "site":
                present = ~is_app
            elif f.source == "app":
                present = is_app
            logit += np.where(present, w[k], 0.0)
        names = [f.name for f in self.fields]
        dtype = codes[names.index("type")]
        pos = codes[names.index("banner_pos")]
        logit += self._interaction[dtype, pos]
        num = {
            "bid_floor": np.round(rng.lognormal(-1.0, 0.8, n), 4),
            "user_ctr": np.round(rng.beta(1.0, 30.0, n), 5),
            "session_depth": rng.geometric(0.2, n).astype(np.int64),
            "slot_visibility": np.round(rng.beta(4.0, 1.5, n), 3),
            "recency": np.round(np.log1p(rng.exponential(48.0, n)), 3),
        }
        for name, w in self.numerics:
            logit += w * (num[name] - _NUMERIC_CENTRE[name])
        interests = rng.random((n, len(_INTERESTS))) < 0.08
        logit += interests @ self._interest_w
        y = (rng.random(n) < sigmoid(logit)).astype(np.int8)
        return {"is_app": is_app, "codes": np.stack(codes, axis=1), "logit": logit, "y": y,
                "interests": interests, **{f"num_{k}": v for k, v in num.items()}}

    def _to_events(self, arr: dict[str, np.ndarray], first: int) -> list[dict[str, Any]]:
        # Column-wise: one list of strings per field, then dicts built with zip (this is
        # the feed's hot loop: ~10 us per event).
        fields, vocab = self.fields, self._vocab
        codes = arr["codes"]
        cols = [[vocab[j][k] for k in codes[:, j].tolist()] for j in range(len(fields))]

        def rows(keep) -> tuple[list[str], list[tuple]]:
            idx = [j for j, f in enumerate(fields) if keep(f)]
            return [fields[j].name for j in idx], list(zip(*(cols[j] for j in idx), strict=True))

        site_names, site_rows = rows(lambda f: not f.namespace and f.source != "app")
        app_names, app_rows = rows(lambda f: not f.namespace and f.source != "site")
        dev_names, dev_rows = rows(lambda f: f.namespace == "device")
        usr_names, usr_rows = rows(lambda f: f.namespace == "user")
        num_names = [name for name, _ in self.numerics]
        num_rows = list(zip(*(arr[f"num_{name}"].tolist() for name in num_names), strict=True))
        tags: list[list[str]] = [[] for _ in range(codes.shape[0])]
        for i, t in zip(*np.nonzero(arr["interests"]), strict=True):
            if len(tags[i]) < 4:
                tags[i].append(_INTERESTS[t])
        events = []
        for i, (app, y) in enumerate(zip(arr["is_app"].tolist(), arr["y"].tolist(),
                                         strict=True)):
            feats = (dict(zip(app_names, app_rows[i], strict=True)) if app
                     else dict(zip(site_names, site_rows[i], strict=True)))
            feats.update(zip(num_names, num_rows[i], strict=True))
            feats["device"] = dict(zip(dev_names, dev_rows[i], strict=True))
            feats["user"] = dict(zip(usr_names, usr_rows[i], strict=True))
            if tags[i]:
                feats["interest"] = dict.fromkeys(tags[i], True)
            events.append({"features": feats, "label": y, "id": f"{self.id_prefix}{first + i}"})
        return events


_NUMERIC_CENTRE = {"bid_floor": 0.5, "user_ctr": 0.03, "session_depth": 5.0,
                   "slot_visibility": 0.7, "recency": 3.5}


def _blocks(start: int, stop: int) -> Iterator[tuple[int, int, int]]:
    """(block, lo, hi) pieces covering positions [start, stop)."""
    if start < 0 or stop < start:
        raise ValueError(f"bad range [{start}, {stop})")
    i = start
    while i < stop:
        b = i // BLOCK
        lo = i - b * BLOCK
        hi = min(stop - b * BLOCK, BLOCK)
        yield b, lo, hi
        i = b * BLOCK + hi


class DenseFeed:
    """Dense rows of ``d`` floats with a hidden logistic label, shaped like covtype.

    The first ``min(d, 10)`` columns are continuous (correlated Gaussians, rounded to 4
    decimals); the rest are two one-hot groups (4 and ``d - 14`` columns for d = 54,
    like covtype's wilderness areas and soil types).

    >>> ev = DenseFeed(seed=3).batch(3)
    >>> [len(e["x"]) for e in ev], ev[0]["id"]
    ([54, 54, 54], 'dense3-0')
    """

    def __init__(self, d: int = 54, seed: int = 0, *, ctr: float = 0.03,
                 id_prefix: str | None = None) -> None:
        if d < 1:
            raise ValueError(f"d must be >= 1; got {d}")
        if not 0.0 < ctr < 1.0:
            raise ValueError(f"ctr must be in (0, 1); got {ctr}")
        self.d = int(d)
        self.seed = int(seed)
        self.ctr = float(ctr)
        self.id_prefix = f"dense{self.seed}-" if id_prefix is None else id_prefix
        self.n_cont = min(self.d, 10)
        rest = self.d - self.n_cont
        self.groups = [g for g in (min(rest, 4), rest - min(rest, 4)) if g > 0]
        rng = np.random.default_rng([self.seed, _WEIGHTS])
        mix = rng.normal(0.0, 1.0, (self.n_cont, self.n_cont)) / np.sqrt(self.n_cont)
        self._mix = mix + np.eye(self.n_cont)
        self._w = rng.normal(0.0, 0.35, self.d)
        self._group_p = [rng.dirichlet(np.full(g, 0.7)) for g in self.groups]
        self._bias = 0.0
        X = self._rows(np.random.default_rng([self.seed, _CALIBRATION]), 20_000)
        self._bias = _solve_intercept(X @ self._w, self.ctr)
        self._cursor = 0
        self._cache: tuple[int, list[dict[str, Any]], np.ndarray] | None = None

    def batch(self, n: int) -> list[dict[str, Any]]:
        out = self.events(self._cursor, self._cursor + n)
        self._cursor += n
        return out

    def draw(self, n: int) -> tuple[list[dict[str, Any]], np.ndarray]:
        start = self._cursor
        events = self.batch(n)
        return events, self.logits(start, start + n)

    def events(self, start: int, stop: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for b, lo, hi in _blocks(start, stop):
            out.extend(self._block(b)[1][lo:hi])
        return out

    def logits(self, start: int, stop: int) -> np.ndarray:
        parts = [self._block(b)[2][lo:hi] for b, lo, hi in _blocks(start, stop)]
        return np.concatenate(parts) if parts else np.empty(0)

    def arrays(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(X, y) of positions [start, stop), y in {0, 1}."""
        ev = self.events(start, stop)
        return (np.array([e["x"] for e in ev]).reshape(len(ev), self.d),
                np.array([e["label"] for e in ev], np.int8))

    def _rows(self, rng: np.random.Generator, n: int) -> np.ndarray:
        X = np.zeros((n, self.d))
        X[:, : self.n_cont] = np.round(rng.normal(0.0, 1.0, (n, self.n_cont)) @ self._mix, 4)
        col = self.n_cont
        for g, p in zip(self.groups, self._group_p, strict=True):
            k = np.minimum(np.searchsorted(np.cumsum(p), rng.random(n), side="right"), g - 1)
            X[np.arange(n), col + k] = 1.0
            col += g
        return X

    def _block(self, b: int) -> tuple[int, list[dict[str, Any]], np.ndarray]:
        if self._cache is not None and self._cache[0] == b:
            return self._cache
        rng = np.random.default_rng([self.seed, _EVENTS, b])
        X = self._rows(rng, BLOCK)
        logit = X @ self._w + self._bias
        y = (rng.random(BLOCK) < sigmoid(logit)).astype(np.int8).tolist()
        first = b * BLOCK
        events = [{"x": row, "label": y[i], "id": f"{self.id_prefix}{first + i}"}
                  for i, row in enumerate(X.tolist())]
        self._cache = (b, events, logit)
        return self._cache
