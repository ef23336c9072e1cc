"""FedVLN's whole pipeline in Flower's simulation engine, resumable per stage, and the layouts
of the paper's Tables 2, 4 and 5 with the paper's numbers beside ours.

    python -m experiments.fedvln_pipeline                    # embedded houses (CPU)
    python -m experiments.fedvln_pipeline --data-dir ../shared/data --tag r2r   # real R2R

Stages, each one `python simulation.py fedvln --stage ...` run in OUT/<stage>:
agent -> speaker -> augment (agent + speaker) -> preexplore-<variant> for env-based, fed-full,
fed-lan and fed-lan+seen (each from the agent stage's model, with the federated speaker), then
the non-private centralized pre-exploration reference in this process
(OUT/preexplore-centralized/log.csv). A stage whose rounds.csv reached its rounds is skipped on
rerun, so an interrupted pipeline resumes where it stopped.

Centralized rows of Tables 2 and 4 come from `experiments/results/vln_centralized[_TAG].csv`
(`python -m experiments.vln_centralized`). Centralized pre-exploration trains one follower on
the pooled speaker-written episodes of every unseen house (the same episodes the houses make
for themselves) for as many updates per round as env-based makes in all houses together.
Reported numbers are those of the last evaluation, not a checkpoint picked on val_unseen;
Table 5 adds the mean SR of the last three evaluations, as single evaluations are noisy.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from clients import vln_agent
from clients.fedvln import agent_settings, spec_of
from clients.vln_house import (house_names, local_iterations, open_house, open_setup,
                               speaker_episodes)
from experiments.simulate import RESULTS, ROOT, simulate
from models import vln_checkpoint

VARIANTS = ("env-based", "fed-full", "fed-lan", "fed-lan+seen")
NAV = ["ne", "osr", "spl", "sr", "cls", "ndtw"]
PAPER_T2 = {  # FedVLN Table 2, R2R, Envdrop rows
    ("Envdrop", "val_seen"): [4.71, 65.6, 53.2, 56.1, 66.8, 55.0],
    ("Envdrop", "val_unseen"): [5.87, 52.7, 40.9, 44.5, 57.1, 42.3],
    ("FedEnvdrop", "val_seen"): [5.20, 60.2, 48.3, 51.2, 64.3, 51.2],
    ("FedEnvdrop", "val_unseen"): [5.52, 55.5, 43.9, 47.5, 59.2, 45.7],
    ("Envdrop_aug", "val_seen"): [3.93, 71.6, 61.0, 64.1, 71.4, 61.3],
    ("Envdrop_aug", "val_unseen"): [5.36, 57.7, 45.8, 49.9, 59.3, 45.3],
    ("FedEnvdrop_aug", "val_seen"): [4.14, 70.4, 58.7, 62.0, 69.8, 59.2],
    ("FedEnvdrop_aug", "val_unseen"): [5.22, 58.5, 47.5, 51.3, 60.8, 47.0],
}
PAPER_T4 = {"Cent": (33.6, 30.7), "Fed": (31.7, 31.9)}   # ResNet speaker BLEU seen, unseen
PAPER_T5 = {  # Envdrop rows, R2R val_unseen; shared share of parameters
    "centralized": ([3.89, 73.7, 61.7, 64.8, 71.5, 64.6], "data"),
    "env-based": ([3.49, 78.5, 64.0, 67.4, 73.2, 67.5], "nothing"),
    "fed-full": ([3.96, 74.1, 59.1, 62.4, 70.9, 63.3], "100%"),
    "fed-lan": ([3.52, 77.6, 63.6, 67.2, 73.2, 67.6], "24.6%"),
    "fed-lan+seen": ([3.47, 78.1, 64.8, 68.3, 73.5, 67.3], "24.6%"),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default="", help="R2R/Matterport folder; '' = embedded houses")
    p.add_argument("--tag", default="", help="suffix of run and results names (e.g. r2r)")
    p.add_argument("--out", default="", help="runs folder (default runs/fedvln[-TAG])")
    p.add_argument("--agent-rounds", type=int, default=30)
    p.add_argument("--speaker-rounds", type=int, default=20)
    p.add_argument("--aug-rounds", type=int, default=15)
    p.add_argument("--pre-rounds", type=int, default=15)
    p.add_argument("--eval-every", type=int, default=5, help="agent/speaker/augment stages")
    p.add_argument("--pre-eval-every", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run-config", default="", help="extra run config for every stage")
    p.add_argument("--results-dir", default=str(RESULTS))
    return p.parse_args(argv)


def stage_config(a, stage: str, extra: str = "") -> str:
    every = a.pre_eval_every if stage == "preexplore" else a.eval_every
    items = [f'fedvln.stage="{stage}"', f"eval-every={every}"]
    if a.data_dir:
        items.append(f'fedvln.data-dir="{Path(a.data_dir).resolve()}"')
    return " ".join(items + [extra, a.run_config]).strip()


def run_pipeline(a, out: Path) -> None:
    simulate("fedvln", out / "agent", rounds=a.agent_rounds, seed=a.seed,
             run_config=stage_config(a, "agent"))
    simulate("fedvln", out / "speaker", rounds=a.speaker_rounds, seed=a.seed,
             run_config=stage_config(a, "speaker"))
    inits = (f'fedvln.agent-init="{out / "agent" / "model.pt"}" '
             f'fedvln.speaker-init="{out / "speaker" / "best.pt"}"')
    simulate("fedvln", out / "augment", rounds=a.aug_rounds, seed=a.seed,
             run_config=stage_config(a, "augment", inits))
    for v in VARIANTS:
        simulate("fedvln", out / f"preexplore-{v}", rounds=a.pre_rounds, seed=a.seed,
                 run_config=stage_config(a, "preexplore", f'{inits} fedvln.variant="{v}"'))
    centralized_preexplore(a, out)


def centralized_preexplore(a, out: Path) -> Path:
    """One follower on every unseen house's speaker-written episodes, pooled (non-private)."""
    dest = out / "preexplore-centralized"
    log_path = dest / "log.csv"
    if log_path.is_file() and pd.read_csv(log_path)["round"].max() >= a.pre_rounds:
        return log_path
    dest.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((out / "preexplore-env-based" / "config.json").read_text())
    torch.manual_seed(a.seed)
    setup = open_setup(str(cfg["fedvln.data-dir"]), str(cfg["fedvln.features-tsv"]), spec_of(cfg))
    follower, _, _ = vln_checkpoint.load(cfg["fedvln.agent-init"])
    speaker, _, _ = vln_checkpoint.load(cfg["fedvln.speaker-init"])
    houses = [open_house(setup, h) for h in house_names(setup)[1]]
    train, val, per_round = [], [], 0
    for h in houses:
        eps = speaker_episodes(speaker, h, int(cfg["fedvln.preexplore-routes"]), int(cfg["seed"]))
        train += eps
        val += h.val
        per_round += local_iterations(len(eps), float(cfg["fedvln.preexplore-epochs"]),
                                      int(cfg["fedvln.batch-size"]),
                                      int(cfg["fedvln.max-local-steps"]))
    s = agent_settings(cfg)
    tokens = vln_agent.Tokens(setup.vocab, s.max_words)
    opt = torch.optim.Adam(follower.parameters(), lr=s.lr)
    rng = np.random.default_rng(a.seed)
    rows, t0 = [], time.time()
    for rnd in range(1, a.pre_rounds + 1):
        loss = vln_agent.train_batches(follower, opt, setup.world, train, tokens, s,
                                       iterations=per_round, rng=rng)
        if rnd % a.pre_eval_every == 0 or rnd == a.pre_rounds:
            m, _ = vln_agent.evaluate(follower, setup.world, val, tokens, s)
            rows.append({"round": rnd, "updates": rnd * per_round, "train_loss": loss,
                         **{f"val_unseen_{k}": v for k, v in m.items()},
                         "wall_s": time.time() - t0})
            pd.DataFrame(rows).to_csv(log_path, index=False)
            print(f"[centralized pre-exploration] round {rnd}/{a.pre_rounds} "
                  f"({per_round} updates each): unseen SR {m['sr']:.1f} SPL {m['spl']:.1f}",
                  flush=True)
    return log_path


