"""FedVLN's training recipe per stage: what the official scripts run, and the defaults here.

Official values (eric-ai-lab/FedVLN@2f98fd9, `run/*.bash` and `r2r_src/train.py`):

| stage | local optimizer | server lr eta | houses per round | script |
|---|---|---|---|---|
| agent | RMSprop 1e-4 | 2 | 0.2 x 61 = 12 | run/agent_fedavg.bash |
| speaker | Adam 5e-5 | 1.6, x 0.95 every 20k updates (train.py l. 109-133) | 12 | run/speaker_fedavg.bash |
| augment | RMSprop 1e-4 | 2 | 12 | run/bt_envdrop_fedavg.bash |
| preexplore | RMSprop 1e-4 | 2 | 0.7 x 11 = 7 | run/pre_explore_fedavg.bash |

`fedvln.recipe = "official"` runs exactly these. The default, `"cpu"`, keeps the official
optimizers and changes two things, each measured (README, FedVLN, "Recipe"):

* eta = 1 in every stage. The embedded federation has 12 seen and 4 unseen houses, so r = 0.2
  and r1 = 0.6 train 2 houses per round, not 12 or 7; doubling the step of a 2-house average
  made the agent's val_unseen SR swing (11.1 / 10.8 at round 30 with eta = 2 against 18.1 / 16.1
  with eta = 1, seeds 0 / 1). The speaker's 0.95 decay every 20k updates never fires in a CPU
  schedule (a few thousand updates), so it is left out.
* the local learning rate of the stages that train from scratch: RMSprop 1e-3 for the follower
  (10x) and Adam 1e-3 for the speaker (20x). A CPU schedule has a few hundred updates per
  stage against Envdrop's 80k. Measured on the embedded houses, centralized, seed 0 (`python -m experiments.fedvln.centralized --stages
  agent --iters 600 --eval-every 200 --optimizer rms --lr L`, and `--stages speaker
  --speaker-iters 400 --speaker-lr L`): follower val_unseen SR after 600 updates 15.6 (1e-4)
  vs 22.5 (1e-3); speaker val_unseen BLEU after 400 updates 0.2 (5e-5), 10.4 (5e-4), 42.3 (1e-3).
  Augmentation and pre-exploration fine-tune an agent already trained to convergence, so they
  keep the official 1e-4: each is a new run, so each house starts a fresh RMSprop whose first
  steps are up to 10x lr. At 1e-3 the augmented agent of seed 0 fell from its start's 34.2
  val_unseen SR to 18.1 after 3 rounds; at 1e-4 it was at 32.5. To convergence over 3 seeds
  (`python -m experiments.study experiments/studies/fedvln_finetune_lr.toml`, docs/fedvln.md, "Learning rate of the
  fine-tuning stages") 1e-4 stays nearer the start early on; the best is within noise.

Each house keeps its own local optimizer state between rounds, on its own disk, never sent
(`fedvln.optimizer-state = "house"`, the default). The official simulation reuses one optimizer
object for every house in turn, which a real federation cannot do; `"round"` creates a fresh
one in each house every round (FedAvg's textbook client). Measured to convergence on the
embedded houses (`python -m experiments.study experiments/studies/fedvln_gap.toml`, README, FedVLN): a fresh RMSprop takes
larger first steps (its square average starts at 0, so its first steps are up to 10x lr) and
with 12 local updates per round every step is one of them; the agent stage then plateaus
far below the kept optimizer's best val_unseen SR. eta = 2 with the kept optimizer and 2 houses
per round swings and stops early, so eta stays 1.

The cpu speaker is the exception to eta = 1, and it trains more houses a round and more rounds
(issue 64 asked the stage's defaults to be a schedule that grounds). With r = 0.2 of the 12 seen
houses (2 a round) and eta = 1 its averaged speaker stays on the template sentence: an
independent route-fact parser found it naming the goal room 14 % and the stop object 2 % of the
time, a constant sentence's level. With 6 houses a round (r = 0.5) and the official speaker's
eta = 1.6 the pipeline's speaker grounded in each of 3 seeds on the houses before issue 64, best
at rounds 162-183 (docs/fedvln.md, "A speaker that says the route"; the schedule study, the
fed_speaker.py script of experiments/fedvln, is in git history: it was scored with the lenient
fidelity of before issue 64). So the cpu speaker is r = 0.5, eta = 1.6, and
`num-server-rounds = 0` means 180 rounds for it. Without word dropout it did not reliably
ground on today's houses (generated since issue 64): 1 seed of 3 at 120 rounds in the
one-process study (experiments/studies/fedvln_speaker_fedadam_long.toml, as FedAdam), and the
Flower stage's seed 0 was on the template plateau at round 249. With the speaker's word dropout
0.25, the default `fedvln.speaker-word-dropout` (models/speaker.py), it grounds 3 of 3 seeds
(experiments/studies/fedvln_speaker_word_dropout.toml), and the default stage in Flower does
too, best val_unseen fidelity 70.8 +- 1.5 (experiments/studies/fedvln_speaker_default.toml).
The official code's speaker round is sequential through the houses (eric-ai-lab/FedVLN
r2r_src/train.py:137-158), which ours, parallel FedAvg as the paper's Eq. 7, is not
(docs/fedvln.md says more). The follower's stages keep
r = 0.2 and the run's default rounds (config/methods.py).

`fedvln.optimizer`, `fedvln.lr`, `fedvln.server-lr`, `fedvln.server-lr-decay` and
`fedvln.seen-rate` override the recipe's value when set (non-empty / > 0), and
`num-server-rounds` its rounds when > 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from config.fedvln import FedVLNSettings

DEFAULT_ROUNDS = 5  # every method's rounds when `num-server-rounds = 0` (config/methods.py)


@dataclass(frozen=True, kw_only=True)
class Recipe:
    optimizer: str  # rms | adam (Envdrop's --optim)
    lr: float  # local learning rate
    server_lr: float  # eta of Eq. 7
    server_lr_decay: float = 1.0  # eta_t = eta * decay^(t-1), per round
    seen_rate: float = 0.2  # r: the share of seen houses trained each round (paper: 0.2)
    rounds: int = DEFAULT_ROUNDS  # what `num-server-rounds = 0` means for this stage
    server_opt: str = "avg"  # avg: Eq. 7 | adam: FedAdam (strategies/fedadam.py)


OFFICIAL = {
    "agent": Recipe(optimizer="rms", lr=1e-4, server_lr=2.0),
    "speaker": Recipe(optimizer="adam", lr=5e-5, server_lr=1.6),
    "augment": Recipe(optimizer="rms", lr=1e-4, server_lr=2.0),
    "preexplore": Recipe(optimizer="rms", lr=1e-4, server_lr=2.0),
}
CPU = {
    "agent": Recipe(optimizer="rms", lr=1e-3, server_lr=1.0),
    # the schedule that grounded the federated speaker on the older houses (module docstring)
    "speaker": Recipe(optimizer="adam", lr=1e-3, server_lr=1.6, seen_rate=0.5, rounds=180),
    "augment": Recipe(optimizer="rms", lr=1e-4, server_lr=1.0),  # fine-tunes a trained agent
    "preexplore": Recipe(optimizer="rms", lr=1e-4, server_lr=1.0),
}


def recipe_of(v: FedVLNSettings) -> Recipe:
    """The stage's recipe with the run config's explicit overrides applied (`fedvln.optimizer`
    and `fedvln.server-opt` when non-empty; `fedvln.lr`, `fedvln.server-lr`, `fedvln.server-lr-decay`,
    `fedvln.seen-rate` when > 0)."""
    r = (OFFICIAL if v.recipe == "official" else CPU)[v.stage]
    if v.optimizer:
        r = replace(r, optimizer=v.optimizer)
    if v.server_opt:
        r = replace(r, server_opt=v.server_opt)
    for field in ("lr", "server_lr", "server_lr_decay", "seen_rate"):
        if getattr(v, field) > 0:
            r = replace(r, **{field: getattr(v, field)})
    return r


def recipe_record(v: FedVLNSettings) -> dict:
    """The resolved recipe as a run's config.json records it (its `recipe`), so a finished run
    can be checked against what the same settings resolve to today (the rounds a run made are
    its own `num-server-rounds`)."""
    return {k: v for k, v in asdict(recipe_of(v)).items() if k != "rounds"}


def recorded_recipe(cfg: dict) -> dict | None:
    """The resolved recipe a finished run's config.json records, comparable with
    `recipe_record` today: a run made before the recipe held the share of houses (issue 64)
    gave it as `fedvln.seen-rate` itself, so that is its share."""
    done = cfg.get("recipe")
    if done is None:
        return done
    done = {"server_opt": "avg", **done}  # before FedAdam every run stepped by Eq. 7
    if "seen_rate" in done:
        return done
    return {**done, "seen_rate": float(cfg.get("fedvln.seen-rate", 0.0))}


def stage_rounds(v: FedVLNSettings) -> int:
    """FedVLN's `num-server-rounds = 0`: the stage recipe's rounds (180 for the cpu speaker)."""
    return recipe_of(v).rounds
