"""FedVLN's whole pipeline over several seeds, with the centralized baselines at an equal number
of local updates, and the paper's Tables 2, 4, 5 and 9 (paper numbers beside ours). The analysis
of four study files (one call of `measure` per seed; its docstring says every field):

    python -m experiments.study experiments/studies/fedvln_pipeline.toml    # embedded houses
    python -m experiments.study experiments/studies/fedvln_pipeline_r2r.toml          # R2R
    python -m experiments.study experiments/studies/fedvln_pipeline_r2r-speaker.toml  # R2R speaker
    python -m experiments.study experiments/studies/fedvln_pipeline_appearance.toml   # Table 5, a look

Per seed, in WORK/seed<S>/ (each federated stage is `python simulation.py fedvln --stage ...`
in Flower's simulation engine):

1. `agent` -> `speaker` -> `augment` (from the agent's best.pt, with the speaker's best.pt) ->
   `preexplore-<variant>` for env-based, fed-full, fed-lan, fed-lan+seen (from the augmented
   agent's best.pt, as the official pre-exploration scripts load `agent_bt_.../best_val_unseen`);
   `augment-control`: augment's control, the same restart from the agent's best.pt, patience
   and cap without speaker routes (`fedvln.aug-routes=0`), so that what augmentation gains is
   not mixed with what fine-tuning again gains.
2. `central/`: centralized Envdrop, speaker, Envdrop_aug and its control
   (`experiments.fedvln.centralized`) with
   exactly as many optimizer steps as the federated stage made in all houses together (read from
   the federated `rounds.csv`), evaluated at the same step counts.
3. `preexplore-centralized/`: one follower on every unseen house's routes pooled (non-private),
   back-translated by the same speaker, with as many steps per round as env-based makes.
4. Table 5's two controls (issue 64), beside the variants: `preexplore-env-based@other`, each
   unseen house adapting env-based on the next unseen house's routes and scored in its own
   (`fedvln.routes-house="next-unseen"`: the gain from *this* house, told from the gain from
   any adaptation), and `preexplore-env-based@r1`, env-based with each house training at the
   federated variants' r1 (`fedvln.env-based-rate`), so that it makes their updates per house
   (env-based otherwise trains every house every round: twice a federated house's updates at
   r1 = 0.6 of 4 houses). Table 5 says, per row, how many seeds stopped at the round cap.

`stages = ["preexplore"]` with `start-models = 'DIR/{seed}'` runs Table 5 alone from a given follower
(`agent_best.pt`) and speaker (`speaker.pt`), e.g. the centralized ones of the appearance study
(issue 41: with `extra-config = "fedvln.appearance=1"` there is a seen/unseen gap to close); the
start row is then that follower scored once on val_unseen (`start/log.csv`).

Budgets: by default every stage trains till convergence, as the paper trains all its models
(`patience = 8`; `patience = 0` gives fixed budgets, the *-rounds, with the centralized
stages step-matched to each federated stage). With `patience` P:
a federated stage stops once val_unseen SR (val_seen route fidelity for the speaker,
`contracts.fedvln.SPEAKER_SELECTION`) has not improved for P evaluations (`fedvln.patience`),
its *-rounds the cap; the centralized stage stops by the same rule (`vln_centralized
--patience P`), evaluated every as many *sequential* optimizer steps as one federated
evaluation interval (`central_every`: the same steps and the same number of noisy draws),
under a cap of the federated stage's mean steps per round times that round cap; centralized pre-exploration makes as
many steps per round as env-based, capped at `pre-rounds`, and stops by the same rule.
Why 8 evaluations (24 rounds at the default `eval-every` 3): one evaluation's SR has a
standard error of about 2 points on the embedded houses, and with 4 every agent run stopped on
noise within 21-30 rounds (experiments/fedvln/gap.py).

Every stage resumes: a finished (or converged) one is skipped on rerun, an interrupted one goes
on from its last finished round (augment and pre-exploration too: each house keeps the speaker
and routes of the stage's setup on its own disk). Checkpoints reported (the paper's
convention, and the last): `best` is the evaluation with the highest val_unseen SR (BLEU for the
speaker), all other metrics from that same evaluation; `last` is the final evaluation. Tables
give mean, sd and n over seeds, and `se_eval`, the binomial standard error of one SR evaluation
(sqrt(p (1 - p) / n_episodes)), so a reader can tell what is within noise. The figure is drawn
from the curves CSV the study writes beside the tables (`<name>_runs.csv`: every run's
evaluations, seed by seed), so `--plot-only` redraws it without the run folders.

Table 9 counts optimizer steps summed over houses until the first evaluation at or above a
target SR. The paper's targets (44% seen training, 62% pre-exploration on R2R) do not transfer;
ours are 90% of the way from the starting SR (0 for seen training, the augmented agent's for
pre-exploration) to the lowest mean best SR among the compared methods, so each reaches it; if
some method's mean best is not above the start, to the highest mean best instead (methods that
never get there show as not reaching it); if none beats the start there is no target.
"""

from __future__ import annotations

import json
import math
import sys
import time
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch

from config import parse
from config.fedvln import STAGES, VARIANTS
from config.fedvln_recipe import recipe_of
from config.schema import merged, parse_overrides
from contracts.fedvln import SPEAKER_SELECTION, follower_size, speaker_size
from experiments import figures
from experiments.fedvln import centralized as vln_centralized
from experiments.fedvln import gains as fedvln_gains
from experiments.fedvln.runs import (
    BUDGET_CONTROL,
    HOUSE_CONTROL,
    at_cap,
    curve,
    pick,
    seed_dirs,
    summary,
)
from experiments.fedvln.teaching import teaching
from experiments.function_runs import fields
from experiments.simulate import (
    RESEARCH_POLICY,
    RESULTS,
    ROOT,
    path_digest,
    simulate,
)
from experiments.tables import se_eval
from models import vln_checkpoint
from models.envdrop import Follower
from models.speaker import Speaker
from strategies.screened_fedavg import sample_size
from training import vln_agent, vln_speaker
from training import vln_speaker_quality as quality
from training.convergence import Patience
from training.vln_house import (
    follower_steps,
    house_names,
    open_house,
    setup_of,
    speaker_routes,
)
from training.vln_loop import make_optimizer
from training.vln_said import write_said

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
PAPER_T4 = {"Cent": (33.6, 30.7), "Fed": (31.7, 31.9)}  # ResNet speaker BLEU seen, unseen
T4_METRICS = ["val_seen_bleu", "val_unseen_bleu", "val_seen_fidelity", "val_unseen_fidelity"]
# issue 41's targets (val_unseen): rooms on route >= 70, goal room >= 60, stop object >= 50
T4_PARTS = [f"val_unseen_{k}" for k in ("rooms_on_route", "goal_room", "stop_object")]
T4_TAUGHT = [f"{s}_taught_{k}" for s in ("val_seen", "val_unseen") for k in ("sr", "ratio")]
PAPER_T5 = {  # Envdrop rows, R2R val_unseen; shared share of parameters
    "centralized": ([3.89, 73.7, 61.7, 64.8, 71.5, 64.6], "data"),
    "env-based": ([3.49, 78.5, 64.0, 67.4, 73.2, 67.5], "nothing"),
    "fed-full": ([3.96, 74.1, 59.1, 62.4, 70.9, 63.3], "100%"),
    "fed-lan": ([3.52, 77.6, 63.6, 67.2, 73.2, 67.6], "24.6%"),
    "fed-lan+seen": ([3.47, 78.1, 64.8, 68.3, 73.5, 67.3], "24.6%"),
}
# Table 5's runs: centralized, the paper's variants, the held-out-house and the budget controls
PRE_RUNS = ("centralized", *VARIANTS, HOUSE_CONTROL, BUDGET_CONTROL)
PAPER_T9 = {  # optimizer steps (x 10^2) to 44% (seen training) / 62% (pre-exploration), R2R
    ("seen", "centralized"): 356,
    ("seen", "federated"): 825,
    ("preexplore", "centralized"): 105,
    ("preexplore", "env-based"): 7,
    ("preexplore", "fed-full"): 97,
    ("preexplore", "fed-lan+seen"): 13,
}


