"""Does a house's own look open a seen/unseen gap on the embedded houses? (issue 41, item 5)

    python -m experiments.fedvln.appearance_gap [--strengths 0 1] [--seeds 0 1 2] [--force]

On the semantic view features Envdrop's val_seen and val_unseen SR are level, so the embedded
houses have no gap for pre-exploration to close (docs/fedvln.md). `fedvln.appearance`
(envs/vln_appearance.py) adds each house's own look to every view. Here the same centralized
Envdrop (`experiments.fedvln.centralized --stages agent`: the speaker study's follower recipe,
every val path scored every `--eval-every` updates, stopped after `--patience` evaluations
without a better val_unseen SR, capped at `--iters`) is trained per strength and seed in
runs/fedvln-appearance/a<strength>-s<seed> (a finished run is reused), and the untrained
follower of each seed and strength is scored as the floor.

Reported per strength, at the best checkpoint (chosen on val_unseen SR, Table 2's rule) and the
last: val_seen SR, val_unseen SR and the gap seen - unseen, mean ± sd over seeds with the gap's
95% paired interval (`experiments.tables.paired`: its sd is at least the binomial sd of two
evaluations); the gap is real only where that interval excludes 0.
Results: experiments/results/fedvln_appearance{,_runs}.csv.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import torch

from envs.vln_setup import open_vln
from experiments.fedvln import centralized
from experiments.fedvln.runs import pick
from experiments.simulate import RESULTS, ROOT, command_line
from experiments.tables import gain_text, mean_sd, paired, pipe_table, refuse_overwrite
from models.envdrop import Follower, FollowerSize
from training import vln_agent

NAME = "fedvln_appearance"


def train(a, strength: float, seed: int) -> Path:
    """One centralized follower (resumed by `experiments.fedvln.centralized` itself)."""
    out = Path(a.out) / f"a{strength:g}-s{seed}"
    cmd = [sys.executable, "-m", "experiments.fedvln.centralized", "--stages", "agent"]
    cmd += ["--seed", str(seed), "--appearance", str(strength), "--iters", str(a.iters)]
    cmd += ["--eval-every", str(a.eval_every), "--patience", str(a.patience)]
    cmd += ["--out", str(out), "--results-dir", str(out)]
    if subprocess.run(cmd, cwd=ROOT, check=False).returncode != 0:
        raise SystemExit(f"appearance_gap: the run in {out} failed")
    return out


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


def run_rows(a) -> pd.DataFrame:
    runs = [(strength, seed) for strength in a.strengths for seed in a.seeds]
    with ThreadPoolExecutor(a.jobs) as pool:  # each run is its own process, one core each
        outs = list(pool.map(lambda r: train(a, *r), runs))
    rows = []
    for (strength, seed), out in zip(runs, outs):
        log = pd.read_csv(out / "agent_log.csv")
        picks = pick(log, "val_unseen_sr")
        picks["untrained (floor)"] = pd.Series({"iteration": 0, **untrained(strength, seed)})
        for ck, r in picks.items():
            rows.append(
                {
                    "strength": strength,
                    "seed": seed,
                    "checkpoint": ck,
                    "iteration": int(r["iteration"]),
                    "val_seen_sr": float(r["val_seen_sr"]),
                    "val_unseen_sr": float(r["val_unseen_sr"]),
                    "val_seen_n": int(r["val_seen_n"]),
                    "val_unseen_n": int(r["val_unseen_n"]),
                }
            )
    return pd.DataFrame(rows)


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
    return pipe_table(list(table.columns), table.values.tolist())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strengths", type=float, nargs="+", default=[0.0, 1.0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--iters", type=int, default=3000, help="follower cap")
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--patience", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (one core each)")
    ap.add_argument("--out", default=str(ROOT / "runs" / "fedvln-appearance"))
    ap.add_argument("--name", default=NAME, help="results name")
    ap.add_argument("--force", action="store_true", help="overwrite existing result files")
    a = ap.parse_args(argv)
    files = [RESULTS / f"{a.name}.csv", RESULTS / f"{a.name}_runs.csv"]
    try:
        if any(not 0 <= s <= 100 for s in a.strengths):
            raise ValueError("--strengths must be in [0, 100]")
        if min(a.iters, a.eval_every, a.jobs) <= 0 or a.patience < 0:
            raise ValueError("--iters, --eval-every and --jobs must be > 0, --patience >= 0")
        refuse_overwrite(files, a.force)
    except ValueError as e:
        print(f"appearance_gap: {e}", file=sys.stderr)
        return 2
    runs = run_rows(a)
    table = summarize(runs)
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.to_csv(files[0], index=False)
    runs.round(2).to_csv(files[1], index=False)
    print(f"\n{command_line(__file__, argv)}\n")
    print(markdown(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
