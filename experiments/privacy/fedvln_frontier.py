"""FedVLN's privacy-utility frontier, agent stage (FedEnvdrop) on the embedded houses: val_unseen
SR against the run's epsilon, with the single-house floor (issue 44 item 3). The analysis of the
study file experiments/studies/fedvln_frontier.toml (one call of `measure` per seed and
setting; about 2.5 hours with `--jobs 2`):

    python -m experiments.study experiments/studies/fedvln_frontier.toml

The federated runs are Table 2's FedEnvdrop (experiments/fedvln/pipeline.py's agent stage: 12
seen houses, r = 0.2, tau = 3, the CPU recipe, evaluated every 3 rounds, stopped once val_unseen
SR has not improved for 8 evaluations, capped at 150 rounds); only what a house's update carries
changes (config/dp.py), whole-model releases as in training:
- central DP: each house clips its update to C, Flower's wrapper adds N(0, (zC/m)^2) to the
  mean (m houses sampled a round); epsilon is the server's accountant;
- local DP: each house's LocalDpMod clips to C and adds its own noise before sending;
  epsilon is the most-released house's own ledger.
Epsilon is the whole run's at delta 1e-5 (what was released, whichever checkpoint is scored).
C = 1: a house's first-round update has L2 norm ~1.35 (docs/privacy.md, the property study),
so C clips a little at the start and barely later. The noise levels are chosen to span the
property attack's settings: std 0.001 and 0.01 per released number (local epsilon 10,000 and
1,000; central z 0.002 and 0.02 with m = 2), where the attack is unchanged and at chance.

The floor is a house that does not federate: each seen house trained alone
(`experiments.fedvln.centralized --only-house`), the same recipe (optimizer, lr, batch, feedback),
with the federated house's schedule in its own steps (12 local steps a round, evaluated every 3
rounds' worth, the same patience and cap), scored on the same val_unseen houses. The study file
names each seed's houses (the 12 split over the seeds, so that every house is somebody's floor
once; the committed study trains the first of each seed's share, for time); a seed's floor is
the mean over its houses. The untrained follower, a second floor, is scored by
the "none" call from its run's config.

Best checkpoint: the evaluation with the highest val_unseen SR, as Table 2 and the paper choose
it (optimistic: chosen on the split it reports); last: the final evaluation. "Beats the single
house" is the paired difference over seeds, its sd floored at the binomial sd of one evaluation
(`experiments.tables.paired`); "crossing" names the smallest epsilon that still beats it.

Writes experiments/results/fedvln_frontier.csv (one row per setting and checkpoint), its _runs.csv
(one row per run and checkpoint) and .png; runs in runs/fedvln_frontier/ (resumable).
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

from experiments import figures
from experiments.fedvln import centralized
from experiments.fedvln.runs import curve, pick
from experiments.simulate import simulate
from experiments.tables import epsilon_text, mean_sd, paired, pipe_table

ROUNDS, EVERY, PATIENCE = 150, 3, 8  # Table 2's federated agent stage (pipeline defaults)
SEEN_HOUSES, STEPS_A_ROUND = 12, 12  # tau = 3 epochs of 120 instructions in batches of 32
KEY = "val_unseen_sr"
FLOOR = "single house"
UNTRAINED = "untrained"


def setting_of(name: str) -> tuple[str, float]:
    """A study file's setting as (mode, knob): "none" (FedEnvdrop without DP),
    "central-Z" (central DP, noise multiplier Z), "local-E" (local DP, epsilon E a release) or
    "single-house" (the floor)."""
    if name in ("none", "single-house"):
        return ("none", 0.0) if name == "none" else (FLOOR, np.nan)
    mode, _, knob = name.partition("-")
    try:
        value = float(knob)
    except ValueError:
        value = -1.0
    if mode not in ("central", "local") or not value > 0:
        raise ValueError(
            f"setting {name!r}: none, single-house, central-Z or local-E with Z, E > 0"
        )
    return mode, value


def dp_config(mode: str, knob: float, clip: float) -> str:
    """The run config's DP part of a federated setting (config/dp.py)."""
    if mode == "none":
        return ""
    knob_key = "dp.noise-multiplier" if mode == "central" else "dp.local-epsilon"
    return f'dp.mode="{mode}" {knob_key}={knob} dp.clip={clip}'


