"""Does the speaker say what the route is, and does that teach? The grounded speaker against the
official one, beside the floors a constant cannot pass (issue 41), centralized, several seeds.
The analysis of three study files (one call of `measure` per seed):

    python -m experiments.study experiments/studies/fedvln_speaker.toml           # embedded houses
    python -m experiments.study experiments/studies/fedvln_speaker_ablation.toml  # + word dropout
    python -m experiments.study experiments/studies/fedvln_speaker_r2r.toml       # real R2R

Per seed, in WORK/seed<S>/ (the file's `work`) (each resumed if finished, `experiments.fedvln.centralized`):

- `grounded/`: the follower (agent stage, till convergence), the speaker of models/speaker.py
  (the step skip; checkpoint `speaker.pt` = best val_seen route fidelity) and the
  augmented follower (Envdrop_aug, from the follower's best, back-translated by that speaker);
- `official/`: the speaker as the official code builds it (no step skip), same data, budget,
  seed and selection rule; with `variants` naming them, also `skip+word-dropout/` (word dropout 0.25 on
  top of the skip) and `word-dropout-only/` (the ablation).

Every speaker row is scored on val_seen and val_unseen, one instruction per path, at its kept
checkpoint (`best`: val_seen fidelity) and its `last`, with

- BLEU-4 against the path's references (sacrebleu, R2R tokenization);
- route fidelity (`envs.vln_fidelity`: rooms on route, entered rooms named, goal room, stop
  object, first turn, and their mean);
- `taught_sr`: the seed's follower (agent stage, best val_unseen SR) scored on the routes with
  these instructions, and `taught_ratio` = taught_sr / its SR on the true first references.

Floor rows on the same paths: `constant` (the train instruction with the best train BLEU,
written for every path), `other path` (the next path's true instruction in the same house), and
`true` (the first true reference: fidelity and SR; no BLEU, a reference is scored against the
others). The augmentation rows give the follower's best and last val_unseen SR before and after
the augment stage and after its control (the same fine-tuning without the speaker's routes),
with paired intervals over seeds.

Results: experiments/results/<name>{,_runs}.csv (mean ± sd over seeds; per seed) and
<name>_augment.csv; each speaker's words per val path stay in
WORK/seed<S>/<variant>/speaker_said.csv. `--plot-only` makes the tables again from the
committed runs CSV (nothing trains): what is computed from the runs' rows, the teaching gain.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch

from envs.vln_setup import open_vln
from experiments.function_runs import fields
from experiments.simulate import RESULTS, ROOT, run_child
from experiments.tables import mean_sd, paired_interval, pipe_table, print_from_runs, study_files
from models import vln_checkpoint
from training import vln_agent, vln_speaker
from training import vln_speaker_quality as quality

VARIANTS = {  # out folder: vln_centralized speaker flags
    "grounded": [],
    "official": ["--speaker-step-skip", "0"],
    # the ablation (fedvln_speaker_ablation.toml): word dropout on top of the skip, and alone
    "skip+word-dropout": ["--speaker-word-dropout", "0.25"],
    "word-dropout-only": ["--speaker-word-dropout", "0.25", "--speaker-step-skip", "0"],
}
STUDY = ROOT / "experiments" / "studies" / "fedvln_speaker.toml"  # the defaults other studies use
FIDELITY = [
    "rooms_on_route",
    "entered_named",
    "room_f1",
    "goal_room",
    "stop_object",
    "first_turn",
    "fidelity",
]
COLUMNS = ["bleu", *FIDELITY, "taught_sr", "taught_ratio", "taught_gain"]


def stage(a, seed: int, variant: str, *stages: str) -> list[str]:
    """`experiments.fedvln.centralized`'s arguments for one variant's stages of a seed, in
    WORK/seed<S>/<variant>."""
    out = Path(a.work) / f"seed{seed}" / variant
    return [
        *("--seed", str(seed), "--patience", str(a.patience), "--eval-every", str(a.eval_every)),
        *("--iters", str(a.agent_iters), "--speaker-iters", str(a.speaker_iters)),
        *("--aug-iters", str(a.aug_iters), "--eval-size", str(a.eval_size)),
        *("--data-dir", a.data_dir),
        *VARIANTS[variant],
        *("--stages", *stages, "--out", str(out), "--results-dir", str(out)),
    ]


def train(a, seed: int) -> Path:
    """The seed's centralized runs (resumed): follower, every speaker, augmentation.

    The follower and the speakers do not depend on each other, so with `stage-jobs` > 1 they
    train at once, each in its own `experiments.fedvln.centralized` process; the augment stage
    needs the follower and the grounded speaker and runs after them, then its control (the
    same fine-tuning from the same checkpoint on the labelled data alone), so that the gain
    of augmentation is not the gain of training further."""
    first = [
        stage(a, seed, "grounded", "agent"),
        *(stage(a, seed, v, "speaker") for v in a.variants),
    ]
    if "grounded" not in a.variants:  # the augment stage back-translates with it
        first.append(stage(a, seed, "grounded", "speaker"))
    with ThreadPoolExecutor(a.stage_jobs) as pool:
        failed = [c for c, rc in zip(first, pool.map(_centralized, first)) if rc != 0]
    for then in ("augment", "augment-control"):
        if not failed and _centralized(stage(a, seed, "grounded", then)) != 0:
            failed = [stage(a, seed, "grounded", then)]
    if failed:
        raise SystemExit(f"fedvln_speaker: the centralized stages failed: {failed[0]}")
    return Path(a.work) / f"seed{seed}"


def settings(study: Path = STUDY, **over) -> SimpleNamespace:
    """A speaker study file's settings (its grid, but the seeds and the function), `over`
    replacing some: how other studies train or find this study's models with its defaults."""
    got = fields(study) | over
    got["work"] = str(ROOT / got["work"])
    return SimpleNamespace(**got)


