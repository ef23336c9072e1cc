"""Centralized VLN baselines (the FedVLN paper's "Envdrop", "Envdrop_aug" and speaker "Cent"):
train the follower, the speaker, then the follower on original + speaker-augmented data, all
on pooled data in one process.

    python -m experiments.fedvln.centralized                      # embedded houses (CPU, minutes)
    python -m experiments.fedvln.centralized --data-dir ../shared/data --tag r2r   # real R2R graphs
                                                     # and instructions, semantic view features

Each stage saves `OUT/checkpoints/<stage>.pt` (reload with `models.vln_checkpoint.load`) and its
learning curve `OUT/<stage>_log.csv`; a rerun skips finished stages (`--redo` retrains).
The summary, with the paper's R2R numbers beside ours, goes to
`experiments/results/vln_centralized[_TAG].csv` and the curves to the matching `.png`.

Choices: the augmented stage starts from the follower's best val_unseen checkpoint, as the
official back-translation scripts do (`--load .../best_val_unseen`); each of its steps adds one
labelled batch (mlWeight 0.2) and one batch of sampled routes whose instructions the kept
speaker (`speaker.pt`, best val_seen route fidelity) re-writes through the batch's environmental dropout (mlWeight
0.6), as `training.vln_agent.train_batches` documents. Augmented routes are sampled in the
training houses only. Optimizers and learning rates are the CPU recipe's
(`config/fedvln_recipe.py`). The summary reports the last evaluation; the logs hold every one
(the pipeline study, experiments/fedvln/pipeline.py, reports best and last over seeds).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from config.fedvln_recipe import CPU
from contracts.fedvln import SPEAKER_SELECTION
from envs.errors import DataError
from envs.vln_houses import HouseSpec
from envs.vln_setup import open_vln
from experiments import figures
from experiments.simulate import RESULTS, ROOT, command_line
from launch.lifetime import stop_with_parent
from models import vln_checkpoint
from models.envdrop import Follower, FollowerSize, parameter_share
from models.speaker import Speaker, SpeakerSize
from training import vln_agent, vln_speaker
from training import vln_speaker_quality as quality
from training.convergence import Patience
from training.vln_house import open_house, speaker_routes
from training.vln_loop import OPTIMIZERS, make_optimizer

# FedVLN Table 2 (R2R, Envdrop rows) and Table 4 (ResNet speaker, Cent).
PAPER = {
    ("Envdrop", "val_seen"): dict(ne=4.71, osr=65.6, spl=53.2, sr=56.1, cls=66.8, ndtw=55.0),
    ("Envdrop", "val_unseen"): dict(ne=5.87, osr=52.7, spl=40.9, sr=44.5, cls=57.1, ndtw=42.3),
    ("Envdrop_aug", "val_seen"): dict(ne=3.93, osr=71.6, spl=61.0, sr=64.1, cls=71.4, ndtw=61.3),
    ("Envdrop_aug", "val_unseen"): dict(ne=5.36, osr=57.7, spl=45.8, sr=49.9, cls=59.3, ndtw=45.3),
    ("Speaker", "val_seen"): dict(bleu=33.6),
    ("Speaker", "val_unseen"): dict(bleu=30.7),
}
NAV = ["ne", "osr", "spl", "sr", "cls", "ndtw", "sdtw", "tl"]


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default="", help="R2R/Matterport folder; '' = embedded houses")
    p.add_argument("--features-tsv", default="", help="36-view feature TSV (default: semantic)")
    p.add_argument(
        "--appearance",
        type=float,
        default=0.0,
        help="each house's own look added to the semantic view features, its strength "
        "(envs/vln_appearance.py, as fedvln.appearance; 0 = off)",
    )
    p.add_argument(
        "--train-houses",
        type=int,
        default=HouseSpec.train_houses,
        help="embedded data: seen houses",
    )
    p.add_argument(
        "--unseen-houses",
        type=int,
        default=HouseSpec.unseen_houses,
        help="embedded data: unseen houses",
    )
    p.add_argument(
        "--only-house",
        default="",
        help="train on this one seen house's instructions alone (a scan name, e.g. house000): "
        "the house that does not federate, the single-house floor of "
        "experiments/privacy/fedvln_frontier.py; evaluation keeps every house",
    )
    p.add_argument("--tag", default="", help="suffix of the results files (e.g. r2r)")
    p.add_argument("--out", default="", help="run folder (default runs/vln-central[-TAG])")
    p.add_argument(
        "--stages",
        nargs="+",
        default=["agent", "speaker", "augment"],
        choices=["agent", "speaker", "augment", "augment-control"],
        help="augment-control: the augment stage's control, the same fine-tuning from the "
        "agent's best (--aug-iters, --aug-lr, patience) on the labelled data alone",
    )
    p.add_argument("--iters", type=_positive, default=3000, help="follower updates")
    p.add_argument("--speaker-iters", type=_positive, default=1500)
    p.add_argument("--aug-iters", type=_positive, default=1500)
    p.add_argument("--aug-routes", type=int, default=80, help="sampled routes per train house")
    p.add_argument("--eval-every", type=_positive, default=250)
    p.add_argument("--eval-size", type=int, default=0, help="episodes per split (0 = all)")
    p.add_argument("--batch-size", type=_positive, default=32)
    p.add_argument("--lr", type=float, default=CPU["agent"].lr, help="follower learning rate")
    p.add_argument(
        "--aug-lr",
        type=float,
        default=CPU["augment"].lr,
        help="learning rate of the augment stage, which fine-tunes the trained follower",
    )
    p.add_argument(
        "--optimizer",
        default=CPU["agent"].optimizer,
        choices=sorted(OPTIMIZERS),
        help="follower optimizer (config/fedvln_recipe.py)",
    )
    p.add_argument(
        "--speaker-lr",
        type=float,
        default=CPU["speaker"].lr,
        help="speaker learning rate (Adam, config/fedvln_recipe.py)",
    )
    p.add_argument(
        "--speaker-word-dropout",
        type=float,
        default=SpeakerSize.word_dropout,
        help="teacher-forced input words replaced by <UNK> (models/speaker.py; 0 = the "
        "official speaker)",
    )
    p.add_argument(
        "--speaker-step-skip",
        type=int,
        choices=[0, 1],
        default=int(SpeakerSize.step_skip),
        help="1: each step's panorama linearly into its context (models/speaker.py); 0: the "
        "official speaker",
    )
    p.add_argument("--feedback", default="mixed", choices=["mixed", "teacher"])
    p.add_argument("--ml-weight", type=float, default=0.2)
    p.add_argument("--max-actions", type=_positive, default=35, help="moves before an episode ends")
    p.add_argument("--embedding", type=_positive, default=64)
    p.add_argument("--hidden", type=_positive, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1, as each federated house: a run's numbers depend on it, "
        "since threads change the order floating-point sums are taken in)",
    )
    p.add_argument(
        "--patience",
        type=int,
        default=0,
        help="stop a stage once val_unseen SR (BLEU for the speaker) has not improved for this "
        "many evaluations, as fedvln.patience (0: train every iteration asked)",
    )
    p.add_argument("--redo", action="store_true", help="retrain stages already finished")
    p.add_argument("--results-dir", default=str(RESULTS), help="where the summary CSV/PNG go")
    return p.parse_args(argv)


def _subset(eps, n, seed):
    if not n or n >= len(eps):
        return eps
    idx = np.random.default_rng(seed).choice(len(eps), n, replace=False)
    return [eps[i] for i in sorted(idx)]


def train_follower(
    a, vln, model, train, evals, stage, out, tokens, settings, routes=(), back_translate=None
):
    lr, iters = (a.lr, a.iters) if stage == "agent" else (a.aug_lr, a.aug_iters)
    opt = make_optimizer(a.optimizer, model.parameters(), lr)
    rng = np.random.default_rng(a.seed)
    rows, best, t0 = [], Patience(a.patience), time.time()
    for start in range(0, iters, a.eval_every):
        n = min(a.eval_every, iters - start)
        loss = vln_agent.train_batches(
            model,
            opt,
            vln.world,
            train,
            tokens,
            settings,
            iterations=n,
            rng=rng,
            routes=routes,
            back_translate=back_translate,
        )
        row = {"iteration": start + n, "loss": loss, "wall_s": time.time() - t0}
        for split, eps in evals.items():
            m, _ = vln_agent.evaluate(model, vln.world, eps, tokens, settings)
            row.update({f"{split}_n": len(eps), **{f"{split}_{k}": v for k, v in m.items()}})
        rows.append(row)
        if best.update(row["val_unseen_sr"], row["iteration"]):  # the paper's: best unseen SR
            vln_checkpoint.save(
                out / "checkpoints" / f"{stage}_best.pt",
                model,
                vln.vocab,
                log=rows,
                best_iteration=row["iteration"],
            )
        pd.DataFrame(rows).to_csv(out / f"{stage}_log.csv", index=False)
        print(
            f"[{stage}] it {row['iteration']}/{iters} loss {loss:.3f} "
            f"seen SR {row['val_seen_sr']:.1f} SPL {row['val_seen_spl']:.1f} | "
            f"unseen SR {row['val_unseen_sr']:.1f} SPL {row['val_unseen_spl']:.1f} "
            f"({row['wall_s']:.0f} s)",
            flush=True,
        )
        if converged(best, rows, out / f"{stage}_log.csv", stage):
            break
    vln_checkpoint.save(out / "checkpoints" / f"{stage}.pt", model, vln.vocab, log=rows)
    return rows


def train_speaker(a, vln, speaker, train, evals, out, inputs):
    """The speaker stage: BLEU and route fidelity (`envs.vln_fidelity`) on both val splits at
    each evaluation; the checkpoint kept (`speaker.pt`) is the one with the best val_seen
    fidelity, not the paper's best val_unseen BLEU (a constant sentence reaches a trained
    speaker's BLEU here, issue 41; val_seen because val_unseen is what is reported). What it
    said for every val path at the kept and the last checkpoint goes to `speaker_said.csv`."""
    opt = make_optimizer(CPU["speaker"].optimizer, speaker.parameters(), a.speaker_lr)
    rng = np.random.default_rng(a.seed)
    s = vln_speaker.SpeakerSettings(batch_size=a.batch_size, lr=a.speaker_lr)
    paths = {split: quality.one_per_path(eps)[0] for split, eps in evals.items()}
    refs = {split: quality.one_per_path(eps)[1] for split, eps in evals.items()}
    rows, best, t0, said = [], Patience(a.patience), time.time(), {}
    for start in range(0, a.speaker_iters, a.eval_every):
        n = min(a.eval_every, a.speaker_iters - start)
        loss = vln_speaker.train_batches(
            speaker, opt, inputs, train, vln.vocab, s, iterations=n, rng=rng
        )
        row = {"iteration": start + n, "loss": loss, "wall_s": time.time() - t0}
        now = {}
        for split, eps in evals.items():
            row[f"{split}_bleu"] = vln_speaker.bleu(speaker, inputs, eps, vln.vocab)
            now[split] = vln_speaker.write_instructions(speaker, inputs, paths[split], vln.vocab)
            fid = quality.fidelity(vln.data, paths[split], now[split], refs[split])
            row.update({f"{split}_{k}": v for k, v in fid.items()})
        rows.append(row)
        pd.DataFrame(rows).to_csv(out / "speaker_log.csv", index=False)
        print(
            f"[speaker] it {row['iteration']}/{a.speaker_iters} loss {loss:.3f} BLEU seen "
            f"{row['val_seen_bleu']:.1f} unseen {row['val_unseen_bleu']:.1f} | fidelity seen "
            f"{row['val_seen_fidelity']:.1f} unseen {row['val_unseen_fidelity']:.1f} "
            f"({row['wall_s']:.0f} s)",
            flush=True,
        )
        if best.update(row[SPEAKER_SELECTION], row["iteration"]):
            said["best"] = now
            vln_checkpoint.save(
                out / "checkpoints" / "speaker.pt",
                speaker,
                vln.vocab,
                log=rows,
                best_iteration=row["iteration"],
                selected_by=SPEAKER_SELECTION,
            )
        said["last"] = now
        if converged(best, rows, out / "speaker_log.csv", "speaker"):
            break
    vln_checkpoint.save(out / "checkpoints" / "speaker_last.pt", speaker, vln.vocab, log=rows)
    pd.DataFrame(
        [
            r
            for ck, texts in said.items()
            for split in evals
            for r in quality.said_rows(split, paths[split], texts[split], ck)
        ]
    ).to_csv(out / "speaker_said.csv", index=False)
    return rows


def converged(best: Patience, rows: list[dict], log: Path, stage: str) -> bool:
    """Patience ran out: mark the log's last row (a rerun then counts the stage finished) and
    say when the best came."""
    if not best.stop:
        return False
    rows[-1]["converged"] = True
    pd.DataFrame(rows).to_csv(log, index=False)
    print(
        f"[{stage}] converged: no better than {best.best:.2f} (iteration {best.best_at}) "
        f"for {best.patience} evaluations",
        flush=True,
    )
    return True


def main(argv=None) -> int:
    stop_with_parent()  # a study's run ends with the study (launch/lifetime.py)
    a = parse_args(argv)
    try:  # the command is not one of `a`'s settings: stage_settings keys the stages by those
        return run(a, command_line(__file__, argv))
    except DataError as e:  # bad data folder, feature file or missing earlier stage
        print(f"vln_centralized: error: {e}", file=sys.stderr)
        return 2


# what does not change what any stage learns, and what only one stage's learning depends on
NOT_SETTINGS = {"stages", "redo", "threads", "results_dir", "out", "tag"}
ONLY = {
    "agent": {"iters", "lr", "optimizer", "feedback", "ml_weight", "max_actions"},
    "speaker": {"speaker_iters", "speaker_lr", "speaker_word_dropout", "speaker_step_skip"},
    "augment": {"aug_iters", "aug_lr", "aug_routes"},
    "augment-control": set(),  # its settings are the augment stage's, less the routes
}
USES = {
    "agent": {"agent"},
    "speaker": {"speaker"},
    "augment": {"agent", "speaker", "augment"},
    "augment-control": {"agent", "augment-control"},
}
CONTROL_FROM_AUGMENT = {"aug_iters", "aug_lr"}
CAP = {"agent": "iters", "speaker": "speaker_iters"}  # each stage's step cap; else aug_iters


def _only_cap_raised(then: dict, now: dict, stage: str) -> bool:
    """The stage's settings differ only in its own step cap, now higher."""
    key = CAP.get(stage, "aug_iters")
    rest = lambda d: {k: v for k, v in d.items() if k != key}  # noqa: E731
    return rest(then) == rest(now) and now.get(key, 0) > then.get(key, 0)