def fed_run(mode: str, knob: float, seed: int, rounds: int, clip: float, out: Path) -> list[dict]:
    """One federated run (resumed or reused when finished), read back at its best and last
    evaluation. A run the noise stopped (NaN updates refused until max-empty-rounds) is scored
    at its last evaluation."""
    stopped = False
    config = f'fedvln.stage="agent" eval-every={EVERY} fedvln.patience={PATIENCE}'
    config = f"{config} {dp_config(mode, knob, clip)}".strip()
    try:
        simulate("fedvln", out, rounds=rounds, seed=seed, run_config=config)
    except subprocess.CalledProcessError:
        stopped = True
    df = curve(out.parent, out.name)
    if df is None:  # a stopped run has no config.json wall time: read its rounds directly
        r = pd.read_csv(out / "rounds.csv")
        df = r[r[KEY].notna()].reset_index(drop=True)
        df["steps"] = np.nan
    rounds = pd.read_csv(out / "rounds.csv")
    eps = math.inf
    if mode != "none":
        eps = float(rounds["dp_epsilon"].max()) if "dp_epsilon" in rounds else math.nan
    return [
        {
            "mode": mode,
            "knob": knob,
            "seed": seed,
            "checkpoint": ck,
            "sr": float(r[KEY]),
            "episodes": float(r["val_unseen_n"]),
            "spl": float(r["val_unseen_spl"]),
            "round": int(r["round"]),
            "rounds_done": int(rounds["round"].max()),
            "epsilon": eps,
            "releases": float(rounds["dp_releases"].max()) if "dp_releases" in rounds else math.nan,
            "stopped": stopped,
            "curve": _curve(df["round"], df[KEY]),
        }
        for ck, r in pick(df, KEY).items()
    ]


def _curve(rounds, srs) -> str:
    """A run's evaluations as 'round:SR;...' (kept in the runs CSV)."""
    return ";".join(f"{int(r)}:{v:.4f}" for r, v in zip(rounds, srs))


def best_upto(curve: str, last_round: float) -> float:
    """The best SR of a curve among its evaluations at or before `last_round`."""
    points = [(int(r), float(v)) for r, v in (x.split(":") for x in curve.split(";"))]
    return max(v for r, v in points if r <= last_round)


