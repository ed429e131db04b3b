"""Impressions and delayed clicks: the ad-click feed on a clock.

:class:`DelayedClicks` puts :class:`loadtest.feed.AdClickFeed`'s events on a timeline, as
an ad server sees them: impression ``i`` is shown at ``i / rate`` seconds; a click (an
event whose hidden label is 1) comes after a delay drawn from a two-part mixture (most
clicks within a minute or so, a long tail over hours, as in Chapelle 2014's display
logs), and a share of clicks never comes (lost attribution). A click is *observed* only
if it arrives within the attribution window. Like the feed, everything is a pure function
of ``seed`` and the position.

>>> clicks = DelayedClicks(seed=1)
>>> imp = clicks.impressions(0, 3)
>>> [sorted(i) for i in imp][0]
['click_at', 'features', 'id', 'label', 'shown_at']
>>> imp[1]["shown_at"]
0.1
>>> clicks.impressions(0, 3) == imp
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .feed import BLOCK, AdClickFeed, _blocks

__all__ = ["DelayedClicks", "Timeline"]

_DELAYS = 4  # generator tag, apart from the feed's own


@dataclass(frozen=True)
class Timeline:
    """Arrays of a slice of impressions: when each was shown, its hidden label, and when
    its click is observed (``inf``: never, within the attribution window)."""

    shown_at: np.ndarray
    label: np.ndarray
    click_at: np.ndarray


class DelayedClicks:
    """The ad-click feed with impression times and click delays.

    Parameters
    ----------
    seed : int
        The feed's seed (and the delays').
    rate : float
        Impressions per second.
    fast_share, fast_mean_s, slow_mean_s : float
        A click's delay is exponential with mean ``fast_mean_s`` with probability
        ``fast_share``, else with mean ``slow_mean_s``.
    never_share : float
        Share of clicks that never come.
    window_s : float
        Attribution window: a click later than this after its impression is not observed.
    ctr : float
        The feed's click rate.
    """

    def __init__(self, seed: int = 0, *, rate: float = 10.0, fast_share: float = 0.7,
                 fast_mean_s: float = 60.0, slow_mean_s: float = 3 * 3600.0,
                 never_share: float = 0.1, window_s: float = 86_400.0,
                 ctr: float = 0.03) -> None:
        if rate <= 0 or window_s <= 0 or not 0 <= fast_share <= 1 or not 0 <= never_share < 1:
            raise ValueError("rate and window_s must be positive, fast_share in [0, 1] and "
                             "never_share in [0, 1)")
        self.seed = int(seed)
        self.feed = AdClickFeed(seed=seed, ctr=ctr)
        self.rate = float(rate)
        self.fast_share, self.fast_mean_s = float(fast_share), float(fast_mean_s)
        self.slow_mean_s, self.never_share = float(slow_mean_s), float(never_share)
        self.window_s = float(window_s)

    def timeline(self, start: int, stop: int) -> Timeline:
        """Times, labels and observed click times of impressions ``start <= i < stop``."""
        labels = np.array([e["label"] for e in self.feed.events(start, stop)], np.int64)
        delays = np.concatenate([self._delays(b)[lo:hi] for b, lo, hi in _blocks(start, stop)]) \
            if stop > start else np.zeros(0)
        shown = np.arange(start, stop) / self.rate
        click = np.where((labels == 1) & (delays <= self.window_s), shown + delays, np.inf)
        return Timeline(shown, labels, click)

    def impressions(self, start: int, stop: int) -> list[dict[str, Any]]:
        """Events ``start <= i < stop`` with ``shown_at`` and ``click_at`` (None: no click
        is observed); ``label`` is the hidden label (1 even when the click never comes)."""
        t = self.timeline(start, stop)
        out = []
        for e, shown, click in zip(self.feed.events(start, stop), t.shown_at.tolist(),
                                   t.click_at.tolist(), strict=True):
            out.append({**e, "shown_at": round(shown, 9),
                        "click_at": None if click == np.inf else click})
        return out

    def _delays(self, block: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, _DELAYS, block])
        fast = rng.random(BLOCK) < self.fast_share
        d = rng.exponential(1.0, BLOCK) * np.where(fast, self.fast_mean_s, self.slow_mean_s)
        never = rng.random(BLOCK) < self.never_share
        return np.where(never, np.inf, d)

