"""The replay both parties keep (indexed by the transition ids they share), epsilon-greedy
exploration and the training-episode statistics (paper Algorithms 1-2, "store transition")."""

from __future__ import annotations

import numpy as np

from models.fedrl_nets import N_ACTIONS


def explore(greedy: np.ndarray, eps: float, n_actions: int, rng: np.random.Generator) -> np.ndarray:
    """Epsilon-greedy: each slot takes a uniform random action with probability eps."""
    random_slots = rng.random(len(greedy)) < eps
    return np.where(random_slots, rng.integers(0, n_actions, len(greedy)), greedy)


def count_episodes(stats: np.ndarray, returns: np.ndarray, r, done, met) -> None:
    """Accumulate (episodes finished, met, reward sum) in `stats`; `returns` holds the running
    reward of each slot's current episode."""
    returns += r
    stats += [done.sum(), met.sum(), returns[done].sum()]
    returns[done] = 0.0


def episode_report(stats: np.ndarray) -> dict[str, float]:
    n, met, rew = stats
    return {
        "train-episodes": float(n),
        "train-succ-rate": float(met / n) if n else float("nan"),
        "train-avg-reward": float(rew / n) if n else float("nan"),
    }


def split_joint(actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Joint action id -> (alpha's move, beta's move), the reference's divmod(action, 4)."""
    return np.divmod(np.asarray(actions), N_ACTIONS)


class Replay:
    """Ring buffer of transitions indexed by the global transition id (same ids at both parties)."""

    def __init__(self, capacity: int, fields: dict[str, tuple]):
        self.capacity = capacity
        self.data = {k: np.zeros((capacity, *shape), dtype) for k, (shape, dtype) in fields.items()}

    def put(self, first_id: int, **values) -> np.ndarray:
        n = len(next(iter(values.values())))
        ids = np.arange(first_id, first_id + n)
        for k, v in values.items():
            self.data[k][ids % self.capacity] = v
        return ids

    def get(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        slots = np.asarray(ids) % self.capacity
        return {k: v[slots] for k, v in self.data.items()}
