"""Why our federated speaker stays on the template plateau where the official code's does not
(issue 64 item 1): one federated speaker round two ways, in one process, all else equal.

    python -m experiments.fedvln.speaker_round [--seeds 0 1 2] [--rounds 40] [--jobs 2]

- `parallel`: FedAvg as the paper's Eq. 7 describes it and as our Flower app runs it: every
  house of the round trains from the global speaker (keeping its own Adam state across
  rounds), and the server moves eta of the way to the size-weighted mean of their models.
- `sequential`: the official code's speaker round (eric-ai-lab/FedVLN r2r_src/train.py:137-158):
  one local speaker is loaded from the global one once per round, before the loop over the
  round's houses, and trained house after house without being reset (one Adam state
  throughout the run); after house k the server adds eta * n_k / n * (w_k - w), w_k being the
  model after houses 1..k. (Its follower round resets per house, :473-482.)

The official round differs from ours in two ways, and this measures them together, as the
official code runs them: the local model is not reset between houses, and one Adam state serves
every house (ours keeps one per house, as our Flower client does). Everything else is the cpu
speaker recipe and the Flower run's: the embedded houses, the same
`--houses` seen houses a round (one seeded draw per round, the same for both), tau = 5 local
epochs (19 updates of 32 a house), Adam at 1e-3, eta = 1.6, the speaker of models/speaker.py.
Every `--eval-every` rounds the global speaker writes one instruction per val path; route
fidelity (envs.vln_fidelity, strict) on val_seen and val_unseen, with rooms on route, goal room
and stop object. Floors beside, from experiments/results/fedvln_speaker_floors.csv: a constant
sentence and the true words. Each (mode, seed) is cached in --work.

Writes experiments/results/fedvln_speaker_round.csv (best and last evaluation per mode and
seed: the kept checkpoint is the best val_seen fidelity, as the stage's) and its figure.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from experiments import figures
from experiments.simulate import RESULTS, ROOT, command_line, in_parallel
from experiments.tables import mean_sd, pipe_table

MODES = ("parallel", "sequential")
PARTS = ("fidelity", "rooms_on_route", "goal_room", "stop_object")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--houses", type=int, default=6, help="seen houses a round (of 12)")
    p.add_argument("--eval-every", type=int, default=4)
    p.add_argument("--server-lr", type=float, default=1.6)
    p.add_argument("--epochs", type=float, default=5.0)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--work", default=str(ROOT / "runs" / "fedvln-speaker-round"))
    return p.parse_args(argv)


def one_run(job: dict) -> list[dict]:
    """One (mode, seed): the federated speaker's rounds, evaluated; cached in work."""
    cache = Path(job["work"]) / f"{job['mode']}-s{job['seed']}-r{job['rounds']}.json"
    if cache.is_file() and json.loads(cache.read_text())["job"] == job:
        return json.loads(cache.read_text())["rows"]
    from config import parse
    from config.schema import merged
    from contracts.fedvln import speaker_size
    from envs.vln_setup import open_vln
    from models.speaker import Speaker
    from training import vln_speaker
    from training import vln_speaker_quality as quality
    from training.vln_house import local_iterations
    from training.vln_loop import make_optimizer

    torch.set_num_threads(1)
    torch.manual_seed(job["seed"])
    c = parse(merged({"seed": job["seed"]}))
    vln = open_vln("")
    inputs = vln_speaker.PathInputs(vln.world)
    train = vln.split("train")
    houses = sorted({e.scan for e in train})
    data = {h: [e for e in train if e.scan == h] for h in houses}
    evals = {s: quality.one_per_path(vln.split(s)) for s in ("val_seen", "val_unseen")}
    size = speaker_size(c, len(vln.vocab), vln.world.feature_dim)
    glob, local = Speaker(size), Speaker(size)
    draw = np.random.default_rng(job["seed"])  # the houses of each round, both modes alike
    rng = np.random.default_rng(job["seed"] + 1)
    s = vln_speaker.SpeakerSettings(lr=1e-3)
    opts: dict[str, dict] = {}  # parallel: each house's own Adam state
    shared = make_optimizer("adam", local.parameters(), s.lr)  # sequential: one throughout
    rows = []
    for rnd in range(1, job["rounds"] + 1):
        chosen = [houses[i] for i in sorted(draw.choice(len(houses), job["houses"], False))]
        n = sum(len(data[h]) for h in chosen)
        w = {k: v.detach().clone() for k, v in glob.state_dict().items()}
        new = {k: v.clone() for k, v in w.items()}
        local.load_state_dict(w)
        loss = []
        for h in chosen:
            if job["mode"] == "parallel":
                local.load_state_dict(w)
                opt = make_optimizer("adam", local.parameters(), s.lr)
                if h in opts:
                    opt.load_state_dict(opts[h])
            else:
                opt = shared
            iters = local_iterations(len(data[h]), job["epochs"], s.batch_size)
            loss.append(
                vln_speaker.train_batches(
                    local, opt, inputs, data[h], vln.vocab, s, iterations=iters, rng=rng
                )
            )
            if job["mode"] == "parallel":
                opts[h] = copy.deepcopy(opt.state_dict())
            for k, v in local.state_dict().items():
                if v.is_floating_point():
                    new[k] += job["server_lr"] * len(data[h]) / n * (v - w[k])
        glob.load_state_dict(new)
        if rnd % job["eval_every"] and rnd != job["rounds"]:
            continue
        per_round = iters * (len(chosen) if job["mode"] == "sequential" else 1)
        row = {**job, "round": rnd, "seq_steps": rnd * per_round, "loss": float(np.mean(loss))}
        for split, (paths, refs) in evals.items():
            hyps = vln_speaker.write_instructions(glob, inputs, paths, vln.vocab)
            fid = quality.fidelity(vln.data, paths, hyps, refs)
            row.update({f"{split}_{k}": fid[k] for k in PARTS})
        print(
            f"{job['mode']} s{job['seed']} round {rnd}: loss {row['loss']:.3f} fidelity seen "
            f"{row['val_seen_fidelity']:.1f} unseen {row['val_unseen_fidelity']:.1f}",
            flush=True,
        )
        rows.append(row)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"job": job, "rows": rows}))
    return rows