def follower(seed: int) -> Path:
    """The seed's centralized follower alone (the agent stage of `train` with the speaker
    study's settings, resumed if finished): its best val_unseen SR checkpoint, the global
    model other studies start from."""
    a = settings()
    if _centralized(stage(a, seed, "grounded", "agent")) != 0:
        raise SystemExit(f"fedvln_speaker: the follower of seed {seed} failed to train")
    return Path(a.work) / f"seed{seed}" / "grounded" / "checkpoints" / "agent_best.pt"


def _centralized(args: list[str]) -> int:
    """One `experiments.fedvln.centralized` run in its own process (so stages can overlap)."""
    cmd = [sys.executable, "-m", "experiments.fedvln.centralized", *args]
    return run_child(cmd).returncode


def score_seed(a, seed: int) -> pd.DataFrame:
    """The seed's rows, scored once: kept in WORK/seed<S>/scores.csv and reused while it is
    newer than every checkpoint and log it was scored from (and has every asked variant)."""
    base = train(a, seed)
    cache = base / "scores.csv"
    used = [p for v in a.variants for p in (base / v).glob("checkpoints/*.pt")]
    used += list((base / "grounded").glob("*_log.csv"))
    if cache.is_file() and all(p.stat().st_mtime < cache.stat().st_mtime for p in used):
        kept = pd.read_csv(cache, keep_default_na=False, na_values=[""])
        kept["checkpoint"] = kept["checkpoint"].fillna("")  # the floors have none
        if set(a.variants) <= set(kept.speaker):
            return kept[~kept.speaker.isin(set(VARIANTS) - set(a.variants))]
    rows = _score(a, seed, base)
    rows.to_csv(cache, index=False)
    return rows


