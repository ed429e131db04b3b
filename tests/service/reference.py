"""The learner a model's config builds, fed rows directly, as the service's applier feeds
it: through the model's compact column index when it has one (service/feature_index.py).
Tests compare the service with it bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np

from aucstream.service.hosting import HostedModel


class Straight:
    def __init__(self, config: dict[str, Any]) -> None:
        self.model = HostedModel(config)

    def score_then_learn(self, X: Any, y: Any) -> np.ndarray:
        return self.model._learn(X, np.asarray(y))

    def learn(self, X: Any, y: Any) -> Straight:
        self.score_then_learn(X, y)
        return self

    def score(self, X: Any) -> np.ndarray:
        index = self.model.index
        if index is not None:
            X = index.frozen().lookup(X, self.model.learner.n_features)
        return self.model.learner.score(X)

    def get_state(self) -> dict[str, Any]:
        return self.model.learner.get_state()