def floors() -> dict[str, float]:
    """The constant sentence's and the true words' val_unseen fidelity (embedded houses)."""
    t = pd.read_csv(RESULTS / "fedvln_speaker_floors.csv")
    t = t[(t["data"] == "embedded houses") & (t["split"] == "val_unseen")].set_index("floor")
    return {f: float(str(t.loc[f, "fidelity"]).split(" ± ")[0]) for f in ("constant", "true")}


def summarize(curves: pd.DataFrame) -> pd.DataFrame:
    """Per mode: the best (val_seen fidelity) and the last evaluation, mean ± sd over seeds."""
    rows = []
    for mode, g in curves.groupby("mode", sort=False):
        for ck in ("best", "last"):
            picked = [
                d.loc[d["val_seen_fidelity"].idxmax()] if ck == "best" else d.iloc[-1]
                for _, d in g.groupby("seed")
            ]
            p = pd.DataFrame(picked)
            row = {"mode": mode, "checkpoint": ck, "seeds": len(p), "round": mean_sd(p["round"], 0)}
            for col in ["val_seen_fidelity"] + [f"val_unseen_{k}" for k in PARTS]:
                row[col] = mean_sd(p[col])
            rows.append(row)
    return pd.DataFrame(rows)


def plot(curves: pd.DataFrame, png: Path, command: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for (mode, seed), g in curves.groupby(["mode", "seed"]):
        ax.plot(g["round"], g["val_unseen_fidelity"], color="C0" if mode == "parallel" else "C1",
                label=f"{mode}" if seed == curves.seed.min() else None)  # fmt: skip
    for name, style in (("constant", ":"), ("true", "--")):
        ax.axhline(floors()[name], color="grey", ls=style, label=f"{name} words (floor / top)")
    ax.set(xlabel="round (same houses, local updates and eta in both)",
           ylabel="val_unseen route fidelity (strict)",
           title="federated speaker round: parallel FedAvg vs the official sequential round")  # fmt: skip
    ax.legend(fontsize=8)
    fig.tight_layout()
    figures.save(fig, png, command)


def main(argv=None) -> int:
    a = parse_args(argv)
    if min(a.rounds, a.houses, a.eval_every, a.jobs) < 1 or not 0 < a.server_lr:
        print("speaker_round: --rounds, --houses, --eval-every, --jobs >= 1; --server-lr > 0",
              file=sys.stderr)  # fmt: skip
        return 2
    jobs = [
        {"mode": m, "seed": sd, "rounds": a.rounds, "houses": a.houses, "epochs": a.epochs,
         "eval_every": a.eval_every, "server_lr": a.server_lr, "work": a.work}
        for sd in a.seeds for m in MODES
    ]  # fmt: skip
    done = in_parallel(one_run, jobs, a.jobs, "speaker rounds", processes=True)
    curves = pd.DataFrame([r for rows in done for r in rows])
    table = summarize(curves)
    command = command_line(__file__, argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.assign(command=command).to_csv(RESULTS / "fedvln_speaker_round.csv", index=False)
    plot(curves, RESULTS / "fedvln_speaker_round.png", command)
    print(f"\n{command}\n\n" + pipe_table(list(table.columns), table.values.tolist()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