def last_eval(path: Path, col: str) -> pd.Series | None:
    if not path.is_file():
        return None
    df = pd.read_csv(path)
    df = df[df[col].notna()] if col in df else df.iloc[0:0]
    return df.iloc[-1] if len(df) else None


def tables(a, out: Path, dest: Path) -> dict[str, pd.DataFrame]:
    suffix = f"_{a.tag}" if a.tag else ""
    cent = RESULTS / f"vln_centralized{suffix}.csv"
    cent = pd.read_csv(cent) if cent.is_file() else pd.DataFrame(columns=["model", "source"])
    ours = cent[cent["source"] == "ours"]
    rows2 = []
    for model, run in (("Envdrop", None), ("FedEnvdrop", "agent"),
                       ("Envdrop_aug", None), ("FedEnvdrop_aug", "augment")):
        for split in ("val_seen", "val_unseen"):
            if run is None:
                r = ours[(ours["model"] == model) & (ours["split"] == split)]
                vals = [r.iloc[0][k] for k in NAV] if len(r) else None
                size = f"{int(r.iloc[0]['iterations'])} it" if len(r) else ""
            else:
                last = last_eval(out / run / "rounds.csv", f"{split}_sr")
                vals = [last[f"{split}_{k}"] for k in NAV] if last is not None else None
                size = f"{int(last['round'])} rounds" if last is not None else ""
            if vals is not None:
                rows2.append({"model": model, "split": split, "source": "ours",
                              "trained": size, **dict(zip(NAV, vals))})
            rows2.append({"model": model, "split": split, "source": "paper",
                          **dict(zip(NAV, PAPER_T2[(model, split)]))})
    rows4 = []
    spk = ours[ours["model"] == "Speaker"] if "model" in ours else ours.iloc[0:0]
    if len(spk):
        rows4.append({"speaker": "Cent", "source": "ours",
                      "val_seen_bleu": spk[spk["split"] == "val_seen"].iloc[0]["bleu"],
                      "val_unseen_bleu": spk[spk["split"] == "val_unseen"].iloc[0]["bleu"]})
    if (out / "speaker" / "rounds.csv").is_file():
        df = pd.read_csv(out / "speaker" / "rounds.csv").dropna(subset=["val_seen_bleu"])
        best = df.loc[df["val_seen_bleu"].idxmax()]
        rows4.append({"speaker": "Fed", "source": "ours", "round": int(best["round"]),
                      "val_seen_bleu": best["val_seen_bleu"],
                      "val_unseen_bleu": best["val_unseen_bleu"]})
    for k, (s, u) in PAPER_T4.items():
        rows4.append({"speaker": k, "source": "paper", "val_seen_bleu": s, "val_unseen_bleu": u})
    rows5 = []
    for v in ("centralized",) + VARIANTS:
        if v == "centralized":
            last = last_eval(out / "preexplore-centralized" / "log.csv", "val_unseen_sr")
            shared, up = "data", float("nan")
        else:
            run = out / f"preexplore-{v}"
            last = last_eval(run / "rounds.csv", "val_unseen_sr")
            shared, up = "", float("nan")
            if (run / "config.json").is_file():
                c = json.loads((run / "config.json").read_text())
                shared = f"{100 * c['shared_fraction']:.1f}%" if v != "env-based" else "nothing"
                up = pd.read_csv(run / "rounds.csv")["bytes_up"].sum() / 1e6
        if last is not None:
            log = (out / "preexplore-centralized" / "log.csv" if v == "centralized"
                   else out / f"preexplore-{v}" / "rounds.csv")
            sr = pd.read_csv(log)["val_unseen_sr"].dropna()
            rows5.append({"method": v, "source": "ours", "rounds": int(last["round"]),
                          "shared": shared, "mb_up": round(up, 2),
                          **{k: last[f"val_unseen_{k}"] for k in NAV},
                          "sr_mean_last3": sr.iloc[-3:].mean()})
        vals, shared_p = PAPER_T5[v]
        rows5.append({"method": v, "source": "paper", "shared": shared_p,
                      **dict(zip(NAV, vals))})
    out_tables = {"table2": pd.DataFrame(rows2), "table4": pd.DataFrame(rows4),
                  "table5": pd.DataFrame(rows5)}
    dest.mkdir(parents=True, exist_ok=True)
    for name, t in out_tables.items():
        t.round(2).to_csv(dest / f"fedvln_{name}{suffix}.csv", index=False)
        print(f"\n{name}\n{t.round(1).to_string(index=False)}")
    plot(out, dest / f"fedvln_pipeline{suffix}.png")
    return out_tables