def _score(a, seed: int, base: Path) -> pd.DataFrame:
    torch.set_num_threads(1)
    vln = open_vln(a.data_dir)
    settings = vln_agent.AgentSettings(batch_size=32)
    tokens = vln_agent.Tokens(vln.vocab, settings.max_words)
    inputs = vln_speaker.PathInputs(vln.world)
    follower, _, _ = vln_checkpoint.load(base / "grounded" / "checkpoints" / "agent_best.pt")
    constant = quality.best_constant(vln.split("train"), seed)
    rows = []
    for split in ("val_seen", "val_unseen"):
        paths, refs = quality.one_per_path(vln.split(split))
        true_sr = quality.teaching(
            follower, vln.world, paths, [p.instruction for p in paths], tokens, settings
        )

        def row(name, checkpoint, hyps, with_bleu=True):
            sr = quality.teaching(follower, vln.world, paths, hyps, tokens, settings)
            return {
                "seed": seed,
                "speaker": name,
                "checkpoint": checkpoint,
                "split": split,
                "bleu": quality.corpus_bleu(hyps, paths, refs).score if with_bleu else np.nan,
                **quality.fidelity(vln.data, paths, hyps, refs),
                "taught_sr": sr,
                "taught_ratio": sr / true_sr if true_sr else np.nan,
            }

        rows.append(row("true", "", [p.instruction for p in paths], with_bleu=False))
        rows.append(row("constant", "", [constant] * len(paths)))
        rows.append(row("other path", "", quality.other_path(paths)))
        for variant in a.variants:
            for ck, file in (("best", "speaker.pt"), ("last", "speaker_last.pt")):
                speaker, _, _ = vln_checkpoint.load(base / variant / "checkpoints" / file)
                hyps = vln_speaker.write_instructions(speaker, inputs, paths, vln.vocab)
                rows.append(row(variant, ck, hyps))
        print(f"  seed {seed} {split}: scored (follower SR on true {true_sr:.1f})", flush=True)
    for stage in ("agent", "augment", "augment-control"):
        log = pd.read_csv(base / "grounded" / f"{stage}_log.csv")
        for ck, r in (("best", log.loc[log.val_unseen_sr.idxmax()]), ("last", log.iloc[-1])):
            rows.append(
                {
                    "seed": seed,
                    "speaker": f"follower:{stage}",
                    "checkpoint": ck,
                    "split": "val_unseen",
                    "taught_sr": float(r["val_unseen_sr"]),
                    "iteration": int(r["iteration"]),
                }
            )
    return pd.DataFrame(rows)


