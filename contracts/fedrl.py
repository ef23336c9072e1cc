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

# An evaluation chain (issue 63) steps several plays together: one message carries each play's
# arrays as f"{name}{PLAY}{index}", the base name being one `SENDS` allows for the step. The
# plays are named in the message's config as `plays_conf` writes them.
PLAY = "#"
EVAL_SPLITS = ("valid", "test")  # a play is scored on one; never on the training world


def play_key(name: str, index: int) -> str:
    return f"{name}{PLAY}{index}"


def not_allowed(role: str, step: str, names) -> list[str]:
    """The array names `SENDS` does not allow in this step: an evaluation step's names carry a
    play's index (`name#3`), any other step's carry none."""
    allowed, play = SENDS.get((role, step), set()), step.startswith("eval-")

    def ok(k: str) -> bool:
        name, sep, index = k.partition(PLAY)
        return name in allowed and (bool(sep) and index.isdigit()) == play

    return sorted(k for k in names if not ok(k))


def plays_conf(plays: dict[int, tuple[str, str, bool]]) -> str:
    """The chain's plays still stepping, {index: (split, weights, test_noise)}, as one config
    string: "0:valid:last:on,1:valid:last:off"."""
    return ",".join(
        f"{i}:{split}:{weights}:{'on' if noise else 'off'}"
        for i, (split, weights, noise) in sorted(plays.items())
    )


def parse_plays(text: str) -> dict[int, tuple[str, str, bool]]:
    """`plays_conf`'s inverse; a malformed string is refused, naming it."""
    out = {}
    for part in str(text).split(","):
        bits = part.split(":")
        if len(bits) != 4 or not bits[0].isdigit() or bits[2] not in ("last", "best"):
            raise ValueError(f"malformed evaluation play {part!r} in {text!r}")
        if bits[1] not in EVAL_SPLITS or bits[3] not in ("on", "off"):
            raise ValueError(f"malformed evaluation play {part!r} in {text!r}")
        out[int(bits[0])] = (bits[1], bits[2], bits[3] == "on")
    return out


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