def plot(out: Path, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    offset = 0      # the augment stage continues from the agent stage's last round
    for stage, style in (("agent", "-"), ("augment", "--")):
        f = out / stage / "rounds.csv"
        if f.is_file():
            df = pd.read_csv(f).dropna(subset=["val_unseen_sr"])
            for split in ("val_seen", "val_unseen"):
                axes[0].plot(offset + df["round"], df[f"{split}_sr"], style, marker=".",
                             label=f"{stage} {split}")
            offset += int(pd.read_csv(f)["round"].max())
    axes[0].set(xlabel="round", ylabel="SR (%)", title="federated follower (global model)")
    axes[0].legend(fontsize=8)
    f = out / "speaker" / "rounds.csv"
    if f.is_file():
        df = pd.read_csv(f).dropna(subset=["val_seen_bleu"])
        for split in ("val_seen", "val_unseen"):
            axes[1].plot(df["round"], df[f"{split}_bleu"], marker=".", label=split)
        axes[1].legend(fontsize=8)
    axes[1].set(xlabel="round", ylabel="BLEU-4", title="federated speaker")
    for v in ("centralized",) + VARIANTS:
        f = (out / "preexplore-centralized" / "log.csv" if v == "centralized"
             else out / f"preexplore-{v}" / "rounds.csv")
        if f.is_file():
            df = pd.read_csv(f).dropna(subset=["val_unseen_sr"])
            axes[2].plot(df["round"], df["val_unseen_sr"], marker=".", label=v)
    axes[2].set(xlabel="round", ylabel="val_unseen SR (%)", title="pre-exploration")
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    a = parse_args(argv)
    for flag in ("agent_rounds", "speaker_rounds", "aug_rounds", "pre_rounds", "eval_every",
                 "pre_eval_every"):
        if getattr(a, flag) < 1:
            raise SystemExit(f"fedvln_pipeline: --{flag.replace('_', '-')} must be >= 1")
    out = Path(a.out) if a.out else ROOT / "runs" / ("fedvln" + (f"-{a.tag}" if a.tag else ""))
    run_pipeline(a, out)
    tables(a, out, Path(a.results_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
