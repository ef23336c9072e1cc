"""Can pre-exploration gain at all on these houses? An oracle beside the speaker, same budget.

    python -m experiments.fedvln_oracle [--seeds 0 1 2] [--steps 60] [--routes 120]
           [--patience 4] [--data-dir ""] [--force]

FedVLN's pre-exploration (paper Sec. 4.2) fine-tunes the agent in each unseen house on routes
it samples there, instructed by the speaker. On the embedded houses every pre-exploration
variant ended below its start (issue 32), which leaves two explanations: the houses cannot
reward adaptation, or the speaker's instructions are too poor to teach anything. This script
separates them. Per seed, from one centralized follower and speaker trained till convergence
(experiments/vln_centralized.py with --patience, resumed if there), each unseen house adapts a
copy of the follower on its own (env-based: nothing shared), `--steps` optimizer steps of the
pre-exploration objective (back-translation's mlWeight, fresh RMSprop at the recipe's rate),
four ways:

- `none`: no adaptation (the start every arm is compared with);
- `oracle`: the house's own val_unseen routes with their true (human) instructions -- trained
  on what it is scored on, an upper bound no pre-exploration can beat;
- `speaker-same-routes`: the same routes, instructions written by the speaker;
- `speaker-sampled`: `--routes` routes sampled in the house, instructions by the speaker (what
  FedVLN's pre-exploration does, training/vln_house.speaker_routes).

Each is scored on the house's val_unseen episodes (SR, SPL), pooled over the unseen houses
(episode-weighted). If the oracle gains and the speaker arms do not, the speaker is what limits
pre-exploration; if the oracle does not gain either, these houses cannot show the effect.
Results: experiments/results/fedvln_oracle{,_runs}.csv (gain over `none`, mean ± sd over seeds,
and the paired 95% interval); each seed's house rows are kept in OUT/seed<S>/oracle.csv and a
rerun with the same settings skips them.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from config.fedvln_recipe import CPU
from envs.vln_houses import HouseSpec
from experiments import vln_centralized
from experiments.simulate import RESULTS, ROOT, command_line
from experiments.tables import mean_sd, paired_interval, pipe_table, refuse_overwrite
from models import vln_checkpoint
from training import vln_agent, vln_speaker
from training.vln_house import house_names, open_house, open_setup, speaker_routes
from training.vln_loop import make_optimizer

ARMS = ("none", "oracle", "speaker-same-routes", "speaker-sampled")
# what decides a seed's rows: a kept oracle.csv is reused only if these match
KEYED = (
    "data_dir",
    "steps",
    "routes",
    "batch_size",
    "patience",
    "agent_iters",
    "speaker_iters",
    "eval_every",
)


def central(a, out: Path, seed: int) -> Path:
    """The seed's centralized follower and speaker, trained till convergence (resumed)."""
    args = [
        *("--stages", "agent", "speaker", "--seed", str(seed), "--patience", str(a.patience)),
        *("--iters", str(a.agent_iters), "--speaker-iters", str(a.speaker_iters)),
        *("--eval-every", str(a.eval_every), "--out", str(out), "--results-dir", str(out)),
        *(["--data-dir", a.data_dir] if a.data_dir else []),
    ]
    if vln_centralized.main(args) != 0:
        raise SystemExit(f"fedvln_oracle: the centralized stages failed in {out}")
    return out / "checkpoints"


def adapt(follower, house, arm: str, speaker, a, seed: int) -> dict:
    """One unseen house, one arm: a copy of the follower adapted `--steps` steps, scored on
    the house's val_unseen episodes."""
    model = copy.deepcopy(follower)
    s = vln_agent.AgentSettings(batch_size=a.batch_size)
    world, vocab = house.setup.world, house.setup.vocab
    tokens = vln_agent.Tokens(vocab, s.max_words)
    if arm != "none":
        opt = make_optimizer(CPU["agent"].optimizer, model.parameters(), CPU["agent"].lr)
        rng = np.random.default_rng([seed, 7])
        torch.manual_seed(seed)
        if arm == "oracle":  # true instructions, weighted as back-translated ones are
            s_oracle = dataclasses.replace(s, ml_weight=s.aug_ml_weight)
            vln_agent.train_batches(
                model, opt, world, list(house.val), tokens, s_oracle, iterations=a.steps, rng=rng
            )
        else:
            routes = (
                [dataclasses.replace(e, instruction="") for e in house.val]
                if arm == "speaker-same-routes"
                else speaker_routes(house, a.routes, seed)
            )
            bt = vln_agent.BackTranslation(
                speaker, vln_speaker.PathInputs(world), vocab, s.max_words
            )
            vln_agent.train_batches(
                model,
                opt,
                world,
                [],
                tokens,
                s,
                iterations=a.steps,
                rng=rng,
                routes=routes,
                back_translate=bt,
            )
    m, _ = vln_agent.evaluate(model, world, list(house.val), tokens, s)
    return {"n": len(house.val), "sr": m["sr"], "spl": m["spl"]}