def stage_patience(a, stage: str) -> int:
    """The stage's patience in evaluations: `speaker-patience` for the speaker (0 with fixed
    budgets), `patience` for the rest."""
    return a.speaker_patience if stage == "speaker" and a.patience else a.patience


def stage_config(a, stage: str, extra: str = "") -> str:
    every = a.pre_eval_every if stage == "preexplore" else a.eval_every
    patience = stage_patience(a, stage)
    items = [f'fedvln.stage="{stage}"', f"eval-every={every}", f"fedvln.patience={patience}"]
    if stage == "speaker":
        items.append(f"fedvln.seen-rate={a.speaker_seen_rate}")
        items.append(f"fedvln.server-lr={a.speaker_server_lr}")
    if a.data_dir:
        items.append(f'fedvln.data-dir="{Path(a.data_dir).resolve()}"')
    return " ".join(items + [extra, a.extra_config]).strip()


def _stage(a, run: Path, rounds: int, seed: int, config: str) -> None:
    """One federated stage: skipped if finished (all its rounds, or converged before the cap),
    resumed from its last finished round if interrupted (experiments/simulate.simulate; the
    houses keep a stage's setup on their disks)."""
    # fed-full (Table 5's whole-model baseline) shares more than a house's default policy lets
    # out in pre-exploration: the researcher who operates every house allows it for this study
    policy = RESEARCH_POLICY if "fed-full" in run.name else None
    simulate("fedvln", run, rounds=rounds, seed=seed, run_config=config, policy=policy)


def run_seed(a, out: Path, seed: int) -> None:
    """Every stage asked for (`stages`), federated then centralized, and the floor."""
    if "agent" in a.stages:
        _stage(a, out / "agent", a.agent_rounds, seed, stage_config(a, "agent"))
    if "speaker" in a.stages:
        _stage(a, out / "speaker", a.speaker_rounds, seed, stage_config(a, "speaker"))
        write_said(out / "speaker")
    spk = f'fedvln.speaker-init="{out / "speaker" / "best.pt"}"'
    agent = f'fedvln.agent-init="{out / "agent" / "best.pt"}"'
    pre_agent = out / "augment" / "best.pt"
    if a.start_models:
        ck = start_folder(a, seed)
        spk = f'fedvln.speaker-init="{ck / "speaker.pt"}"'
        pre_agent = ck / "agent_best.pt"
    if "augment" in a.stages:
        routes = "" if a.aug_routes is None else f" fedvln.aug-routes={a.aug_routes}"
        aug = stage_config(a, "augment", f"{agent} {spk}{routes}")
        _stage(a, out / "augment", a.aug_rounds, seed, aug)
        # augmentation's control: the same restart, patience and cap without speaker routes
        ctl = f"{agent} fedvln.aug-routes=0"
        _stage(a, out / "augment-control", a.aug_rounds, seed, stage_config(a, "augment", ctl))
    pre = f'fedvln.agent-init="{pre_agent}" {spk}'
    for v in VARIANTS if "preexplore" in a.stages else ():
        _stage(
            a,
            out / f"preexplore-{v}",
            a.pre_rounds,
            seed,
            stage_config(a, "preexplore", f'{pre} fedvln.variant="{v}"'),
        )
    if "preexplore" in a.stages:  # Table 5's controls: another house's routes; r1's budget
        env = f'{pre} fedvln.variant="env-based"'
        r1 = parse(merged(parse_overrides(stage_config(a, "preexplore")))).fedvln.unseen_rate
        for name, extra in (
            (HOUSE_CONTROL, 'fedvln.routes-house="next-unseen"'),
            (BUDGET_CONTROL, f"fedvln.env-based-rate={r1}"),
        ):
            _stage(
                a,
                out / _pre_run(name),
                a.pre_rounds,
                seed,
                stage_config(a, "preexplore", f"{env} {extra}"),
            )
    centralized(a, out, seed)
    if "preexplore" in a.stages:
        centralized_preexplore(a, out, seed)
        if a.start_models:
            start_eval(out)
    floor(out, seed)


def start_folder(a, seed: int) -> Path:
    """The seed's folder of `start-models`, refused if it lacks the follower or speaker."""
    ck = (ROOT / a.start_models.format(seed=seed)).resolve()
    missing = [f for f in ("agent_best.pt", "speaker.pt") if not (ck / f).is_file()]
    if missing:
        raise ValueError(
            f"grid.start-models: {ck} has no {', '.join(missing)} (the study file's comment "
            "says how they are made)"
        )
    return ck


def start_eval(out: Path) -> None:
    """Where pre-exploration starts when it starts from `start-models` (there is no augment
    run to read it from): the start follower scored once on val_unseen with the env-based
    run's houses and settings, as a one-evaluation run `start/log.csv`, remade if the
    checkpoint changed."""
    c = parse(json.loads((out / "preexplore-env-based" / "config.json").read_text()))
    dest, made = out / "start" / "log.csv", {"agent": path_digest(c.fedvln.agent_init)}
    kept = out / "start" / "starts.json"
    if dest.is_file() and kept.is_file() and json.loads(kept.read_text()) == made:
        return
    setup = setup_of(c)
    follower, _, _ = vln_checkpoint.load(c.fedvln.agent_init)
    s = vln_agent.AgentSettings.of(c)
    val = [e for h in house_names(setup)[1] for e in open_house(setup, h).val]
    m, _ = vln_agent.evaluate(
        follower, setup.world, val, vln_agent.Tokens(setup.vocab, s.max_words), s
    )
    row = {
        "round": 0,
        "steps": 0,
        "val_unseen_n": len(val),
        **{f"val_unseen_{k}": v for k, v in m.items()},
    }
    dest.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([row]).to_csv(dest, index=False)
    kept.write_text(json.dumps(made))


def start_curve(out: Path) -> pd.DataFrame | None:
    """Where this seed's pre-exploration starts: the augmented agent, or `start-models`."""
    aug = curve(out, "augment")
    return aug if aug is not None else curve(out, "start")


# what the floors are made from: a rerun into the same folder with other data, features or
# sizes makes them again (the federated and centralized stages are retrained too)
FLOOR_FROM = ("fedvln.data-dir", "fedvln.features-tsv", "fedvln.appearance",
              "fedvln.train-houses", "fedvln.unseen-houses", "fedvln.embedding", "fedvln.hidden",
              "seed")  # fmt: skip


