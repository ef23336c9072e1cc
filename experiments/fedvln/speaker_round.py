"""Why our federated speaker stays on the template plateau where the official code's does not
(issue 64 item 1): one federated speaker round several ways, in one process, all else equal.

    python -m experiments.study experiments/studies/fedvln_speaker_round.toml [--jobs 2]

- `parallel`: FedAvg as the paper's Eq. 7 describes it and as our Flower app runs it: every
  house of the round trains from the global speaker (keeping its own Adam state across
  rounds), and the server moves eta of the way to the size-weighted mean of their models.
- `sequential`: the official code's speaker round (eric-ai-lab/FedVLN r2r_src/train.py:137-158):
  one local speaker is loaded from the global one once per round, before the loop over the
  round's houses, and trained house after house without being reset (one Adam state
  throughout the run); after house k the server adds eta * n_k / n * (w_k - w), w_k being the
  model after houses 1..k. (Its follower round resets per house, :473-482.)

The official round differs from ours in two ways: the local model is not reset between houses,
and one Adam state serves every house (ours keeps one per house, as our Flower client does).
`--modes` adds the two other corners of that 2 x 2, to tell which matters, and one more FedAvg:

- `chain-own-adam`: not reset between houses (as the official round), each house its own Adam;
- `parallel-shared-adam`: reset per house (as FedAvg), one Adam state through every house;
- `parallel-fresh`: FedAvg with a fresh Adam for every house every round (no optimizer state
  kept on a house between rounds), a schedule a Flower client can run with no protocol change.

Two more FedAvg studies keep the round parallel and change one thing:
experiments/studies/fedvln_speaker_fedadam.toml the server's step (`server-opt = "adam"`,
FedAdam, strategies/fedadam.py), and experiments/studies/fedvln_speaker_one_house.toml the houses a
round (one: the round's global model is that house's update, so each round is a chain link);
experiments/studies/fedvln_speaker_fedadam_long.toml runs FedAvg and FedAdam for 120 rounds,
and experiments/studies/fedvln_speaker_word_dropout.toml FedAvg with and without the speaker's
word dropout (`word-dropout`, models/speaker.py; 0 in every other study) for 120 rounds.
A run's tau (`epochs`) is a field of its study:
experiments/studies/fedvln_speaker_local_steps.toml runs FedAvg at tau = 30, each house
making the chain's 114 sequential updates a round, beside the tau = 5 parallel and
chain-own-adam runs (the same cache). Only `parallel` and `parallel-fresh` are FedAvg (a house
sees only the global model); the other three hand one house's trained model to the next house
of the round. Everything else is the cpu speaker recipe and the Flower run's: the embedded
houses, the same `--houses` seen houses a round (one seeded draw per round, the same for both),
tau = 5 local epochs (19 updates of 32 a house), Adam at 1e-3, eta = 1.6, the speaker of
models/speaker.py.
Every `--eval-every` rounds the global speaker writes one instruction per val path; route
fidelity (envs.vln_fidelity, strict) on val_seen and val_unseen, with rooms on route, goal room
and stop object. Floors beside, from experiments/results/fedvln_speaker_floors.csv: a constant
sentence and the true words. Each (mode, seed) is cached in the study's `work`.

Writes experiments/results/fedvln_speaker_round.csv (best and last evaluation per mode, mean
+- sd over seeds: the kept checkpoint is the best val_seen fidelity, as the stage's),
fedvln_speaker_round_runs.csv (every evaluation) and the figure.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from experiments import figures
from experiments.simulate import RESULTS
from experiments.tables import mean_sd
from strategies.fedadam import fedadam_step

MODES = ("parallel", "sequential", "chain-own-adam", "parallel-shared-adam", "parallel-fresh")
# mode: (the local model reset to the global one for every house, whose Adam state it trains with)
ROUND = {
    "parallel": (True, "own"),
    "sequential": (False, "shared"),
    "chain-own-adam": (False, "own"),
    "parallel-shared-adam": (True, "shared"),
    "parallel-fresh": (True, "fresh"),
}
PARTS = ("fidelity", "rooms_on_route", "goal_room", "stop_object")
# the server's step: `avg` is Eq. 7's w + eta sum n_k/n (w_k - w), added house by house as
# it always was here (so an older study's run computes what its cache holds); `adam` is
# FedAdam (Reddi et al. 2021, "Adaptive Federated Optimization", Alg. 2,
# strategies/fedadam.py), a server optimizer that sees only what FedAvg's server sees
SERVER_OPTS = ("avg", "adam")
# each server step's first eta: a run at another eta is cached under a name that says it
FIRST_ETA = {"avg": 1.6, "adam": 0.03}


def one_run(
    mode: str,
    seed: int,
    rounds: int,
    houses: int,
    epochs: float,
    eval_every: int,
    server_lr: float,
    work: Path,
    server_opt: str = "avg",
    word_dropout: float = 0.0,
) -> list[dict]:
    """One (mode, seed): the federated speaker's rounds, evaluated every `eval_every` rounds
    and at the last; cached in `work` under these settings (the folder itself is not one).
    `server_opt` (SERVER_OPTS) is the server's step, `server_lr` its eta; `word_dropout` the
    speaker's (models/speaker.py, Bowman et al. 2016)."""
    job = {"mode": mode, "seed": seed, "rounds": rounds, "houses": houses, "epochs": epochs,
           "eval_every": eval_every, "server_lr": server_lr}  # fmt: skip
    if server_opt != "avg":  # Eq. 7's runs keep their first keys and names
        job["server_opt"] = server_opt
    if word_dropout:  # so are the runs without it
        job["word_dropout"] = word_dropout
    tau = "" if epochs == 5 else f"-tau{epochs:g}"  # tau = 5 runs keep their first names
    opt_name = "" if server_opt == "avg" else f"-server-{server_opt}"
    eta = "" if server_lr == FIRST_ETA[server_opt] else f"-eta{server_lr:g}"  # first names kept
    wd = f"-wd{word_dropout:g}" if word_dropout else ""
    cache = Path(work) / f"{mode}-s{seed}-r{rounds}{tau}{opt_name}{eta}{wd}.json"
    if cache.is_file():
        kept = json.loads(cache.read_text())
        if {k: v for k, v in kept["job"].items() if k != "work"} == job:
            return [{k: v for k, v in r.items() if k != "work"} for r in kept["rows"]]
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
    c = parse(merged({"seed": job["seed"], "fedvln.speaker-word-dropout": word_dropout}))
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
    moments: dict = {}  # FedAdam's (m, v) per tensor
    rows = []
    for rnd in range(1, job["rounds"] + 1):
        chosen = [houses[i] for i in sorted(draw.choice(len(houses), job["houses"], False))]
        n = sum(len(data[h]) for h in chosen)
        w = {k: v.detach().clone() for k, v in glob.state_dict().items()}
        new = {k: v.clone() for k, v in w.items()}  # Eq. 7, house by house
        mean_update = {k: torch.zeros_like(v) for k, v in w.items()}  # FedAdam's D
        local.load_state_dict(w)
        loss = []
        reset, adam = ROUND[job["mode"]]
        for h in chosen:
            if reset:
                local.load_state_dict(w)
            if adam == "shared":
                opt = shared
            else:
                opt = make_optimizer("adam", local.parameters(), s.lr)
                if adam == "own" and h in opts:
                    opt.load_state_dict(opts[h])
            iters = local_iterations(len(data[h]), job["epochs"], s.batch_size)
            loss.append(
                vln_speaker.train_batches(
                    local, opt, inputs, data[h], vln.vocab, s, iterations=iters, rng=rng
                )
            )
            if adam == "own":
                opts[h] = copy.deepcopy(opt.state_dict())
            for k, v in local.state_dict().items():
                if v.is_floating_point():
                    new[k] += job["server_lr"] * len(data[h]) / n * (v - w[k])
                    mean_update[k] += len(data[h]) / n * (v - w[k])
        if server_opt == "adam":  # the Flower app's step (strategies/fedadam.py)
            floats = [k for k in w if w[k].is_floating_point()]
            new = {k: w[k] for k in w} | fedadam_step(
                {k: w[k] for k in floats}, mean_update, moments, server_lr, sqrt=torch.sqrt
            )
        glob.load_state_dict(new)
        if rnd % job["eval_every"] and rnd != job["rounds"]:
            continue
        per_round = iters * (1 if reset else len(chosen))
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


