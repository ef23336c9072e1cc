"""Training "till convergence" as the FedVLN paper trains every model (Sec. 5, Table 9): keep
the best checkpoint on the selection score and stop once it has not improved for `patience`
evaluations. The federated stages (server/fedvln_run.py, `fedvln.patience`) and the centralized
baseline (experiments/fedvln/centralized.py, `--patience`) stop by the same rule, so their steps to
convergence compare."""

from __future__ import annotations

import math


class Patience:
    """The best score so far, when it came, and whether the run should stop.

    `update(score, at)` after each evaluation (NaN: no evaluation, ignored) returns whether the
    score is a new best (strictly higher). `stop` holds once `patience` evaluations in a row
    have not improved on the best; patience 0 never stops (the run's length is its budget)."""

    def __init__(self, patience: int):
        if patience < 0:
            raise ValueError(f"patience must be >= 0, got {patience}")
        self.patience = patience
        self.best, self.best_at, self.since = -math.inf, None, 0

    def update(self, score: float, at: int) -> bool:
        if score != score:  # NaN: this round did not evaluate
            return False
        if score > self.best:
            self.best, self.best_at, self.since = score, at, 0
            return True
        self.since += 1
        return False

    @property
    def stop(self) -> bool:
        return self.patience > 0 and self.since >= self.patience

    @classmethod
    def replay(cls, patience: int, scores: list[tuple[int, float]]) -> "Patience":
        """The state after (at, score) evaluations already made (a resumed run)."""
        p = cls(patience)
        for at, score in scores:
            p.update(score, at)
        return p