def floor(out: Path, seed: int) -> None:
    """The floor row of Tables 2, 4 and 5: an untrained follower and speaker (this seed's
    initialisation, the run's sizes) scored on every house's validation split, written as a
    one-evaluation run `untrained/log.csv`."""
    dest, made = out / "untrained" / "log.csv", out / "untrained" / "made_from.json"
    configs = [out / s / "config.json" for s in ("agent", "speaker")]
    configs = [f for f in configs if f.is_file()]
    if not configs:
        return
    cfg = json.loads(configs[0].read_text())
    now = {k: cfg.get(k) for k in FLOOR_FROM}
    then = json.loads(made.read_text()) if made.is_file() else None
    # floors made before `made_from.json` existed were made without an added look
    same = then == now if then is not None else not now["fedvln.appearance"]
    if same and dest.is_file() and (out / "other-path" / "log.csv").is_file():
        return
    c = parse(cfg)
    setup = setup_of(c)
    if same and dest.is_file():  # made before the speaker floors existed
        speaker_floors(out, setup, seed)
        return
    v, f = len(setup.vocab), setup.world.feature_dim
    torch.manual_seed(seed)
    follower, speaker = Follower(follower_size(c, v, f)), Speaker(speaker_size(c, v, f))
    s = vln_agent.AgentSettings.of(c)
    tokens, row = vln_agent.Tokens(setup.vocab, s.max_words), {"round": 0, "steps": 0}
    for split in ("val_seen", "val_unseen"):
        eps = setup.split(split)
        m, _ = vln_agent.evaluate(follower, setup.world, eps, tokens, s)
        row.update(
            {
                f"{split}_n": len(eps),
                **{f"{split}_{k}": x for k, x in m.items()},
                f"{split}_bleu": vln_speaker.bleu(
                    speaker, vln_speaker.PathInputs(setup.world), eps, setup.vocab
                ),
            }
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([row]).to_csv(dest, index=False)
    made.write_text(json.dumps(now))
    speaker_floors(out, setup, seed)


def speaker_floors(out: Path, setup, seed: int) -> None:
    """Table 4's floor rows a trained speaker must beat (issue 41), as one-evaluation runs
    `constant/log.csv` and `other-path/log.csv`: the train instruction with the best train
    BLEU written for every path, and the next path's true instruction in the same house, with
    BLEU and route fidelity on both val splits."""
    constant = quality.best_constant(setup.split("train"), seed)
    for run, write in (
        ("constant", lambda paths: [constant] * len(paths)),
        ("other-path", quality.other_path),
    ):
        row = {"round": 0, "steps": 0}
        for split in ("val_seen", "val_unseen"):
            paths, refs = quality.one_per_path(setup.split(split))
            hyps = write(paths)
            row[f"{split}_bleu"] = quality.corpus_bleu(hyps, paths, refs).score
            fid = quality.fidelity(setup.data, paths, hyps, refs)
            row.update({f"{split}_{k}": v for k, v in fid.items()})
        (out / run).mkdir(parents=True, exist_ok=True)
        pd.DataFrame([row]).to_csv(out / run / "log.csv", index=False)


def _eval_steps(rounds_csv: Path, col: str) -> list[int]:
    """Cumulative optimizer steps (all houses) at each evaluated round of a federated run."""
    df = pd.read_csv(rounds_csv)
    df = df[df["round"] > 0]
    df["steps"] = df["local_steps"].fillna(0).cumsum()
    col = col if col in df else "val_unseen_bleu"  # a speaker run from before issue 41
    return [int(x) for x in df.loc[df[col].notna(), "steps"]]


def _central_steps(rounds_csv: Path, fed_steps: int, cap_rounds: int, patience: int) -> int:
    """The centralized stage's step budget: the federated stage's summed steps (fixed budgets),
    or, training till convergence, its cap: the federated stage's mean steps per round times
    its round cap, so both stop by patience under the same ceiling."""
    if not patience:
        return fed_steps
    ran = int(pd.read_csv(rounds_csv)["round"].max())
    return int(np.ceil(fed_steps / max(ran, 1) * cap_rounds))


def central_every(patience: int, every: int, cfg: dict) -> int:
    """The centralized stages' evaluation interval in optimizer steps, so that the same rule
    stops both sides (issue 41). A federated evaluation comes every E rounds of S local steps in
    each of H houses at once, and its patience is P evaluations: P * E * S *sequential* steps and
    P noisy draws. The centralized run, evaluated every E * S steps with the same P, spends the
    same sequential steps and the same number of draws. (Evaluating it at the federated summed
    counts, E * S * H, with P / H patience matched the steps but gave it half the draws: with
    P = 8 and 2 houses per round, Envdrop stopped on noise at 26.4 ± 6.7 SR after 1,116 steps.)
    Fixed budgets (P = 0) keep the federated evaluation points, `every` summed steps."""
    if patience <= 0:
        return every
    c = parse(cfg)
    n_seen = len(house_names(setup_of(c))[0])
    houses = sample_size(n_seen, recipe_of(c.fedvln).seen_rate)
    return max(1, math.ceil(every / houses))


def centralized(a, out: Path, seed: int) -> None:
    """Envdrop, speaker and Envdrop_aug on pooled data, step for step with the federated runs:
    each stage's cap is its federated stage's summed steps (per round, times the round cap),
    and it stops by that stage's rule (`central_every`: its patience over as many sequential
    steps; fixed budgets: at the federated evaluation points). One `vln_centralized` call per
    stage, since the speaker's patience and interval differ from the follower's."""
    stages = [s for s in ("agent", "speaker", "augment") if s in a.stages]
    if not stages:
        return
    steps = {
        s: _eval_steps(
            out / s / "rounds.csv", SPEAKER_SELECTION if s == "speaker" else "val_unseen_sr"
        )
        for s in stages
    }
    caps = {"agent": a.agent_rounds, "speaker": a.speaker_rounds, "augment": a.aug_rounds}
    iters = {
        s: _central_steps(out / s / "rounds.csv", v[-1], caps[s], stage_patience(a, s))
        for s, v in steps.items()
    }
    flags = {"agent": "--iters", "speaker": "--speaker-iters", "augment": "--aug-iters"}
    # augmentation's control: the augment stage's budget and rule, without routes
    runs = [(s, s) for s in stages] + [("augment", "augment-control")] * ("augment" in stages)
    for stage, central_stage in runs:
        cfg = json.loads((out / stage / "config.json").read_text())
        every = max(1, steps[stage][-1] // max(1, len(steps[stage])))  # summed steps per eval
        patience = stage_patience(a, stage)
        _central_stage(
            a,
            out,
            seed,
            cfg,
            [
                "--stages",
                central_stage,
                *[x for s in stages for x in (flags[s], str(iters[s]))],
                "--patience",
                str(patience),
                "--eval-every",
                str(central_every(patience, every, cfg)),
            ],
        )


def _central_stage(a, out: Path, seed: int, cfg: dict, args: list[str]) -> None:
    """One `vln_centralized` call with the model and data settings of the federated runs."""
    args = [
        *args,
        "--aug-routes",
        str(cfg["fedvln.aug-routes"]),
        "--seed",
        str(seed),
        "--threads",
        "1",  # as each house (client-threads = 1): the numbers depend on the thread count
        "--out",
        str(out / "central"),
        "--results-dir",
        str(out / "central"),
        "--embedding",
        str(cfg["fedvln.embedding"]),
        "--hidden",
        str(cfg["fedvln.hidden"]),
        "--batch-size",
        str(cfg["fedvln.batch-size"]),
        "--train-houses",
        str(cfg["fedvln.train-houses"]),
        "--unseen-houses",
        str(cfg["fedvln.unseen-houses"]),
        "--speaker-word-dropout",  # the federated speaker's (0 in runs from before the key)
        str(cfg.get("fedvln.speaker-word-dropout", 0.0)),
    ]
    data_dir = a.data_dir or cfg.get("fedvln.data-dir", "")  # extra-config may name it
    if data_dir:
        args += ["--data-dir", str(Path(data_dir).resolve())]
    if cfg.get("fedvln.features-tsv"):
        args += ["--features-tsv", str(Path(cfg["fedvln.features-tsv"]).resolve())]
    args += ["--appearance", str(cfg.get("fedvln.appearance", 0.0))]
    if vln_centralized.main(args) != 0:
        raise SystemExit(f"centralized baselines failed in {out / 'central'}")


def finished_from(dest: Path, starts: dict, rounds: int) -> bool:
    """Centralized pre-exploration in `dest` ran all `rounds` (or converged) from these very
    checkpoints (`starts`: their digests): one made from an earlier agent or speaker at the
    same paths is trained again."""
    log_path, kept = dest / "log.csv", dest / "starts.json"
    if not log_path.is_file() or not kept.is_file() or json.loads(kept.read_text()) != starts:
        return False
    done = pd.read_csv(log_path)
    return bool(done["round"].max() >= rounds or done.get("converged", pd.Series()).any())


def centralized_preexplore(a, out: Path, seed: int) -> Path:
    """One follower on every unseen house's routes pooled (non-private), from the same
    augmented agent, back-translated by the same speaker, with the recipe's optimizer (kept
    across rounds or fresh each round, as `fedvln.optimizer-state` has the houses do) and as
    many steps per round as env-based makes in all houses together."""
    dest = out / "preexplore-centralized"
    log_path = dest / "log.csv"
    cfg = json.loads((out / "preexplore-env-based" / "config.json").read_text())
    c = parse(cfg)
    starts = {
        "agent": path_digest(c.fedvln.agent_init),
        "speaker": path_digest(c.fedvln.speaker_init),
    }
    if finished_from(dest, starts, a.pre_rounds):
        return log_path
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "starts.json").write_text(json.dumps(starts, indent=1))
    torch.manual_seed(seed)
    setup = setup_of(c)
    follower, _, _ = vln_checkpoint.load(c.fedvln.agent_init)
    speaker, _, _ = vln_checkpoint.load(c.fedvln.speaker_init)
    houses = [open_house(setup, h) for h in house_names(setup)[1]]
    routes, val, per_round = [], [], 0
    for h in houses:
        mine = speaker_routes(h, c.fedvln.preexplore_routes, c.run.seed)
        routes += mine
        val += h.val
        per_round += follower_steps(
            0,
            len(mine),
            c.fedvln.preexplore_epochs,
            c.fedvln.batch_size,
            c.fedvln.max_local_steps,
        )
    s = vln_agent.AgentSettings.of(c)
    tokens = vln_agent.Tokens(setup.vocab, s.max_words)
    bt = vln_agent.BackTranslation(
        speaker, vln_speaker.PathInputs(setup.world), setup.vocab, s.max_words
    )
    r = recipe_of(c.fedvln)
    rng = np.random.default_rng(seed)
    rows, t0, best = [], time.time(), Patience(a.patience)  # the federated stages' rule
    opt = make_optimizer(r.optimizer, follower.parameters(), r.lr)
    for rnd in range(1, a.pre_rounds + 1):
        if c.fedvln.optimizer_state == "round":  # as the houses do: fresh, or kept
            opt = make_optimizer(r.optimizer, follower.parameters(), r.lr)
        loss = vln_agent.train_batches(
            follower,
            opt,
            setup.world,
            [],
            tokens,
            s,
            iterations=per_round,
            rng=rng,
            routes=routes,
            back_translate=bt,
        )
        if rnd % a.pre_eval_every == 0 or rnd == a.pre_rounds:
            m, _ = vln_agent.evaluate(follower, setup.world, val, tokens, s)
            rows.append(
                {
                    "round": rnd,
                    "local_steps_cum": rnd * per_round,
                    "train_loss": loss,
                    "val_unseen_n": len(val),
                    **{f"val_unseen_{k}": v for k, v in m.items()},
                    "wall_s": time.time() - t0,
                }
            )
            best.update(m["sr"], rnd)
            rows[-1]["converged"] = best.stop
            pd.DataFrame(rows).to_csv(log_path, index=False)
            print(
                f"[centralized pre-exploration] round {rnd}/{a.pre_rounds} "
                f"({per_round} steps each): unseen SR {m['sr']:.1f} SPL {m['spl']:.1f}",
                flush=True,
            )
            if best.stop:
                break
    return log_path


def table2(dirs: dict[int, Path], stages=STAGES) -> pd.DataFrame:
    rows = []
    models = [("untrained (floor)", "untrained"), ("Envdrop", "central/agent")]
    models += [("FedEnvdrop", "agent")]
    if "augment" in stages:
        models += [("Envdrop_aug", "central/augment"), ("FedEnvdrop_aug", "augment")]
        models += [
            ("Envdrop, fine-tuned again (control)", "central/augment-control"),
            ("FedEnvdrop, fine-tuned again (control)", "augment-control"),
        ]
    for seed, out in dirs.items():
        for model, run in models:
            df = curve(out, run)
            if df is None or not len(df):
                continue
            n_unseen = df["val_unseen_n"].dropna()
            for ck, r in pick(df, "val_unseen_sr").items():
                for split in ("val_seen", "val_unseen"):
                    if f"{split}_sr" not in r or r[f"{split}_sr"] != r[f"{split}_sr"]:
                        continue
                    n = r.get(f"{split}_n", np.nan)
                    if n != n and split == "val_unseen" and len(n_unseen):
                        n = n_unseen.iloc[0]
                    rows.append(
                        {
                            "model": model,
                            "split": split,
                            "checkpoint": ck,
                            "seed": seed,
                            "steps": int(r["steps"]),
                            "n_eval": n,
                            "se_eval": se_eval(r[f"{split}_sr"], n),
                            **{k: r[f"{split}_{k}"] for k in NAV},
                        }
                    )
    if not rows:
        return pd.DataFrame()
    t = summary(rows, ["model", "split", "checkpoint"], NAV + ["se_eval", "steps"])
    return _with_paper(
        t, lambda r: PAPER_T2.get((r["model"], r["split"]), [np.nan] * 6), NAV, ["model", "split"]
    )


def _paper_t5(method: str) -> list[float] | None:
    """Table 5's R2R row of a method; None for the two controls (not in the paper)."""
    return PAPER_T5[method][0] if method in PAPER_T5 else None


def _with_paper(t: pd.DataFrame, paper_of, cols: list[str], keys: list[str]) -> pd.DataFrame:
    t = t.assign(source="ours")
    papers = []
    for _, r in t.drop_duplicates(keys).iterrows():
        if paper_of(r) is None:
            continue
        papers.append(
            {**{k: r[k] for k in keys}, "source": "paper", **dict(zip(cols, paper_of(r)))}
        )
    return pd.concat([t, pd.DataFrame(papers)], ignore_index=True)


def table4(dirs: dict[int, Path]) -> pd.DataFrame:
    """BLEU, route fidelity and what each speaker teaches (`experiments.fedvln.teaching`:
    the federated follower's SR on its words, and that over its SR on the true ones), with the
    untrained, constant-sentence and other-path floors."""
    rows = []
    for seed, out in dirs.items():
        taught = teaching(out, seed)
        for name, run in (
            ("untrained (floor)", "untrained"),
            ("constant sentence (floor)", "constant"),
            ("other path's instruction (floor)", "other-path"),
            ("Cent", "central/speaker"),
            ("Fed", "speaker"),
        ):
            df = curve(out, run)
            if df is None or not len(df):
                continue
            key = SPEAKER_SELECTION if SPEAKER_SELECTION in df else "val_unseen_bleu"
            for ck, r in pick(df, key).items():
                rows.append(
                    {
                        "speaker": name,
                        "checkpoint": ck,
                        "seed": seed,
                        "steps": int(r["steps"]),
                        **{m: r.get(m, np.nan) for m in T4_METRICS + T4_PARTS},
                        **_taught(taught, name, ck),
                    }
                )
        if taught is not None:
            for ck in ("best", "last"):
                rows.append(
                    {"speaker": "true instructions", "checkpoint": ck, "seed": seed, "steps": 0}
                    | _taught(taught, "true instructions", ck)
                )
    if not rows:
        return pd.DataFrame()
    t = summary(rows, ["speaker", "checkpoint"], [*T4_METRICS, *T4_PARTS, *T4_TAUGHT, "steps"])
    return _with_paper(
        t,
        lambda r: PAPER_T4.get(r["speaker"], [np.nan] * 2),
        ["val_seen_bleu", "val_unseen_bleu"],
        ["speaker"],
    )


def _taught(taught: pd.DataFrame | None, name: str, ck: str) -> dict[str, float]:
    """One speaker's teaching columns (a floor or the true words have no checkpoint: the same
    row for best and last)."""
    if taught is None:
        return {}
    mine = taught[(taught["speaker"] == name) & (taught["checkpoint"].fillna("").isin([ck, ""]))]
    out = {}
    for split in ("val_seen", "val_unseen"):
        r = mine[mine["split"] == split]
        if len(r):
            out[f"{split}_taught_sr"] = float(r["taught_sr"].iloc[0])
            out[f"{split}_taught_ratio"] = float(r["taught_ratio"].iloc[0])
            if "taught_gain" in r:  # teaching.csv files written before issue 64 have none
                out[f"{split}_taught_gain"] = float(r["taught_gain"].iloc[0])
    return out


def _pre_run(v: str) -> str:
    return "preexplore-centralized" if v == "centralized" else f"preexplore-{v}"


def table5(dirs: dict[int, Path]) -> pd.DataFrame:
    rows = []
    for seed, out in dirs.items():
        start = start_curve(out)
        for v in PRE_RUNS:
            df = curve(out, _pre_run(v))
            if df is None or not len(df):
                continue
            mb = float("nan")
            if v != "centralized":
                mb = pd.read_csv(out / _pre_run(v) / "rounds.csv")["bytes_up"].sum() / 1e6
            for ck, r in pick(df, "val_unseen_sr").items():
                rows.append(
                    {
                        "method": v,
                        "checkpoint": ck,
                        "seed": seed,
                        "start_sr": start["val_unseen_sr"].max() if start is not None else np.nan,
                        "mb_up": mb,
                        "steps": int(r["steps"]),
                        "n_eval": r["val_unseen_n"],
                        "se_eval": se_eval(r["val_unseen_sr"], r["val_unseen_n"]),
                        "at_cap": at_cap(out, _pre_run(v)),
                        **{k: r[f"val_unseen_{k}"] for k in NAV},
                    }
                )
    if not rows:
        return pd.DataFrame()
    cols = NAV + ["se_eval", "start_sr", "mb_up", "steps", "at_cap"]
    t = summary(rows, ["method", "checkpoint"], cols)
    # how many seeds' runs stopped at the round cap, not by patience (issue 64: say if it binds)
    capped = (
        pd.DataFrame(rows)
        .groupby(["method", "checkpoint"], sort=False)["at_cap"]
        .sum(min_count=1)  # all NaN (the centralized run): not known, not 0
    )
    t["seeds_at_cap"] = [capped.get((m, c), np.nan) for m, c in zip(t["method"], t["checkpoint"])]
    return _with_paper(t, lambda r: _paper_t5(r["method"]), NAV, ["method"])


def steps_to(df: pd.DataFrame, target: float) -> float:
    hit = df[df["val_unseen_sr"] >= target]
    return float(hit["steps"].iloc[0]) if len(hit) else float("nan")


def table9(dirs: dict[int, Path], stages=STAGES) -> pd.DataFrame:
    groups = {
        "seen": {"centralized": "central/agent", "federated": "agent"},
        "preexplore": {v: _pre_run(v) for v in ("centralized",) + VARIANTS},
    }
    groups = {k: v for k, v in groups.items() if {"seen": "agent"}.get(k, k) in stages}
    rows = []
    for phase, runs in groups.items():
        curves = {(s, m): curve(out, r) for s, out in dirs.items() for m, r in runs.items()}
        curves = {k: c for k, c in curves.items() if c is not None and len(c)}
        if not curves:
            continue
        best = (
            pd.DataFrame(
                [{"m": m, "best": c["val_unseen_sr"].max()} for (_, m), c in curves.items()]
            )
            .groupby("m")["best"]
            .mean()
        )
        start = 0.0
        if phase == "preexplore":
            starts = [
                start_curve(out)["val_unseen_sr"].max()
                for out in dirs.values()
                if start_curve(out) is not None
            ]
            start = float(np.mean(starts)) if starts else 0.0
        # 90% of the way to the lowest mean best; if some method never beats the start, to
        # the highest one instead (the others then show as not reaching it)
        top = best.min() if best.min() > start else best.max()
        target = round(start + 0.9 * (top - start), 1) if top > start else float("nan")
        for (seed, m), c in curves.items():
            rows.append(
                {
                    "phase": phase,
                    "method": m,
                    "seed": seed,
                    "target_sr": target,
                    "steps": steps_to(c, target),
                    "reached": float(steps_to(c, target) == steps_to(c, target)),
                    # the convergence protocol's own numbers: the best checkpoint, the steps it
                    # took, and the steps trained until patience (or the cap) stopped the run
                    "best_sr": c["val_unseen_sr"].max(),
                    "best_steps": float(c.loc[c["val_unseen_sr"].idxmax(), "steps"]),
                    "stop_steps": float(c["steps"].iloc[-1]),
                }
            )
    if not rows:
        return pd.DataFrame()
    cols = ["target_sr", "steps", "reached", "best_sr", "best_steps", "stop_steps"]
    t = summary(rows, ["phase", "method"], cols)
    t["reached"] = (t["reached"] * t["n_seeds"]).round().astype(int)
    paper = [
        {
            "phase": p,
            "method": m,
            "source": "paper (R2R)",
            "target_sr": 44.0 if p == "seen" else 62.0,
            "steps": 100 * v,
        }
        for (p, m), v in PAPER_T9.items()
        if p in groups
    ]
    return pd.concat([t.assign(source="ours"), pd.DataFrame(paper)], ignore_index=True)


def _pm(r: pd.Series, col: str, digits: int = 1) -> str:
    """'mean ± sd' of one summary row (sd omitted with one seed)."""
    m, sd = r.get(col), r.get(f"{col}_sd")
    if m is None or m != m:
        return "–"
    return f"{m:.{digits}f}" + (f" ± {sd:.{digits}f}" if sd == sd and sd is not None else "")


def _pm_joined(r: pd.Series, cols: list[str]) -> str:
    """'a / b / ...' of several `_pm` cells, each '–' where its score is missing (a table
    made before issue 64's strict fidelity has its lenient columns emptied), or one '–'
    where all are."""
    cells = [_pm(r, c) for c in cols]
    return "–" if all(c == "–" for c in cells) else " / ".join(cells)


def _taught_cell(r: pd.Series) -> str:
    """'SR ± sd (ratio ± sd)' of Table 4's teaching columns, or '–'."""
    if r.get("val_unseen_taught_sr", np.nan) != r.get("val_unseen_taught_sr", np.nan):
        return "–"
    gain = r.get("val_unseen_taught_gain", np.nan)
    extra = f"; gain {_pm(r, 'val_unseen_taught_gain', 2)}" if gain == gain else ""
    return f"{_pm(r, 'val_unseen_taught_sr')} ({_pm(r, 'val_unseen_taught_ratio', 2)}{extra})"


def markdown(result: dict[str, pd.DataFrame]) -> str:
    """README-ready tables from the summaries (the CSVs hold the same numbers)."""
    lines = []
    t = result["table2"]
    if len(t):
        lines += [
            "| Table 2 | checkpoint | seeds | steps | val_seen SR | val_unseen SR | "
            "val_unseen SPL | SE of one eval | paper val_unseen SR / SPL |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        ours = t[t["source"] == "ours"]
        for (model, ck), g in ours.groupby(["model", "checkpoint"], sort=False):
            u = g[g["split"] == "val_unseen"].iloc[0]
            s_ = g[g["split"] == "val_seen"]
            p = PAPER_T2.get((model, "val_unseen"), ["–"] * 6)
            lines.append(
                f"| {model} | {ck} | {int(u['n_seeds'])} | {u['steps']:.0f} | "
                f"{_pm(s_.iloc[0], 'sr') if len(s_) else '–'} | {_pm(u, 'sr')} | "
                f"{_pm(u, 'spl')} | {u['se_eval']:.1f} | {p[3]} / {p[2]} |"
            )
        lines.append("")
    t = result["table4"]
    if len(t):
        lines += [
            "| Table 4 (BLEU-4) | checkpoint | seeds | steps | val_seen | val_unseen | "
            "route fidelity val_seen / val_unseen | val_unseen rooms on route / goal room / "
            "stop object | follower SR on its words, val_unseen (÷ SR on the true ones) | "
            "paper val_seen / val_unseen |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for _, r in t[t["source"] == "ours"].iterrows():
            p = PAPER_T4.get(r["speaker"], ("–", "–"))
            fid = _pm_joined(r, ["val_seen_fidelity", "val_unseen_fidelity"])
            parts = _pm_joined(r, T4_PARTS)
            lines.append(
                f"| {r['speaker']} | {r['checkpoint']} | {int(r['n_seeds'])} | "
                f"{_pm(r, 'steps', 0)} | {_pm(r, 'val_seen_bleu')} | {_pm(r, 'val_unseen_bleu')} | "
                f"{fid} | {parts} | {_taught_cell(r)} | {p[0]} / {p[1]} |"
            )
        lines.append("")
    t = result["table5"]
    if len(t):
        lines += [
            "| Table 5 (val_unseen) | checkpoint | seeds | SR | SPL | nDTW | "
            "SE of one eval | start SR | MB up | paper SR |"
            + (" seeds at the round cap |" if "seeds_at_cap" in t else ""),
            "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if "seeds_at_cap" in t else ""),
        ]
        for _, r in t[t["source"] == "ours"].iterrows():
            mb = "–" if r["mb_up"] != r["mb_up"] else f"{r['mb_up']:.1f}"
            cap = r.get("seeds_at_cap", None)
            lines.append(
                f"| {r['method']} | {r['checkpoint']} | {int(r['n_seeds'])} | "
                f"{_pm(r, 'sr')} | {_pm(r, 'spl')} | {_pm(r, 'ndtw')} | "
                f"{r['se_eval']:.1f} | {_pm(r, 'start_sr')} | {mb} | "
                f"{_paper_cell(r['method'])} |"
                + ("" if cap is None else (" – |" if cap != cap else f" {int(cap)} |"))
            )
        lines.append("")
    t = result["table9"]
    if len(t):
        lines += [
            "| Table 9 | method | target SR | steps to target | seeds reaching it | "
            "best SR | steps to best | steps trained | paper steps (R2R) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for _, r in t[t["source"] == "ours"].iterrows():
            paper = PAPER_T9.get((r["phase"], r["method"]))
            conv = (
                f"{_pm(r, 'best_sr')} | {_pm(r, 'best_steps', 0)} | {_pm(r, 'stop_steps', 0)} | "
                f"{'–' if paper is None else paper * 100} |"
            )
            if r["target_sr"] != r["target_sr"]:
                lines.append(
                    f"| {r['phase']} | {r['method']} | none: no method's mean best "
                    f"beats the start | – | – | {conv}"
                )
                continue
            lines.append(
                f"| {r['phase']} | {r['method']} | {r['target_sr']:.1f} | "
                f"{_pm(r, 'steps', 0)} | {int(r['reached'])} / {int(r['n_seeds'])} | {conv}"
            )
    return "\n".join(lines)


def tables(a, out: Path, seeds: list[int], suffix: str) -> dict[str, pd.DataFrame]:
    """Tables 2, 4, 5 and 9 and the paired gains from the seeds' run folders (written to
    experiments/results/fedvln_<table><suffix>.csv; a study of some stages only has only
    their tables)."""
    dirs = seed_dirs(out, seeds)
    for seed, d in dirs.items():
        floor(d, seed)
    empty = pd.DataFrame()
    result = {
        "table2": table2(dirs, a.stages) if "agent" in a.stages else empty,
        "table4": table4(dirs) if "speaker" in a.stages else empty,
        "table5": table5(dirs) if "preexplore" in a.stages else empty,
        "table9": table9(dirs, a.stages),
        "gains": fedvln_gains.gains(dirs),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name, t in result.items():
        if len(t):
            t.round(2).to_csv(RESULTS / f"fedvln_{name}{suffix}.csv", index=False)
    return result


# the figure's runs and the column each is drawn by (its curves CSV holds these)
CURVES = {
    **dict.fromkeys(("agent", "central/agent", "augment", "central/augment"), "val_unseen_sr"),
    **dict.fromkeys(("augment-control", "central/augment-control"), "val_unseen_sr"),
    **dict.fromkeys(("speaker", "central/speaker"), "val_unseen_bleu"),
    **{_pre_run(v): "val_unseen_sr" for v in PRE_RUNS},
    "start": "val_unseen_sr",  # where pre-exploration starts (start_curve)
    "untrained": "val_unseen_sr",  # the floors: the untrained follower and speaker
    "untrained/bleu": "val_unseen_bleu",
}


def curves(out: Path, seed: int) -> list[dict]:
    """One seed's evaluations of every run the figure draws: (seed, run, steps, value)."""
    rows = []
    for run, col in CURVES.items():
        c = start_curve(out) if run == "start" else curve(out, run.removesuffix("/bleu"))
        if c is not None and len(c) and col in c:
            rows += [
                {"seed": seed, "run": run, "steps": float(x), "value": float(v)}
                for x, v in zip(c["steps"], c[col])
            ]
    return rows


def _band(ax, curves: pd.DataFrame, run, label, style="-"):
    """Mean over seeds (line) and min-max band of a run's curve against optimizer steps; runs
    stopped by patience at different steps, so each point is over the seeds still running.
    The line's colour, or None where the run is not in `curves`."""
    d = curves[curves["run"] == run]
    if d.empty:
        return None
    wide = d.pivot_table(index="steps", columns="seed", values="value").sort_index()
    x = wide.index.to_numpy()
    n = d["seed"].nunique()
    (line,) = ax.plot(x, wide.mean(axis=1), style, marker=".", ms=3, label=f"{label} (n={n})")
    ax.fill_between(x, wide.min(axis=1), wide.max(axis=1), color=line.get_color(), alpha=0.15)
    return line.get_color()


def plot(
    curves: pd.DataFrame, png: Path, command: str, stages=STAGES, table4: pd.DataFrame = None
) -> None:
    """One panel per table the study made (`stages`): Table 2's follower, Table 4's speaker,
    Table 5's pre-exploration, each with the paper's R2R numbers drawn beside ours. The
    speaker panel's floors beyond the untrained speaker (the constant sentence, another path's
    instruction) are one evaluation each, not curves: they are read from `table4`, the study's
    own Table 4 (its floor rows), when given."""
    panels = [
        draw
        for draw, wanted in (
            (_plot_follower, {"agent", "augment"}),
            (partial(_plot_speaker, table4=table4), {"speaker"}),
            (_plot_preexplore, {"preexplore"}),
        )
        if wanted & set(stages)
    ]
    fig, axes = figures.subplots(1, len(panels), figsize=(16 * len(panels) / 3 + 1, 4.2))
    for draw, ax in zip(panels, np.atleast_1d(axes)):
        draw(ax, curves)
    fig.tight_layout()
    figures.save(fig, png, command)


def _floor(ax, curves: pd.DataFrame, run: str, label: str) -> None:
    """The untrained model's score (mean over seeds), the floor a trained one must beat."""
    v = curves.loc[curves["run"] == run, "value"]
    if len(v):
        ax.axhline(float(v.mean()), color="black", ls="-.", lw=0.8, label=label)


def _plot_follower(ax, curves: pd.DataFrame) -> None:
    """Table 2's runs, each with the paper's R2R val_unseen SR in its colour where the paper
    has the row, and the untrained follower."""
    for run, label, style in (
        ("agent", "FedEnvdrop", "-"),
        ("central/agent", "Envdrop", "--"),
        ("augment", "FedEnvdrop_aug", "-"),
        ("central/augment", "Envdrop_aug", "--"),
        ("augment-control", "FedEnvdrop fine-tuned again", ":"),
        ("central/augment-control", "Envdrop fine-tuned again", ":"),
    ):
        colour = _band(ax, curves, run, label, style)
        if colour is not None and (label, "val_unseen") in PAPER_T2:
            sr = PAPER_T2[(label, "val_unseen")][3]
            ax.axhline(sr, color=colour, ls=style, lw=0.8, alpha=0.7, label=f"paper {label} {sr}")
    _floor(ax, curves, "untrained", "untrained follower (floor)")
    ax.set(
        xlabel="optimizer steps, all houses (augment: from its start)",
        ylabel="val_unseen SR (%)",
        title="Table 2: follower",
    )
    low, high = ax.get_ylim()
    ax.set_ylim(low, high + 0.6 * (high - low))  # room above the paper's lines for the legend
    ax.legend(fontsize=6, ncol=2, loc="upper center")


# Table 4's floor rows drawn on the speaker panel, and their line styles
SPEAKER_FLOORS = {"constant sentence (floor)": ":", "other path's instruction (floor)": (0, (1, 3))}


def _plot_speaker(ax, curves: pd.DataFrame, table4: pd.DataFrame = None) -> None:
    """Fed and Cent val_unseen BLEU against the untrained speaker and, from `table4`, the
    constant sentence and another path's instruction: a BLEU a constant reaches says nothing
    of the route, so the constant's line is the one a speaker must clear."""
    for run, label, style in (("speaker", "Fed", "-"), ("central/speaker", "Cent", "--")):
        _band(ax, curves, run, label, style)
    _floor(ax, curves, "untrained/bleu", "untrained speaker (floor)")
    if table4 is not None and len(table4):
        ours = table4[table4.get("source", "ours") == "ours"]
        best = ours[ours["checkpoint"] == "best"].set_index("speaker")
        for name, ls in SPEAKER_FLOORS.items():
            if name in best.index and pd.notna(best.at[name, "val_unseen_bleu"]):
                bleu = float(best.at[name, "val_unseen_bleu"])
                ax.axhline(bleu, color="black", ls=ls, lw=0.9, label=f"{name} {bleu:.1f}")
    for name, ls in (("Cent", "--"), ("Fed", "-")):
        ax.axhline(PAPER_T4[name][1], color="grey", ls=ls, lw=0.8, label=f"paper {name}")
    ax.set(xlabel="optimizer steps", ylabel="val_unseen BLEU-4", title="Table 4: speaker")
    ax.legend(fontsize=7)


def _paper_cell(method: str) -> str:
    p = _paper_t5(method)
    return "–" if p is None else f"{p[3]}"


def _plot_preexplore(ax, curves: pd.DataFrame) -> None:
    for v in PRE_RUNS:
        controls = (HOUSE_CONTROL, BUDGET_CONTROL)
        _band(ax, curves, _pre_run(v), v, ":" if v in controls else "-")
    _floor(ax, curves, "untrained", "untrained follower (floor)")
    starts = curves[curves["run"] == "start"].groupby("seed")["value"].max().tolist()
    if starts:  # where every pre-exploration starts
        ax.axhline(float(np.mean(starts)), color="black", ls=":", lw=1)
        ax.annotate(
            "start (augmented agent's best, or start-models)",
            (0.01, float(np.mean(starts))),
            xycoords=("axes fraction", "data"),
            fontsize=7,
            va="bottom",
        )
    ax.set(
        xlabel="optimizer steps, all houses",
        ylabel="val_unseen SR (%)",
        title="Table 5: pre-exploration (paper R2R SR in legend)",
    )
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(
        handles,
        [
            f"{lab}; paper {_paper_cell(lab.split(' (')[0])}" if "floor" not in lab else lab
            for lab in labels
        ],
        fontsize=7,
    )


STUDY = ROOT / "experiments" / "studies" / "fedvln_pipeline.toml"


def settings(study: Path = STUDY, **over) -> SimpleNamespace:
    """A pipeline study file's settings as the stages read them (its grid but the seeds, the
    function and the folder; `over` replacing some): how tests and other studies see them."""
    got = {k: v for k, v in fields(study).items() if k != "work"} | over
    got["aug_routes"] = got["aug_routes"] or None
    return SimpleNamespace(**got)


def measure(
    seed: int,
    data_dir: str,
    stages: list[str],
    agent_rounds: int,
    speaker_rounds: int,
    aug_rounds: int,
    pre_rounds: int,
    eval_every: int,
    pre_eval_every: int,
    patience: int,
    speaker_patience: int,
    speaker_seen_rate: float,
    speaker_server_lr: float,
    aug_routes: int,
    start_models: str,
    extra_config: str,
    work: Path,
) -> list[dict]:
    """One cell: every stage of one seed (`seed_stages`), its curves returned for the figure.

    The fields, as the study files give them: `data-dir` the R2R/Matterport folder ("" =
    embedded houses); `stages` the stages to run with their centralized baselines (augment
    needs agent and speaker, preexplore augment and speaker, unless `start-models`); the
    round caps `agent-rounds`, `speaker-rounds`, `aug-rounds`, `pre-rounds` (caps when
    `patience` > 0, fixed budgets at 0); `eval-every` (agent, speaker, augment) and
    `pre-eval-every`; `patience` evaluations without a better val_unseen SR, every stage
    federated and centralized; `speaker-patience` the speaker's (its fidelity rises slowly for
    ~1,000 sequential steps before it grounds, longer than the follower's 8);
    `speaker-seen-rate` the share r of seen houses that train the speaker each round (with
    0.2, 2 of 12 houses, the averaged speaker never learned to say the route in 240 rounds;
    with 0.5 it does; on R2R 0.2 of 61 is the official 12); `speaker-server-lr` the speaker's
    server step eta (Eq. 7; the official speaker's 1.6, run/speaker_fedavg.bash); `aug-routes`
    routes each seen house samples for augmentation (0: fedvln.aug-routes' default; not in
    `extra-config`, since augmentation's control sets it to 0); `start-models` a folder of
    agent_best.pt and speaker.pt, "{seed}" for the seed, where pre-exploration starts instead
    of the pipeline's augmented agent (only with `stages = ["preexplore"]`); `extra-config`
    run config for every stage."""
    a = SimpleNamespace(**{k: v for k, v in locals().items() if k not in ("seed", "work")})
    a.aug_routes = aug_routes or None
    # seeds run side by side: torch's own threads would oversubscribe the cores (centralized
    # pre-exploration ran 10x slower with 3 seeds), and the numbers depend on the thread count
    torch.set_num_threads(1)
    out = Path(work).resolve() / f"seed{seed}"  # checkpoints go to the stages by absolute path
    if a.start_models:
        start_folder(a, seed)
    run_seed(a, out, seed)
    return [r | {"work": str(out.parent)} for r in curves(out, seed)]


def check(cell: dict, where) -> None:
    """A pipeline study's values, before anything trains (one line naming the file and field)."""
    keys = ("agent-rounds", "speaker-rounds", "aug-rounds", "pre-rounds", "eval-every",
            "pre-eval-every")  # fmt: skip
    for key in keys:
        if cell[key] < 1:
            raise ValueError(f"{where}: grid.{key}: must be >= 1")
    if cell["aug-routes"] < 0 or cell["patience"] < 0 or cell["speaker-patience"] < 0:
        raise ValueError(f"{where}: grid.aug-routes, patience, speaker-patience: must be >= 0")
    if not 0 < cell["speaker-server-lr"] <= 100:  # fedvln.server-lr's range; 0: the recipe's
        raise ValueError(f"{where}: grid.speaker-server-lr: must be in (0, 100]")
    try:
        extra = parse_overrides(cell["extra-config"])
    except ValueError as e:
        raise ValueError(f"{where}: grid.extra-config: {e}") from None
    if "fedvln.aug-routes" in extra:
        raise ValueError(
            f"{where}: grid.extra-config: may not set fedvln.aug-routes (augmentation's control "
            "sets it to 0); use aug-routes"
        )
    stages = cell["stages"]
    if not stages or set(stages) - set(STAGES):
        raise ValueError(f"{where}: grid.stages: some of {', '.join(STAGES)}")
    if cell["start-models"] and stages != ["preexplore"]:
        raise ValueError(
            f"{where}: grid.start-models replaces the agent, speaker and augment stages: use "
            'it with stages = ["preexplore"] alone'
        )
    needs = {"augment": ("agent", "speaker")}
    if not cell["start-models"]:
        needs["preexplore"] = ("augment", "speaker")
    for stage, wanted in needs.items():
        missing = [w for w in wanted if stage in stages and w not in stages]
        if missing:
            raise ValueError(
                f"{where}: grid.stages: {stage} needs {' and '.join(missing)} too (its "
                "checkpoints come from them)"
            )
    if cell["data-dir"] and not (ROOT / cell["data-dir"]).is_dir():
        raise ValueError(f"{where}: grid.data-dir: {cell['data-dir']}: no such folder")


def needs(cell: dict, where) -> None:
    """The start models a study of pre-exploration alone starts from, before anything trains."""
    if cell["start-models"]:
        try:
            start_folder(SimpleNamespace(start_models=cell["start-models"]), cell["seed"])
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None


def _suffix(study: dict) -> str:
    """The results' suffix: fedvln_pipeline_r2r.toml writes fedvln_table2_r2r.csv."""
    name = study["name"]
    if not name.startswith("fedvln_pipeline"):
        raise ValueError(f"{study['file']}: name: fedvln_pipeline or fedvln_pipeline_<tag>")
    return name.removeprefix("fedvln_pipeline")


def outputs(study: dict) -> list[Path]:
    sfx = _suffix(study)
    made = [RESULTS / f"fedvln_{t}{sfx}.csv" for t in ("table2", "table4", "table5", "table9")]
    made += [RESULTS / f"fedvln_gains{sfx}.csv"]
    return made + [RESULTS / f"{study['name']}{x}" for x in ("_runs.csv", ".png")]


def report(runs: pd.DataFrame, study: dict, command: str) -> str:
    """The tables from the seeds' run folders (WORK, as the cells ran), the curves CSV from
    the cells' rows, and the figure from it."""
    sfx, grid = _suffix(study), study["grid"]
    a = SimpleNamespace(stages=grid["stages"])
    result = tables(a, Path(runs["work"].iloc[0]), list(grid["seed"]), sfx)
    kept = runs.drop(columns="work")
    kept.round(4).to_csv(RESULTS / f"{study['name']}_runs.csv", index=False)
    plot(kept, RESULTS / f"{study['name']}.png", command, a.stages, result["table4"])
    return markdown(result) + "\n\n" + fedvln_gains.markdown(result["gains"])


def replot(study: dict) -> int:
    """`--plot-only`: the figure again from the committed curves CSV, under its command."""
    from experiments.figures import command_of

    runs_csv, png = outputs(study)[-2:]
    if not runs_csv.is_file() or command_of(png) is None:
        print(f"study: {runs_csv}: not made by this study yet (run it first)", file=sys.stderr)
        return 2
    table4 = RESULTS / f"fedvln_table4{_suffix(study)}.csv"
    floors = pd.read_csv(table4) if table4.is_file() else None
    plot(pd.read_csv(runs_csv), png, command_of(png), study["grid"]["stages"], floors)
    return 0
