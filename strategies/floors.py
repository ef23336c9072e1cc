"""A driving run's floor, drawn on its own RMSE plot (issue 66): the best constant prediction.

Each silo reports its test labels' mean and mean square beside its errors (clients/
driving_client.evaluate). The constant with the least squared error on a set of labels is
their mean, and its RMSE is their standard deviation; the server pools the silos' moments
(weighted by their test sizes) exactly as it pools their errors. The constant is chosen on the
test labels themselves, so no constant does better: a model below this line has learned
something a constant output cannot. (experiments/cdl/driving_table.py's "constant predictor"
is the pooled *training* mean, which a model could know; it is a little higher.)
"""

from __future__ import annotations

import math

from contracts.messages import LABEL_MEAN, LABEL_SQ_MEAN

# rounds.csv's RMSE columns, one name per meaning (issue 66): a server-side method's global
# model on the pooled test set (`rmse`); a peer method, which has no global model, each silo's
# own model, mean over silos, on the pooled test set (cross-evaluated) or on its own test set
GLOBAL_RMSE, SILO_RMSE_POOLED, SILO_RMSE_OWN = "rmse", "silo_rmse_pooled_mean", "silo_rmse_own_mean"
FLOOR = "floor-"  # rounds.csv `floor-<metric>`: what a trivial output scores on `<metric>`
FLOOR_RMSE = FLOOR + GLOBAL_RMSE  # the best constant's RMSE where `rmse` is measured


def headline_rmse(columns) -> str:
    """The run's headline RMSE column: `rmse` for a server-side method, else the peer
    method's mean over silos (pooled test set when cross-evaluated)."""
    return next((c for c in (GLOBAL_RMSE, SILO_RMSE_POOLED, SILO_RMSE_OWN) if c in columns),
                GLOBAL_RMSE)  # fmt: skip


def label_moments(metrics) -> tuple[float, float] | None:
    """(mean, mean square) of a silo's test labels from its reply, None when absent or not
    moments at all (non-finite, or a mean square below the squared mean)."""
    try:
        m, q = float(metrics[LABEL_MEAN]), float(metrics[LABEL_SQ_MEAN])
    except (KeyError, TypeError, ValueError):
        return None
    if not (math.isfinite(m) and math.isfinite(q)) or q < m * m * (1 - 1e-9) - 1e-12:
        return None
    return m, q


def best_constant_rmse(silos: list[tuple[float, float, float]]) -> float | None:
    """RMSE of the best constant on the union of the silos' test sets, from (n, mean, mean
    square) per silo; None without silos."""
    total = sum(n for n, _, _ in silos)
    if not silos or total <= 0:
        return None
    mean = sum(n * m for n, m, _ in silos) / total
    square = sum(n * q for n, _, q in silos) / total
    return math.sqrt(max(square - mean * mean, 0.0))
