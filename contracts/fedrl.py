"""FedRL's exchange contract (paper Algorithms 1-2): what each party may send in each step,
which transitions an update uses, and what counts as an action id.

The party enforces `SENDS` on its replies (clients/fedrl_client.py) and the server on what it
relays (server/fedrl_run.py); the orchestrator (training/fedrl_protocol.py) draws the ids.
"""

from __future__ import annotations

import numpy as np

# array names each party may send, per step (theta_g travels in its own "theta-g" record);
# "c-alpha" is empty in joint-action mode, where beta does not act
SENDS = {
    ("alpha", "observe"): {"c-alpha"},
    # beta's act may also apply alpha's last targets (the round's deferred UpdateQ) and, in a
    # round's last step, release C_beta / C'_beta of the sampled transitions (ComputeQBeta(j))
    ("beta", "act"): {"c-beta", "a-beta", "c-beta-ids", "c-beta-next-ids"},
    # alpha's last act of a round also runs its K updates and returns Y and C_alpha(s_j)
    ("alpha", "act"): {"a-alpha", "c-alpha", "y", "c-alpha-ids"},
    ("beta", "update"): set(),  # the deferred update alone, before an evaluation
    ("alpha", "keep-best"): set(),
    ("beta", "keep-best"): set(),
    ("alpha", "checkpoint"): set(),  # the end of an evaluating round: write the party's state
    ("beta", "checkpoint"): set(),
    ("alpha", "eval-observe"): {"c-alpha"},
    ("beta", "eval-act"): {"c-beta", "a-beta"},
    ("alpha", "eval-act"): {"a-alpha", "c-alpha"},
}

# action ids: 4 moves, 4 x 4 joint actions, Text2Action's 2; beta's -1 = stays (joint-action)
ACTION_IDS = range(-1, 16)


def role_of(node_config) -> str:
    """A node's party: node config `role=alpha|beta` (deployment), or, when absent (the
    simulation engine sets only partition ids), partition 0 is alpha and 1 is beta."""
    role = str(node_config.get("role", "")).strip()
    if role:
        if role not in ("alpha", "beta"):
            raise ValueError(f"node config 'role' must be alpha or beta, got {role!r}")
        return role
    return "alpha" if int(node_config["partition-id"]) == 0 else "beta"


def sample_ids(rng: np.random.Generator, transitions: int, s) -> np.ndarray | None:
    """K x batch transition ids drawn uniformly from the replay (the orchestrator draws them:
    it knows how many transitions exist, not what they hold). None before the warm-up.
    `s`: training/fedrl_setup.Settings (warmup, batch_size, replay, updates)."""
    if transitions < max(s.warmup, s.batch_size):
        return None
    low = max(0, transitions - s.replay)
    return rng.integers(low, transitions, size=(s.updates, s.batch_size))