def floor_run(house: str, seed: int, rounds: int, out: Path) -> list[dict]:
    """One seen house trained alone (vln_centralized --only-house), read at best and last."""
    args = [
        "--stages", "agent", "--only-house", house, "--seed", str(seed),
        "--iters", str(rounds * STEPS_A_ROUND),
        "--eval-every", str(EVERY * STEPS_A_ROUND), "--patience", str(PATIENCE),
        "--out", str(out), "--results-dir", str(out),
    ]  # fmt: skip
    if centralized.main(args) != 0:
        raise RuntimeError(f"the single-house run in {out} failed: see its output above")
    df = pd.read_csv(out / "agent_log.csv")
    return [
        {
            "mode": FLOOR,
            "knob": np.nan,
            "seed": seed,
            "house": house,
            "checkpoint": ck,
            "sr": float(r[KEY]),
            "episodes": float(r["val_unseen_n"]),
            "spl": float(r["val_unseen_spl"]),
            "round": int(r["iteration"]) // STEPS_A_ROUND,
            "rounds_done": int(df["iteration"].max()) // STEPS_A_ROUND,
            "epsilon": 0.0,
            "releases": 0.0,
            "stopped": False,
            "curve": _curve(df["iteration"] // STEPS_A_ROUND, df[KEY]),
        }
        for ck, r in pick(df, KEY).items()
    ]


def untrained(seed: int, run: Path) -> list[dict]:
    """The follower before any training (this seed's initialisation, the federated run's
    sizes) on val_unseen: the floor any trained agent must clear."""
    import json

    import torch

    from config import parse
    from contracts.fedvln import follower_size
    from models.envdrop import Follower
    from training import vln_agent
    from training.vln_house import setup_of

    c = parse(json.loads((run / "config.json").read_text()))
    setup = setup_of(c)
    torch.manual_seed(seed)
    follower = Follower(follower_size(c, len(setup.vocab), setup.world.feature_dim))
    s = vln_agent.AgentSettings.of(c)
    eps = setup.split("val_unseen")
    m, _ = vln_agent.evaluate(
        follower, setup.world, eps, vln_agent.Tokens(setup.vocab, s.max_words), s
    )
    row = {"mode": UNTRAINED, "knob": np.nan, "seed": seed, "sr": m["sr"], "spl": m["spl"],
           "episodes": float(len(eps)), "round": 0, "rounds_done": 0, "epsilon": 0.0, "releases": 0.0,
           "stopped": False}  # fmt: skip
    return [row | {"checkpoint": ck} for ck in ("best", "last")]


def check(cell: dict, where) -> None:
    """A setting this study knows, positive rounds and clip, and houses only for the floor,
    each a seen house (ValueError naming the study file and field)."""
    try:
        mode, _ = setting_of(cell["setting"])
    except ValueError as e:
        raise ValueError(f"{where}: grid.{e}") from None
    if cell["rounds"] <= 0 or cell["clip"] <= 0:
        raise ValueError(f"{where}: grid.rounds and grid.clip must be positive")
    seen = {f"house{h:03d}" for h in range(SEEN_HOUSES)}
    houses = cell.get("houses", [])
    if (mode == FLOOR) != bool(houses) or not set(houses) <= seen:
        raise ValueError(
            f"{where}: grid.houses: the single-house setting's seen houses (house000-house011), "
            f"and only its; got {houses!r} for {cell['setting']!r}"
        )


def measure(
    seed: int, setting: str, rounds: int, clip: float, work: Path, houses: list[str] = ()
) -> list[dict]:
    """One cell: a federated setting's run for this seed (with the untrained follower's rows
    for "none", from that run's config), or each of the seed's `houses` trained alone."""
    mode, knob = setting_of(setting)
    if mode == FLOOR:
        return [row for h in houses for row in floor_run(h, seed, rounds,
                work / f"{FLOOR.replace(' ', '-')}-{h}-s{seed}")]  # fmt: skip
    out = work / f"{setting}-s{seed}"
    rows = fed_run(mode, knob, seed, rounds, clip, out)
    return rows + untrained(seed, out) if mode == "none" else rows


def per_seed(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (setting, seed, checkpoint): the floor's houses averaged within a seed; the
    settings in the tables' order (no DP, central, local by knob, the floors), whatever order
    the runs came in."""
    keys = ["mode", "knob", "seed", "checkpoint"]
    rank = runs["mode"].map({"none": 0, "central": 1, "local": 2, FLOOR: 3, UNTRAINED: 4})
    runs = runs.assign(_rank=rank).sort_values(["_rank", "knob"], kind="stable")
    agg = {"sr": "mean", "episodes": "mean", "spl": "mean", "epsilon": "max", "stopped": "any",
           "rounds_done": "max", "curve": "first"}  # fmt: skip
    return runs.groupby(keys, dropna=False, sort=False).agg(agg).reset_index()


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Per setting and checkpoint: epsilon, val_unseen SR mean ± sd over seeds, and its paired
    difference from the single-house floor and from FedEnvdrop without DP."""
    s = per_seed(runs)
    rows = []
    for ck in ("best", "last"):
        at = s[s.checkpoint == ck]
        by_seed = lambda g: dict(zip(g.seed, zip(g.sr, g.episodes)))  # noqa: E731
        floor = by_seed(at[at["mode"] == FLOOR])
        none = by_seed(at[at["mode"] == "none"])
        curves = at[at["mode"] == "none"].set_index("seed")["curve"] if ck == "best" else {}
        for (mode, knob), g in at.groupby(["mode", "knob"], dropna=False, sort=False):
            vs_floor = paired(by_seed(g), floor) if mode not in (FLOOR, UNTRAINED) else None
            vs_none = paired(by_seed(g), none) if mode in ("central", "local") else None
            same = None  # no DP's best within the rounds this DP run trained before it stopped
            if mode in ("central", "local") and len(curves):
                upto = {r.seed: (best_upto(curves[r.seed], r.rounds_done), r.episodes)
                        for r in g.itertuples() if r.seed in curves.index}  # fmt: skip
                same = paired(by_seed(g), upto)
            rows.append(
                {
                    "mode": mode,
                    "knob": knob,
                    "checkpoint": ck,
                    "seeds": len(g),
                    "epsilon": g.epsilon.mean(),
                    "sr": mean_sd(g.sr),
                    "sr_mean": g.sr.mean(),
                    "sr_sd": g.sr.std(ddof=1) if len(g) > 1 else 0.0,
                    "spl_mean": g.spl.mean(),
                    "stopped": int(g.stopped.sum()),
                    **_pair("vs_floor", vs_floor),
                    **_pair("vs_no_dp", vs_none),
                    **_pair("vs_no_dp_same_rounds", same),
                    "rounds_done": g.rounds_done.mean(),
                }
            )
    return pd.DataFrame(rows)


def _pair(prefix: str, p: dict | None) -> dict:
    p = p or {}
    low = p.get("low", np.nan)
    return {
        prefix: p.get("gain", np.nan),
        f"{prefix}_low": low,
        f"{prefix}_high": p.get("high", np.nan),
        f"{prefix}_by_seed": p.get("by_seed", ""),
        **({"beats_floor": bool(low > 0)} if prefix == "vs_floor" else {}),
    }


def crossing(t: pd.DataFrame, checkpoint: str = "best") -> dict:
    """The smallest finite epsilon whose row still beats the single house (interval above 0),
    and the DP rows that do not, each with its epsilon."""
    f = t[t["mode"].isin(["central", "local"]) & (t.checkpoint == checkpoint)]
    won = f[f.beats_floor.astype(bool)]
    lost = f[~f.beats_floor.astype(bool)]
    best = next(won.sort_values("epsilon").itertuples(), None)  # a row: .mode is the column
    return {
        "smallest_epsilon": None if best is None else float(best.epsilon),
        "setting": None if best is None else _name(best),
        "not": [(_name(r), float(r.epsilon)) for r in lost.sort_values("epsilon").itertuples()],
    }


def _name(r) -> str:
    if r.mode == "central":
        return f"central DP z = {r.knob:g}"
    if r.mode == "local":
        return f"local DP ε = {r.knob:g} a release"
    if r.mode == UNTRAINED:
        return "untrained follower (floor)"
    return "FedEnvdrop, no DP" if r.mode == "none" else "each seen house alone (floor)"


def _interval(r, prefix: str) -> str:
    g = getattr(r, prefix)
    if g != g:
        return ""
    return f"{g:+.1f} [{getattr(r, prefix + '_low'):+.1f}, {getattr(r, prefix + '_high'):+.1f}]"


def markdown(t: pd.DataFrame) -> str:
    head = ["setting", "checkpoint", "seeds", "rounds", "ε of the run (δ = 1e-5)",
            "val_unseen SR %", "− single house [95%]", "− no DP [95%]",
            "− no DP within as many rounds [95%]"]  # fmt: skip
    body = []
    for r in t.itertuples():
        stop = f" ({r.stopped} of {r.seeds} stopped)" if r.stopped else ""
        body.append([_name(r), r.checkpoint, r.seeds, f"{r.rounds_done:.0f}", epsilon_text(r.epsilon),
                     r.sr + stop, _interval(r, "vs_floor"), _interval(r, "vs_no_dp"),
                     _interval(r, "vs_no_dp_same_rounds")])  # fmt: skip
    c = crossing(t)
    if c["smallest_epsilon"] is None:
        said = "No DP setting measured beats a house training alone (best checkpoint)."
    else:
        said = (
            f"The smallest ε that still beats a house training alone (interval above 0, best "
            f"checkpoint): {epsilon_text(c['smallest_epsilon'])} ({c['setting']})."
        )
    if c["not"]:
        said += (
            " Not beating it: " + "; ".join(f"{n} (ε {epsilon_text(e)})" for n, e in c["not"]) + "."
        )
    return pipe_table(head, body) + "\n\n" + said


def plot(runs: pd.DataFrame, png, command: str) -> None:
    t = summarize(runs)
    fig, axes = figures.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, ck in zip(axes, ("best", "last")):
        at = t[t.checkpoint == ck]
        finite = at[np.isfinite(at.epsilon) & (at.epsilon > 0)]
        right = finite.epsilon.max() * 10 if len(finite) else 1.0
        for mode, marker, color in (("central", "o", "tab:blue"), ("local", "s", "tab:red")):
            part = at[at["mode"] == mode].sort_values("epsilon")
            if len(part):
                ax.errorbar(part.epsilon, part.sr_mean, yerr=part.sr_sd, marker=marker,
                            color=color, capsize=3, label=f"FedEnvdrop + {mode} DP")  # fmt: skip
                for r in part.itertuples():
                    knob = f"z={r.knob:g}" if mode == "central" else f"ε₁={r.knob:g}"
                    ax.annotate(knob, (r.epsilon, r.sr_mean), textcoords="offset points",
                                xytext=(3, 5), fontsize=7)  # fmt: skip
        for mode, style, color, label in (
            ("none", "-", "black", "FedEnvdrop, no DP (ε = ∞)"),
            (FLOOR, "--", "tab:green", "each seen house alone (ε = 0)"),
            (UNTRAINED, ":", "grey", "untrained follower"),
        ):
            row = at[at["mode"] == mode]
            if len(row):
                y, sd = float(row.sr_mean.iloc[0]), float(row.sr_sd.iloc[0])
                ax.axhline(y, ls=style, color=color, label=label)
                ax.axhspan(y - sd, y + sd, color=color, alpha=0.1)
        ax.set(xscale="log", title=f"FedVLN agent stage, embedded houses, {ck} checkpoint",
               xlabel="ε of the run (δ = 1e-5, log scale)")  # fmt: skip
        ax.set_ylabel(f"val_unseen SR % (mean ± sd, {int(t.seeds.max())} seeds)")
        ax.set_xlim(right=right)
        ax.legend(fontsize=7)
    fig.tight_layout()
    figures.save(fig, png, command)
