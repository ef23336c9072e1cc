"""Can pre-exploration gain at all on these houses? Adaptation on routes disjoint from the scored
ones, instructed by a perfect speaker, by ours and by a constant, same budget.

    python -m experiments.fedvln.oracle [--seeds 0 1 2] [--steps 180] [--routes 120] [--force]

FedVLN's pre-exploration (paper Sec. 4.2) fine-tunes the agent in each unseen house on routes
it samples there, instructed by the speaker. Per seed, from the centralized follower (best
val_unseen SR) and grounded speaker (best val_seen fidelity) of `experiments.fedvln.speaker`
(trained there if missing, resumed if there), each unseen house adapts a copy of the follower
on its own (env-based: nothing shared), `--steps` RMSprop steps at the pre-exploration
recipe's rate (`--lr`, 1e-4), on `--routes` routes sampled in the house with *none* of the house's scored routes among them
(no route with the path, or the start and goal, of a val_unseen episode: the official
pre-exploration samples away from the evaluation data too). Arms:

- `none`: no adaptation (the start every arm is compared with);
- `grammar`: the houses' own instruction grammar writes each route's instruction
  (`envs.vln_houses.grammar_instruction`): a perfect speaker, the upper bound of what
  pre-exploration with a speaker can teach here;
- `speaker`: our speaker writes them, batch by batch through the batch's environmental
  dropout (back-translation, what FedVLN's pre-exploration does);
- `constant`: the train instruction with the best train BLEU, for every route (the floor: what
  the routes teach with no language about them).

Labelled arms (grammar, constant) weigh the imitation loss as back-translated batches are
weighed (mlWeight of the augmented data), so the arms differ only in the words. Each is scored
on the house's val_unseen episodes (SR, SPL), pooled over the unseen houses (episode-weighted).
The earlier version of this script had an `oracle` arm that adapted on the very routes it then
scored (+32.9 SR, mostly memorising); it is gone. Results:
experiments/results/fedvln_oracle{,_runs}.csv (gain over `none`, mean ± sd over seeds, and the
paired 95% interval); each seed's house rows are kept in OUT/seed<S>/oracle.csv and a rerun
with the same settings skips them.
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
from envs.vln_houses import HouseSpec, grammar_instruction, houses_of
from experiments.fedvln import speaker as fedvln_speaker
from experiments.simulate import RESULTS, ROOT, command_line, path_digest
from experiments.tables import mean_sd, paired_interval, pipe_table, refuse_overwrite
from models import vln_checkpoint
from training import vln_agent, vln_speaker
from training import vln_speaker_quality as quality
from training.vln_house import house_names, open_house, open_setup, speaker_routes
from training.vln_loop import make_optimizer

ARMS = ("none", "grammar", "speaker", "constant")
# what decides a seed's rows: a kept oracle.csv is reused only if these match
KEYED = ("steps", "routes", "batch_size", "lr")


def adapt(follower, house, arm: str, speaker, routes, words: dict, a, seed: int) -> dict:
    """One unseen house, one arm: a copy of the follower adapted `--steps` steps on `routes`,
    scored on the house's val_unseen episodes."""
    model = copy.deepcopy(follower)
    s = vln_agent.AgentSettings(batch_size=a.batch_size)
    world, vocab = house.setup.world, house.setup.vocab
    tokens = vln_agent.Tokens(vocab, s.max_words)
    if arm != "none":
        opt = make_optimizer(CPU["preexplore"].optimizer, model.parameters(), a.lr)
        rng = np.random.default_rng([seed, 7])
        torch.manual_seed(seed)
        if arm == "speaker":
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
        else:
            labelled = [dataclasses.replace(r, instruction=words[arm][r.instr_id]) for r in routes]
            s_lab = dataclasses.replace(s, ml_weight=s.aug_ml_weight)
            vln_agent.train_batches(
                model, opt, world, labelled, tokens, s_lab, iterations=a.steps, rng=rng
            )
    m, _ = vln_agent.evaluate(model, world, list(house.val), tokens, s)
    return {"n": len(house.val), "sr": m["sr"], "spl": m["spl"]}


def run_seed(a, seed: int) -> pd.DataFrame:
    out = Path(a.out) / f"seed{seed}"
    rows_csv, made_by = out / "oracle.csv", out / "oracle.json"
    base = fedvln_speaker.train(fedvln_speaker.parse_args([]), seed)
    ck = base / "grounded" / "checkpoints"
    # the follower and the speaker it adapts with are part of what made the rows
    launch = {k: getattr(a, k) for k in KEYED} | {
        f: path_digest(ck / f) for f in ("agent_best.pt", "speaker.pt")
    }
    if rows_csv.is_file() and not a.redo:
        if made_by.is_file() and json.loads(made_by.read_text()) == launch:
            return pd.read_csv(rows_csv)
        print(f"  seed {seed}: {rows_csv} was made with other settings or models; adapting again")
    follower, _, _ = vln_checkpoint.load(ck / "agent_best.pt")
    speaker, _, _ = vln_checkpoint.load(ck / "speaker.pt")
    spec = HouseSpec()  # vln_centralized's default houses
    setup, grammar = open_setup("", "", spec), houses_of(spec)
    constant = quality.best_constant(setup.split("train"), seed)
    rows = []
    for name in house_names(setup)[1]:
        house = open_house(setup, name)
        routes = speaker_routes(house, a.routes, seed)  # disjoint from the scored ones
        scan, rng = setup.world.scan(name), np.random.default_rng([seed, 11])
        words = {
            "grammar": {
                r.instr_id: grammar_instruction(
                    grammar[name], [scan.index[v] for v in r.path], r.heading, rng
                )
                for r in routes
            },
            "constant": {r.instr_id: constant for r in routes},
        }
        for arm in ARMS:
            r = adapt(follower, house, arm, speaker, routes, words, a, seed)
            rows.append(
                {
                    "seed": seed,
                    "house": name,
                    "arm": arm,
                    "steps": a.steps,
                    "routes": len(routes),
                    **r,
                }
            )
            print(f"  seed {seed} {name} {arm:10s} SR {r['sr']:.1f}", flush=True)
    df = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
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


def markdown(table: pd.DataFrame) -> str:
    return pipe_table(list(table.columns), table.fillna("").values.tolist())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=180, help="adaptation steps per house and arm")
    ap.add_argument(
        "--lr",
        type=float,
        default=CPU["preexplore"].lr,
        help="adaptation learning rate (default: the pre-exploration recipe's, RMSprop)",
    )
    ap.add_argument("--routes", type=int, default=120, help="sampled routes per house")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--out", default=str(ROOT / "runs" / "fedvln-oracle"))
    ap.add_argument("--name", default="fedvln_oracle")
    ap.add_argument("--redo", action="store_true", help="redo the adaptation of finished seeds")
    ap.add_argument("--force", action="store_true", help="overwrite existing result files")
    a = ap.parse_args(argv)
    out_csv, runs_csv = RESULTS / f"{a.name}.csv", RESULTS / f"{a.name}_runs.csv"
    try:
        if min(a.steps, a.routes, a.batch_size, a.lr) <= 0:
            raise ValueError("--steps, --routes, --batch-size and --lr must be > 0")
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
    print(f"\n{command_line(__file__, argv)}\n\n" + markdown(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