def stage_settings(a, stage: str) -> dict:
    """The command's settings that decide what `stage` learns (kept beside its log): the
    augment stage starts from the follower and back-translates with the speaker, so theirs
    count for it too."""
    other = set().union(*(ONLY[s] for s in ONLY if s not in USES[stage]))
    if stage == "augment-control":
        other -= CONTROL_FROM_AUGMENT
    kept = {k: v for k, v in sorted(vars(a).items()) if k not in NOT_SETTINGS | other}
    if not kept.get("appearance"):  # off, as in every run made before the flag: those resume
        kept.pop("appearance", None)
    else:  # which look (envs/vln_appearance.LOOK_VERSION): a run on another one is retrained
        from envs.vln_appearance import LOOK_VERSION

        kept["appearance_look"] = LOOK_VERSION
    return kept


def run(a, command: str) -> int:
    if a.lr <= 0 or a.aug_lr <= 0 or a.speaker_lr <= 0:
        print("vln_centralized: --lr, --aug-lr and --speaker-lr must be > 0", file=sys.stderr)
        return 2
    if not 0 <= a.speaker_word_dropout < 1:
        print("vln_centralized: --speaker-word-dropout must be in [0, 1)", file=sys.stderr)
        return 2
    if not 0 <= a.appearance <= 100 or (a.appearance and a.features_tsv):
        print(
            "vln_centralized: --appearance must be in [0, 100], and 0 with --features-tsv "
            "(image features have their own look)",
            file=sys.stderr,
        )
        return 2
    if a.threads < 1 or a.patience < 0:
        print("vln_centralized: --threads must be >= 1 and --patience >= 0", file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    suffix = f"_{a.tag}" if a.tag else ""
    out = Path(a.out) if a.out else ROOT / "runs" / f"vln-central{suffix.replace('_', '-')}"
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    vln = open_vln(
        a.data_dir,
        a.features_tsv,
        HouseSpec(train_houses=a.train_houses, unseen_houses=a.unseen_houses),
        a.appearance,
    )
    train = vln.split("train")
    if a.only_house:
        houses = sorted({e.scan for e in train})
        if a.only_house not in houses:
            raise DataError(
                f"--only-house {a.only_house!r} is not a seen house of {vln.source}: one of "
                f"{', '.join(houses[:5])}{', ...' if len(houses) > 5 else ''}"
            )
        train = [e for e in train if e.scan == a.only_house]
    evals = {s: _subset(vln.split(s), a.eval_size, a.seed) for s in ("val_seen", "val_unseen")}
    print(
        f"data: {vln.source}; train {len(train)} instructions in "
        f"{len({e.scan for e in train})} houses; eval {', '.join(f'{k} {len(v)}' for k, v in evals.items())}; "
        f"vocab {len(vln.vocab)}",
        flush=True,
    )
    settings = vln_agent.AgentSettings(
        batch_size=a.batch_size,
        lr=a.lr,
        feedback=a.feedback,
        ml_weight=a.ml_weight,
        max_actions=a.max_actions,
    )
    tokens = vln_agent.Tokens(vln.vocab, settings.max_words)
    inputs = vln_speaker.PathInputs(vln.world)
    fsize = FollowerSize(len(vln.vocab), vln.world.feature_dim, a.embedding, a.hidden)
    ssize = SpeakerSize(
        len(vln.vocab),
        vln.world.feature_dim,
        a.embedding,
        a.hidden,
        word_dropout=a.speaker_word_dropout,
        step_skip=bool(a.speaker_step_skip),
    )
    ck = out / "checkpoints"

    def done(stage):
        """Finished earlier with these settings: its checkpoint exists, its log reached the
        stage's length, and the settings it was trained with (`<stage>_settings.json`) are
        today's (a stage of another recipe is trained again, not reused)."""
        target = getattr(a, CAP.get(stage, "aug_iters"))
        log = out / f"{stage}_log.csv"
        if a.redo or not (ck / f"{stage}.pt").is_file() or not log.is_file():
            return False
        kept = out / f"{stage}_settings.json"
        done = pd.read_csv(log)
        stopped = "converged" in done and bool(done["converged"].fillna(False).astype(bool).any())
        then = json.loads(kept.read_text()) if kept.is_file() else None
        if then is not None and then != stage_settings(a, stage):
            # it converged at a scheduled evaluation (the cap's own, off the schedule, is one
            # a higher cap would not make): a higher cap gives the same run
            on_schedule = int(done["iteration"].max()) % a.eval_every == 0
            if stopped and on_schedule and _only_cap_raised(then, stage_settings(a, stage), stage):
                return True
            print(f"[{stage}] in {out} was trained with other settings ({kept}); training again")
            return False
        return done["iteration"].max() >= target or stopped

    finished = {stage for stage in a.stages if done(stage)}
    for stage in a.stages:
        if stage in finished:
            print(f"[{stage}] finished earlier in {out}; skipped (--redo retrains)")
        else:
            recipe = stage_settings(a, stage)
            (out / f"{stage}_settings.json").write_text(json.dumps(recipe, indent=1))
    if "agent" in a.stages and "agent" not in finished:
        follower = Follower(fsize)
        print(
            f"follower: {sum(p.numel() for p in follower.parameters()):,} parameters, "
            f"language encoder {100 * parameter_share(follower, 'lang_encoder.'):.1f}%"
        )
        train_follower(a, vln, follower, train, evals, "agent", out, tokens, settings)
    if "speaker" in a.stages and "speaker" not in finished:
        train_speaker(a, vln, Speaker(ssize), train, evals, out, inputs)
    if "augment" in a.stages and "augment" not in finished:
        for need, stage in (("speaker", "speaker"), ("agent_best", "agent")):
            if not (ck / f"{need}.pt").is_file():
                raise DataError(
                    f"{ck / need}.pt not found: the augment stage needs the "
                    f"{stage} stage first (--stages {stage} augment)"
                )
        speaker, _, _ = vln_checkpoint.load(ck / "speaker.pt")
        follower, _, _ = vln_checkpoint.load(ck / "agent_best.pt")
        routes = [
            r
            for name in sorted({e.scan for e in train})
            for r in speaker_routes(open_house(vln, name), a.aug_routes, a.seed)
        ]
        bt = vln_agent.BackTranslation(speaker, inputs, vln.vocab, settings.max_words)
        print(
            f"[augment] {len(routes)} sampled routes in the train houses, back-translated "
            f"batch by batch",
            flush=True,
        )
        train_follower(
            a,
            vln,
            follower,
            train,
            evals,
            "augment",
            out,
            tokens,
            settings,
            routes=routes,
            back_translate=bt,
        )
    if "augment-control" in a.stages and "augment-control" not in finished:
        if not (ck / "agent_best.pt").is_file():
            raise DataError(
                f"{ck / 'agent_best.pt'} not found: the augment-control stage needs the agent "
                "stage first (--stages agent augment-control)"
            )
        follower, _, _ = vln_checkpoint.load(ck / "agent_best.pt")
        train_follower(a, vln, follower, train, evals, "augment-control", out, tokens, settings)
    summarize(out, Path(a.results_dir) / f"vln_centralized{suffix}", command)
    return 0


def summarize(out: Path, dest: Path, command: str) -> None:
    """The paper-vs-ours table of the run in `out`, written to dest.csv and dest.png."""
    rows = []
    for model, stage in (("Envdrop", "agent"), ("Envdrop_aug", "augment")):
        if not (out / f"{stage}_log.csv").is_file():
            continue
        last = pd.read_csv(out / f"{stage}_log.csv").iloc[-1]
        for split in ("val_seen", "val_unseen"):
            for src, vals in (
                ("ours", {k: last[f"{split}_{k}"] for k in NAV}),
                ("paper", PAPER[(model, split)]),
            ):
                rows.append(
                    {
                        "model": model,
                        "split": split,
                        "source": src,
                        "iterations": int(last["iteration"]) if src == "ours" else None,
                        **vals,
                    }
                )
    if (out / "speaker_log.csv").is_file():
        log = pd.read_csv(out / "speaker_log.csv")
        best = log.loc[
            log[SPEAKER_SELECTION if SPEAKER_SELECTION in log else "val_seen_bleu"].idxmax()
        ]
        for split in ("val_seen", "val_unseen"):
            rows.append(
                {
                    "model": "Speaker",
                    "split": split,
                    "source": "ours",
                    "iterations": int(best["iteration"]),
                    "bleu": best[f"{split}_bleu"],
                }
            )
            rows.append(
                {"model": "Speaker", "split": split, "source": "paper", **PAPER[("Speaker", split)]}
            )
    if not rows:
        return
    table = pd.DataFrame(rows)
    dest.parent.mkdir(parents=True, exist_ok=True)
    table.round(2).to_csv(dest.with_suffix(".csv"), index=False)
    print(table.round(1).to_string(index=False))
    plot_curves(out, dest.with_suffix(".png"), command)


def plot_curves(out: Path, png: Path, command: str) -> None:
    fig, axes = figures.subplots(1, 2, figsize=(10, 3.6))
    offset = 0  # the augmented stage continues from the follower's last iteration
    for stage, style in (("agent", "-"), ("augment", "--")):
        if (out / f"{stage}_log.csv").is_file():
            log = pd.read_csv(out / f"{stage}_log.csv")
            for split in ("val_seen", "val_unseen"):
                axes[0].plot(
                    offset + log["iteration"], log[f"{split}_sr"], style, label=f"{stage} {split}"
                )
            offset += int(log["iteration"].max())
    axes[0].set(xlabel="follower updates", ylabel="SR (%)", title="follower")
    axes[0].legend(fontsize=8)
    if (out / "speaker_log.csv").is_file():
        log = pd.read_csv(out / "speaker_log.csv")
        for split in ("val_seen", "val_unseen"):
            axes[1].plot(log["iteration"], log[f"{split}_bleu"], label=split)
        axes[1].set(xlabel="iteration", ylabel="BLEU-4", title="speaker")
        axes[1].legend(fontsize=8)
    fig.tight_layout()
    figures.save(fig, png, command)


if __name__ == "__main__":
    raise SystemExit(main())
