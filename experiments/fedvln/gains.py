"""Does each of FedVLN's contributions gain? Paired differences over seeds of the pipeline's
val_unseen SR, each with its 95% t-interval (issue 41 item 5: "whether each gains is stated
with a paired interval").

A seed's runs share their data, houses and initial follower, so a difference is taken seed by
seed (`experiments.tables.paired_interval`) and a comparison whose interval holds 0 is within
noise. The interval's sd is at least the binomial sd of one paired difference (each side's SR
over its val_unseen episodes, `experiments.tables.binomial_sd`): with 2-3 seeds the seeds' own spread can come out
near 0 by chance, and a difference below one evaluation's noise is not a finding. Comparisons:

- augmentation (paper Table 2): FedEnvdrop_aug − FedEnvdrop, Envdrop_aug − Envdrop, and
  each augmented agent − its control (the pipeline's `augment-control`, federated and
  centralized: the same restart from the agent's best, patience and cap, without speaker
  routes). Against the agent the two `best`s are maxima over unequal numbers of evaluations
  (the agent's run is longer) and the augmented run also restarts its optimizer; against the
  control only the speaker's routes differ;
- federation's cost: FedEnvdrop − Envdrop, FedEnvdrop_aug − Envdrop_aug (step-matched);
- pre-exploration (Table 5): each variant − its start, the augmented agent (FedEnvdrop_aug)
  or the follower a study's `start-models` names (`start`), and the paper's privacy claim, fed-lan − fed-full (sharing the language encoder only
  loses nothing) and fed-lan − env-based (what federating the encoder adds);
- the held-out-house control (issue 64 item 4): each pre-exploration (centralized and the four
  variants) − `env-based@other` (each unseen house adapting as env-based does, on the next
  unseen house's routes, scored in its own): the part of the gain that comes from adapting in
  this house, not from any adaptation. Against env-based it is exact (same budget, other
  routes); against the others it also holds their own budget and averaging;
- the budget control (item 6): env-based − `env-based@r1` (each house training at the
  federated variants' r1, so with their updates per house), and fed-lan − `env-based@r1`
  and fed-full − `env-based@r1`: what federating the encoder (the whole model) adds with the
  updates held equal, where fed-lan − env-based also holds env-based's twice as many
  updates.

Both checkpoints: `best` (the paper's: highest val_unseen SR of a run, chosen on the split it
is scored on, so every `best` carries the same optimistic pick of the maximum of its
evaluations) and `last` (no pick). A pre-exploration's `last` is compared with its start's
`best`, because that checkpoint is the one it starts from.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from config.fedvln import VARIANTS
from experiments.fedvln.runs import BUDGET_CONTROL, HOUSE_CONTROL, curve, pick
from experiments.tables import gain_text, paired

MODELS = {
    "Envdrop": "central/agent",
    "FedEnvdrop": "agent",
    "Envdrop_aug": "central/augment",
    "FedEnvdrop_aug": "augment",
    "FedEnvdrop_control": "augment-control",
    "Envdrop_control": "central/augment-control",
    "centralized": "preexplore-centralized",
    **{v: f"preexplore-{v}" for v in (*VARIANTS, HOUSE_CONTROL, BUDGET_CONTROL)},
    "start": "start",  # the follower a study's `start-models` names, scored once
}
PRE = ("centralized", *VARIANTS, HOUSE_CONTROL, BUDGET_CONTROL)  # every pre-exploration run
# (what it tests, a, b): the gain is a − b
COMPARISONS = [
    ("augmentation, federated", "FedEnvdrop_aug", "FedEnvdrop"),
    (
        "augmentation vs its control (same restart, no routes), federated",
        "FedEnvdrop_aug",
        "FedEnvdrop_control",
    ),
    ("augmentation, centralized", "Envdrop_aug", "Envdrop"),
    (
        "augmentation vs its control (same restart, no routes), centralized",
        "Envdrop_aug",
        "Envdrop_control",
    ),
    ("federation's cost, agent", "FedEnvdrop", "Envdrop"),
    ("federation's cost, augmented", "FedEnvdrop_aug", "Envdrop_aug"),
    *[(f"pre-exploration, {v}", v, "FedEnvdrop_aug") for v in PRE],
    *[(f"pre-exploration, {v}, from its start-models", v, "start") for v in PRE],
    *[
        (f"{v} vs the same adaptation in another house (held-out-house control)", v, HOUSE_CONTROL)
        for v in PRE
        if v not in (HOUSE_CONTROL, BUDGET_CONTROL)
    ],
    (
        "env-based: every round vs at r1 (the federated variants' updates per house)",
        "env-based",
        BUDGET_CONTROL,
    ),
    (
        "federating the language encoder vs each house alone, same updates per house",
        "fed-lan",
        BUDGET_CONTROL,
    ),
    (
        "federating the whole model vs each house alone, same updates per house",
        "fed-full",
        BUDGET_CONTROL,
    ),
    ("sharing only the language encoder vs the whole model", "fed-lan", "fed-full"),
    ("federating the language encoder vs each house alone", "fed-lan", "env-based"),
]
# every pre-exploration starts from the augmented agent's best checkpoint, or `start-models`
STARTS_FROM = ("FedEnvdrop_aug", "start")


def seed_scores(dirs: dict[int, Path]) -> pd.DataFrame:
    """One row per (seed, model, checkpoint): val_unseen SR of that checkpoint."""
    rows = []
    for seed, out in dirs.items():
        for model, run in MODELS.items():
            df = curve(out, run)
            if df is None or not len(df) or "val_unseen_sr" not in df:
                continue
            for ck, r in pick(df, "val_unseen_sr").items():
                n = r.get("val_unseen_n", np.nan)
                rows.append(
                    {
                        "seed": seed,
                        "model": model,
                        "checkpoint": ck,
                        "sr": r["val_unseen_sr"],
                        "n": float(n) if pd.notna(n) else np.nan,
                    }
                )
    return pd.DataFrame(rows, columns=["seed", "model", "checkpoint", "sr", "n"])


def gains(dirs: dict[int, Path]) -> pd.DataFrame:
    """The paired-gain table: one row per (comparison, checkpoint) with both sides' means, the
    mean paired difference, its interval, the seeds used and whether it is within noise."""
    scores = seed_scores(dirs)
    rows = []
    for what, a, b in COMPARISONS:
        for ck in ("best", "last"):
            ck_b = "best" if _starts(a, b) else ck
            sa = _by_seed(scores, a, ck)
            sb = _by_seed(scores, b, ck_b)
            if pair := paired(sa, sb):
                rows.append(
                    {"comparison": what, "a": a, "b": b, "checkpoint": ck, "b_checkpoint": ck_b}
                    | pair
                )
    return pd.DataFrame(rows)


def _starts(a: str, b: str) -> bool:
    """True when b is the checkpoint a starts from (a pre-exploration and its augmented agent)."""
    return b in STARTS_FROM and a in PRE


def _by_seed(scores: pd.DataFrame, model: str, ck: str) -> dict[int, tuple[float, float]]:
    """seed -> (SR, episodes it was measured on)."""
    s = scores[(scores["model"] == model) & (scores["checkpoint"] == ck)]
    return dict(zip(s["seed"], zip(s["sr"], s["n"])))


def markdown(t: pd.DataFrame) -> str:
    """README-ready rows: comparison, checkpoint, seeds, a and b, gain [interval], by seed."""
    if not len(t):
        return ""
    lines = [
        "| comparison (val_unseen SR) | checkpoint | seeds | a | b | gain a − b [95%] | by seed |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, r in t.iterrows():
        ck = (
            r["checkpoint"]
            if r["b_checkpoint"] == r["checkpoint"]
            else f"{r['checkpoint']} vs best"
        )
        gain = gain_text(r["gain"], r["low"], r["high"])
        lines.append(
            f"| {r['comparison']} | {ck} | {int(r['n_seeds'])} | {r['a']} {r['a_sr']:.1f} | "
            f"{r['b']} {r['b_sr']:.1f} | {gain} | {r['by_seed']} |"
        )
    return "\n".join(lines)