def floor_table() -> pd.DataFrame:
    """The val_unseen floors on the embedded houses (experiments/results/
    fedvln_speaker_floors.csv), one row per floor: constant, other path, true."""
    t = pd.read_csv(RESULTS / "fedvln_speaker_floors.csv")
    return t[(t["data"] == "embedded houses") & (t["split"] == "val_unseen")].set_index("floor")


# the floors and the top drawn on a fidelity plot: fedvln_speaker_floors.csv's row, the
# legend's words and the line style
FLOOR_LINES = (
    ("constant", "constant sentence (floor)", ":"),
    ("other path", "another path's true words (floor)", "-."),
    ("true", "true words (top)", "--"),
)


def floors() -> dict[str, float]:
    """The constant sentence's, another path's and the true words' val_unseen fidelity
    (embedded houses)."""
    t = floor_table()
    return {f: float(str(t.loc[f, "fidelity"]).split(" ± ")[0]) for f, _, _ in FLOOR_LINES}


def draw_floors(ax) -> None:
    """The floors and the top as lines on a fidelity plot: a speaker that writes another
    path's true words (fluent, in the house's style, about the wrong route) is the floor a
    route-describing speaker must clear, above the constant sentence."""
    values = floors()
    for name, label, style in FLOOR_LINES:
        ax.axhline(values[name], color="grey", ls=style, label=f"{label} {values[name]:.1f}")


