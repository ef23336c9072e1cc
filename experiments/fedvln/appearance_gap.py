"""Does a house's own look open a seen/unseen gap on the embedded houses? (issue 41, item 5;
the analysis of experiments/studies/fedvln_appearance.toml)

    python -m experiments.study experiments/studies/fedvln_appearance.toml [--jobs 2]

On the semantic view features Envdrop's val_seen and val_unseen SR are level, so the embedded
houses have no gap for pre-exploration to close (docs/fedvln.md). `fedvln.appearance`
(envs/vln_appearance.py) adds each house's own look to every view. Here the same centralized
Envdrop (`experiments.fedvln.centralized --stages agent`: the speaker study's follower recipe,
every val path scored every `eval-every` updates, stopped after `patience` evaluations
without a better val_unseen SR, capped at `iters`) is trained per strength and seed in
<work>/a<strength>-s<seed> (a finished run is reused), and the untrained follower of each seed
and strength is scored as the floor. For the strengths in `speaker-strengths` a grounded
speaker is trained beside each follower: the start models of the oracle and of Table 5 with a
look, so that the whole chain is study files (fedvln_oracle_appearance.toml says the order).

Reported per strength, at the best checkpoint (chosen on val_unseen SR, Table 2's rule) and the
last: val_seen SR, val_unseen SR and the gap seen - unseen, mean ± sd over seeds with the gap's
95% paired interval (`experiments.tables.paired`: its sd is at least the binomial sd of two
evaluations); the gap is real only where that interval excludes 0.
Results: experiments/results/fedvln_appearance{,_runs}.csv and the figure.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from envs.vln_setup import open_vln
from experiments import figures
from experiments.fedvln import centralized
from experiments.fedvln.runs import pick
from experiments.simulate import run_child
from experiments.tables import gain_text, mean_sd, paired, pipe_table
from models.envdrop import Follower, FollowerSize
from training import vln_agent


def one_run(
    strength: float,
    seed: int,
    iters: int,
    eval_every: int,
    patience: int,
    speaker_strengths: list[float],
    speaker_iters: int,
    work: Path,
) -> list[dict]:
    """One centralized follower (resumed by `experiments.fedvln.centralized` itself): its best
    and last evaluations and the untrained floor, one row each. Where `strength` is one of
    `speaker_strengths`, a grounded speaker is then trained beside the follower, at most
    `speaker_iters` updates with the follower's evaluation and patience: the start models of
    the oracle and the pipeline with a look (fedvln_oracle_appearance.toml,
    fedvln_pipeline_appearance.toml); it adds no row here."""
    out = Path(work) / f"a{strength:g}-s{seed}"
    common = ["--seed", str(seed), "--appearance", str(strength)]
    common += ["--eval-every", str(eval_every), "--patience", str(patience)]
    common += ["--out", str(out), "--results-dir", str(out)]
    _centralized(["--stages", "agent", *common, "--iters", str(iters)], out)
    if strength in speaker_strengths:
        _centralized(["--stages", "speaker", *common, "--speaker-iters", str(speaker_iters)], out)
    picks = pick(pd.read_csv(out / "agent_log.csv"), "val_unseen_sr")
    picks["untrained (floor)"] = pd.Series({"iteration": 0, **untrained(strength, seed)})
    return [
        {"strength": strength, "seed": seed, "checkpoint": ck, "iteration": int(r["iteration"]),
         "val_seen_sr": float(r["val_seen_sr"]), "val_unseen_sr": float(r["val_unseen_sr"]),
         "val_seen_n": int(r["val_seen_n"]), "val_unseen_n": int(r["val_unseen_n"])}
        for ck, r in picks.items()
    ]  # fmt: skip


def _centralized(args: list[str], out: Path) -> None:
    cmd = [sys.executable, "-m", "experiments.fedvln.centralized", *args]
    if run_child(cmd).returncode != 0:
        raise RuntimeError(f"appearance_gap: the run in {out} failed ({' '.join(args[:2])})")


def check(cell: dict, where) -> None:
    """What a run of this study accepts (experiments/study.py)."""
    if not 0 <= cell.get("strength", -1) <= 100:
        raise ValueError(f"{where}: grid.strength: in [0, 100]")
    counts = ("iters", "eval-every", "speaker-iters")
    if min(cell.get(k, 0) for k in counts) <= 0 or cell.get("patience", -1) < 0:
        raise ValueError(
            f"{where}: grid.iters, grid.eval-every and grid.speaker-iters > 0, grid.patience >= 0"
        )


def untrained(strength: float, seed: int) -> dict[str, float]:
    """The floor: this seed's follower before any update, greedy on every val path."""
    c = centralized.parse_args([])
    vln = open_vln("", "", appearance=strength)
    torch.manual_seed(seed)
    model = Follower(FollowerSize(len(vln.vocab), vln.world.feature_dim, c.embedding, c.hidden))
    settings = vln_agent.AgentSettings(batch_size=c.batch_size, max_actions=c.max_actions)
    tokens = vln_agent.Tokens(vln.vocab, settings.max_words)
    out = {}
    for split in ("val_seen", "val_unseen"):
        episodes = vln.split(split)
        m, _ = vln_agent.evaluate(model, vln.world, episodes, tokens, settings)
        out |= {f"{split}_sr": m["sr"], f"{split}_n": len(episodes)}
    return out


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    table = []
    for (strength, ck), g in runs.groupby(["strength", "checkpoint"], sort=False):
        seen = {r.seed: (r.val_seen_sr, r.val_seen_n) for r in g.itertuples()}
        unseen = {r.seed: (r.val_unseen_sr, r.val_unseen_n) for r in g.itertuples()}
        p = paired(seen, unseen)
        gap, lo, hi = p["gain"], p["low"], p["high"]
        table.append(
            {
                "appearance": strength,
                "checkpoint": ck,
                "seeds": g.seed.nunique(),
                "updates": mean_sd(g.iteration, 0),
                "val_seen SR": mean_sd(g.val_seen_sr),
                "val_unseen SR": mean_sd(g.val_unseen_sr),
                "gap seen - unseen [95%]": gain_text(gap, lo, hi),
                "gap within noise": bool(lo <= 0 <= hi),
            }
        )
    return pd.DataFrame(table)


def markdown(table: pd.DataFrame) -> str:
    table = table.drop(columns="command", errors="ignore")  # the CSV's provenance
    return pipe_table(list(table.columns), table.values.tolist())


def plot(runs: pd.DataFrame, png: Path, command: str) -> None:
    """val_seen and val_unseen SR per look strength at the best and last checkpoints and the
    untrained floor, mean ± sd over seeds (the gap is the distance between a pair of bars)."""
    groups = list(runs.groupby(["strength", "checkpoint"], sort=False))
    fig, ax = figures.subplots(figsize=(8, 4))
    x = np.arange(len(groups))
    for j, split in enumerate(("val_seen", "val_unseen")):
        col = f"{split}_sr"
        ax.bar(x + (j - 0.5) * 0.38, [g[col].mean() for _, g in groups], 0.38,
               yerr=[g[col].std() for _, g in groups], capsize=3, label=f"{split} SR")  # fmt: skip
    ax.set_xticks(x, [f"look {s:g}\n{ck}" for (s, ck), _ in groups], fontsize=8)
    ax.set(ylabel="success rate (%)", title="Seen/unseen gap, centralized Envdrop (3 seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    figures.save(fig, png, command)
