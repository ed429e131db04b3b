"""aucstream learners: online rankers that maximise AUC on a stream of labelled events.

>>> import numpy as np
>>> from aucstream import models
>>> "cbr_fifo" in models.available()
True
>>> lrn = models.create("cbr_fifo", n_features=3, seed=0, C=1.0)
>>> lrn = lrn.learn(np.array([[1.0, 0, 0], [0, 1.0, 0]]), np.array([1, 0]))
>>> lrn.score(np.array([[1.0, 0, 0], [0, 1.0, 0]])).round(3).tolist()
[0.328, -0.328]
>>> twin = models.from_state(lrn.get_state())
>>> bool((twin.score(np.eye(3)) == lrn.score(np.eye(3))).all())
True
"""

if __name__ != "aucstream.models":  # imported from a checkout as a top-level package
    raise ImportError("This folder is the package aucstream.models: `from aucstream import "
                      "models` (after `pip install -e .`), not `import models`.")

from . import adaoam as _adaoam  # noqa: F401
from . import auto as _auto  # noqa: F401  (importing a family registers its learners)
from . import batch as _batch  # noqa: F401
from . import cbr as _cbr  # noqa: F401
from . import logistic as _logistic  # noqa: F401
from . import mba as _mba  # noqa: F401
from . import noam_nystrom as _noam_nystrom  # noqa: F401
from . import nsauc as _nsauc  # noqa: F401
from . import oam as _oam  # noqa: F401
from . import opauc as _opauc  # noqa: F401
from . import sam as _sam  # noqa: F401
from . import sam_kernel as _sam_kernel  # noqa: F401
from . import solam as _solam  # noqa: F401
from . import uni_exp as _uni_exp  # noqa: F401
from .auc import RollingAUC, auc
from .base import Learner, NonFiniteError, available, create, from_state
from .batch import fit_batch

__all__ = [
    "Learner",
    "NonFiniteError",
    "RollingAUC",
    "auc",
    "available",
    "create",
    "fit_batch",
    "from_state",
]