def summarize(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    spk = quality.with_teaching_gain(runs[~runs.speaker.str.startswith("follower:")])
    table = []
    groups = spk.fillna({"checkpoint": ""}).groupby(["speaker", "checkpoint", "split"], sort=False)
    for (name, ck, split), g in groups:
        table.append(
            {
                "speaker": name,
                "checkpoint": ck,
                "split": split,
                "seeds": g.seed.nunique(),
                **{
                    c: mean_sd(g[c], 2 if c.startswith("taught_") and c != "taught_sr" else 1)
                    if g[c].notna().any()
                    else ""
                    for c in COLUMNS
                },
            }
        )
    fol = runs[runs.speaker.str.startswith("follower:")].pivot_table(
        index="seed", columns=["speaker", "checkpoint"], values="taught_sr"
    )
    aug = []
    for ck in ("best", "last"):
        before, after = fol[("follower:agent", "best")], fol[("follower:augment", ck)]
        row = {
            "augmented checkpoint": ck,
            "seeds": len(fol),
            "start (agent best) val_unseen SR": mean_sd(before),
            "Envdrop_aug val_unseen SR": mean_sd(after),
            "gain": _interval(after, before),
            "within noise": _within(after, before),
        }
        if ("follower:augment-control", ck) in fol:  # runs made before the control have none
            control = fol[("follower:augment-control", ck)]
            row |= {
                "control (no augmentation) val_unseen SR": mean_sd(control),
                "gain over control": _interval(after, control),
                "over control within noise": _within(after, control),
            }
        aug.append(row)
    return pd.DataFrame(table), pd.DataFrame(aug)


def _interval(a: pd.Series, b: pd.Series) -> str:
    """Mean paired difference a - b over seeds with its 95% interval."""
    gain, lo, hi = paired_interval(a, b)
    return f"{gain:+.1f} [{lo:+.1f}, {hi:+.1f}]"


def _within(a: pd.Series, b: pd.Series) -> bool:
    _, lo, hi = paired_interval(a, b)
    return bool(lo <= 0 <= hi)


SHOWN = {
    "bleu": "BLEU-4",
    "rooms_on_route": "rooms on route",
    "entered_named": "entered rooms named",
    "room_f1": "room F1",
    "goal_room": "goal room",
    "stop_object": "stop object",
    "first_turn": "first turn",
    "fidelity": "route fidelity",
    "taught_sr": "follower SR on its words",
    "taught_ratio": "/ SR on true words",
    "taught_gain": "(its SR - constant's) / (true's - constant's)",
}


def markdown(table: pd.DataFrame, split: str = "") -> str:
    """The speaker table as the README and docs show it (`split` "": both splits)."""
    t = table.fillna("")
    if split:
        t = t[t.split == split]
    head = ["speaker", "checkpoint", "split", "seeds", *SHOWN.values()]
    rows = t[["speaker", "checkpoint", "split", "seeds", *SHOWN]].values.tolist()
    return pipe_table(head, rows)


def markdown_augment(aug: pd.DataFrame) -> str:
    return pipe_table(list(aug.columns), aug.values.tolist())


def measure(
    seed: int,
    variants: list[str],
    stage_jobs: int,
    patience: int,
    eval_every: int,
    agent_iters: int,
    speaker_iters: int,
    aug_iters: int,
    data_dir: str,
    eval_size: int,
    work: Path,
) -> list[dict]:
    """One cell of a speaker study: the seed's centralized runs (trained or resumed in
    WORK/seed<S>/, experiments.fedvln.centralized), scored. The fields, as the study files
    give them: `variants` the speakers compared (the grounded one's follower is always
    trained: it scores what each speaker teaches); `stage-jobs` how many of the follower and
    speaker trainings run at once; `patience` evaluations without a better score, every
    `eval-every` updates; the caps `agent-iters`, `speaker-iters` and `aug-iters`; `data-dir`
    the R2R/Matterport folder ("" = the embedded houses), passed to every stage as written
    (it is part of each stage's fingerprint); `eval-size` episodes per split in the
    training-time evaluations (0 = all; the scores always use every val path)."""
    a = SimpleNamespace(**{k: v for k, v in locals().items() if k != "seed"})
    return score_seed(a, seed).to_dict("records")  # fmt: skip


def check(cell: dict, where) -> None:
    """A speaker study's values, before anything trains (one line naming the file and field)."""
    bad = [v for v in cell["variants"] if v not in VARIANTS]
    if bad or not cell["variants"]:
        raise ValueError(f"{where}: grid.variants: some of {', '.join(VARIANTS)} (not {bad})")
    caps = ("stage-jobs", "eval-every", "agent-iters", "speaker-iters", "aug-iters")
    for key in caps:
        if not cell[key] > 0:
            raise ValueError(f"{where}: grid.{key}: must be > 0")
    for key in ("patience", "eval-size"):
        if cell[key] < 0:
            raise ValueError(f"{where}: grid.{key}: must be >= 0")
    if cell["data-dir"] and not (ROOT / cell["data-dir"]).is_dir():
        raise ValueError(f"{where}: grid.data-dir: {cell['data-dir']}: no such folder")


def outputs(study: dict) -> list[Path]:
    return [*study_files(RESULTS, study["name"])[:2], RESULTS / f"{study['name']}_augment.csv"]


def report(runs: pd.DataFrame, study: dict, command: str) -> str:
    """The speaker table and the augmentation table, from every seed's rows (written)."""
    files = outputs(study)
    table, aug = summarize(runs)
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.to_csv(files[0], index=False)
    runs.round(3).to_csv(files[1], index=False)
    aug.to_csv(files[2], index=False)
    return f"{markdown(table)}\n\n{markdown_augment(aug)}"


def replot(study: dict) -> int:
    """`--plot-only`: the tables again from the committed runs CSV, printed (this study draws
    no figure; nothing trains, nothing is written: the runs CSV keeps 3 decimals, so a ratio's
    mean ± sd made from it may differ from the committed table's by 0.01)."""

    def tables(runs: pd.DataFrame) -> str:
        table, aug = summarize(runs.fillna({"checkpoint": ""}))
        return f"{markdown(table)}\n\n{markdown_augment(aug)}"

    return print_from_runs(outputs(study)[1], tables)