def arm_keys(curves: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The columns that name an arm: mode and tau, then the server's step where a study has
    FedAdam runs and the houses a round where a study varies them (Eq. 7's runs carry no
    `server_opt`, and the older studies one number of houses, so their tables stay as they
    were)."""
    keys = ["mode", "epochs"]
    if "server_opt" in curves:
        curves = curves.assign(server_opt=curves["server_opt"].fillna("avg"))
        keys.append("server_opt")
    if "houses" in curves and curves["houses"].nunique() > 1:
        keys.append("houses")
    if "word_dropout" in curves:
        curves = curves.assign(word_dropout=curves["word_dropout"].fillna(0.0))
        keys.append("word_dropout")
    return curves, keys


def summarize(curves: pd.DataFrame) -> pd.DataFrame:
    """Per mode and tau: the best (val_seen fidelity) and the last evaluation, mean ± sd over
    seeds, and how many seeds reached a val_unseen fidelity of 50 (grounded: the constant
    sentence scores 14.8, the true words 91.4)."""
    curves, keys = arm_keys(curves)
    rows = []
    for arm, g in curves.groupby(keys, sort=False):
        mode, tau = arm[:2]
        for ck in ("best", "last"):
            picked = [
                d.loc[d["val_seen_fidelity"].idxmax()] if ck == "best" else d.iloc[-1]
                for _, d in g.groupby("seed")
            ]
            p = pd.DataFrame(picked)
            row = {"mode": mode, "tau": tau, **dict(zip(keys[2:], arm[2:])), "checkpoint": ck,
                   "seeds": len(p), "round": mean_sd(p["round"], 0)}  # fmt: skip
            for col in ["val_seen_fidelity"] + [f"val_unseen_{k}" for k in PARTS]:
                row[col] = mean_sd(p[col])
            row["seeds_unseen_fidelity_ge_50"] = int((p["val_unseen_fidelity"] >= 50).sum())
            rows.append(row)
    return pd.DataFrame(rows)


def plot(curves: pd.DataFrame, png: Path, command: str) -> None:
    fig, ax = figures.subplots(figsize=(7, 4))
    curves, keys = arm_keys(curves)
    arms = list(dict.fromkeys(zip(*(curves[k] for k in keys))))
    solo = len(set(curves["epochs"])) == 1  # one tau: the mode alone names the arm
    per_house = "houses" in keys  # x: house trainings, the data budget, where houses vary
    for arm, g in curves.groupby(keys):
        named = dict(zip(keys, arm))
        for seed, d in g.groupby("seed"):
            label = arm[0] if solo else f"{arm[0]}, tau = {arm[1]:g}"
            if "server_opt" in named:
                label += f", server {named['server_opt']}, eta {d['server_lr'].iloc[0]:g}"
            if per_house:
                label += f", {named['houses']} house(s) a round"
            if "word_dropout" in named:
                label += f", word dropout {named['word_dropout']:g}"
            x = d["round"] * d["houses"] if per_house else d["round"]
            ax.plot(x, d["val_unseen_fidelity"], color=f"C{arms.index(arm)}",
                    label=label if seed == curves.seed.min() else None)  # fmt: skip
    draw_floors(ax)
    xlabel = "round (the same 6 houses a round and eta in every arm)"
    if per_house:
        xlabel = "house trainings (rounds x houses a round, each tau epochs)"
    elif len(keys) > 2:
        xlabel = "round (the same 6 houses a round in every arm)"
    ax.set(xlabel=xlabel,
           ylabel="val_unseen route fidelity (strict)",
           title="federated speaker round: FedAvg, the official sequential round, and between")  # fmt: skip
    ax.legend(fontsize=8)
    fig.tight_layout()
    figures.save(fig, png, command)


def check(cell: dict, where) -> None:
    """What a run of this study accepts (experiments/study.py)."""
    if cell.get("mode") not in ROUND:
        raise ValueError(f"{where}: grid.mode: one of {', '.join(MODES)}")
    if min(cell.get(k, 1) for k in ("rounds", "houses", "eval-every")) < 1:
        raise ValueError(f"{where}: grid.rounds, grid.houses, grid.eval-every: at least 1")
    if not cell.get("server-lr", 1) > 0 or not cell.get("epochs", 1) > 0:
        raise ValueError(f"{where}: grid.server-lr and grid.epochs: above 0")
    if not 0 <= cell.get("word-dropout", 0) < 1:
        raise ValueError(f"{where}: grid.word-dropout: in [0, 1)")
    if cell.get("server-opt", "avg") not in SERVER_OPTS:
        raise ValueError(f"{where}: grid.server-opt: one of {', '.join(SERVER_OPTS)}")