def run_seed(a, seed: int) -> pd.DataFrame:
    out = Path(a.out) / f"seed{seed}"
    rows_csv, made_by = out / "oracle.csv", out / "oracle.json"
    launch = {k: getattr(a, k) for k in KEYED}
    if rows_csv.is_file() and not a.redo:
        if made_by.is_file() and json.loads(made_by.read_text()) == launch:
            return pd.read_csv(rows_csv)
        print(f"  seed {seed}: {rows_csv} was made with other settings; adapting again")
    ck = central(a, out / "central", seed)
    follower, _, _ = vln_checkpoint.load(ck / "agent_best.pt")
    speaker, _, _ = vln_checkpoint.load(ck / "speaker.pt")
    setup = open_setup(a.data_dir, "", HouseSpec())  # vln_centralized's default houses
    rows = []
    for name in house_names(setup)[1]:
        house = open_house(setup, name)
        for arm in ARMS:
            r = adapt(follower, house, arm, speaker, a, seed)
            rows.append({"seed": seed, "house": name, "arm": arm, "steps": a.steps, **r})
            print(f"  seed {seed} {name} {arm:20s} SR {r['sr']:.1f}", flush=True)
    df = pd.DataFrame(rows)
    df.to_csv(rows_csv, index=False)
    made_by.write_text(json.dumps(launch))
    return df


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Per arm: pooled SR over the unseen houses (episode-weighted) per seed, mean ± sd, and
    the gain over `none` with its paired interval."""
    pooled = (
        runs.assign(w=runs.sr * runs.n)
        .groupby(["arm", "seed"])
        .apply(lambda g: g.w.sum() / g.n.sum(), include_groups=False)
        .unstack("arm")
    )
    rows = []
    for arm in ARMS:
        gain, lo, hi = paired_interval(pooled[arm], pooled["none"])
        rows.append(
            {
                "arm": arm,
                "seeds": len(pooled),
                "val_unseen SR": mean_sd(pooled[arm]),
                "gain over none": "" if arm == "none" else f"{gain:+.1f} [{lo:+.1f}, {hi:+.1f}]",
                "within noise": "" if arm == "none" else bool(lo <= 0 <= hi),
            }
        )
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default="", help="'' = embedded houses")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=60, help="adaptation steps per house and arm")
    ap.add_argument("--routes", type=int, default=120, help="sampled routes per house")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--patience", type=int, default=4, help="centralized stages' patience")
    ap.add_argument("--agent-iters", type=int, default=3000, help="centralized follower cap")
    ap.add_argument("--speaker-iters", type=int, default=1500, help="centralized speaker cap")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--out", default=str(ROOT / "runs" / "fedvln-oracle"))
    ap.add_argument("--name", default="fedvln_oracle")
    ap.add_argument("--redo", action="store_true", help="redo the adaptation of finished seeds")
    ap.add_argument("--force", action="store_true", help="overwrite existing result files")
    a = ap.parse_args(argv)
    out_csv, runs_csv = RESULTS / f"{a.name}.csv", RESULTS / f"{a.name}_runs.csv"
    try:
        if min(a.steps, a.routes, a.batch_size, a.agent_iters, a.speaker_iters) <= 0:
            raise ValueError("--steps, --routes, --batch-size and the iteration caps must be > 0")
        if a.patience < 0:
            raise ValueError("--patience must be >= 0")
        refuse_overwrite([out_csv, runs_csv], a.force)
    except ValueError as e:
        print(f"fedvln_oracle: {e}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    runs = pd.concat([run_seed(a, s) for s in a.seeds], ignore_index=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    runs.to_csv(runs_csv, index=False)
    table = summarize(runs)
    table.to_csv(out_csv, index=False)
    print(
        f"\n{command_line(__file__, argv)}\n\n"
        + pipe_table(list(table.columns), table.values.tolist())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
