"""Run-config keys of FedVLN (`fedvln.*`): the stage, the houses, the rates and the recipe."""

from __future__ import annotations

from dataclasses import dataclass

from config.schema import ConfigError, Section, setting

STAGES = ("agent", "speaker", "augment", "preexplore")
VARIANTS = ("env-based", "fed-full", "fed-lan", "fed-lan+seen")
RECIPES = ("cpu", "official")  # config/fedvln_recipe.py: OFFICIAL, CPU
OPTIMIZERS = ("rms", "adam")  # training/vln_loop.py
ROUTE_WORDS = ("speaker", "grammar")  # training.vln_house.grammar_words
ROUTES_HOUSE = ("own", "next-unseen")  # training.vln_house.routes_house
SPEAKER_ROUNDS = ("fedavg", "chain")  # strategies/fedvln_strategy.py (FedVLNStrategy._chain)


@dataclass(frozen=True)
class FedVLNSettings(Section):
    prefix = "fedvln."
    title = "FedVLN"

    stage: str = setting(
        "agent | speaker | augment | preexplore (server/fedvln_run.py)", choices=STAGES
    )
    variant: str = setting(
        "preexplore: env-based | fed-full | fed-lan | fed-lan+seen (paper Table 5)"
    )
    data_dir: str = setting('"" = embedded houses; else an R2R/Matterport folder (../shared/data)')
    features_tsv: str = setting('36-view feature TSV; "" = semantic view features')
    appearance: float = setting(
        "strength of each house's own look appended to the semantic view features "
        "(envs/vln_appearance.py); 0 = off, the features alone",
        lo=0,
        hi=100,
    )
    train_houses: int = setting("embedded houses: seen (one client each)", lo=1, hi=200)
    unseen_houses: int = setting(
        "embedded houses: unseen (clients that only evaluate, or pre-explore)", lo=1, hi=200
    )
    seen_rate: float = setting(
        "r: seen houses per round in agent | speaker | augment; 0 = the recipe's (0.2, the "
        "cpu speaker 0.5: config/fedvln_recipe.py)",
        lo=0,
        hi=1,
    )
    unseen_rate: float = setting(
        "r1: unseen houses per round in pre-exploration", lo=0, hi=1, lo_open=True
    )
    env_based_rate: float = setting(
        "env-based pre-exploration: the share of unseen houses that train each round; 1 = "
        "every house every round (server/fedvln_run.py); the federated variants' r1 gives "
        "each house their updates (issue 64: budget told from averaging)",
        lo=0,
        hi=1,
        lo_open=True,
    )
    preexplore_seen_rate: float = setting(
        "r2: seen houses per round in fed-lan+seen", lo=0, hi=1, lo_open=True
    )
    recipe: str = setting(
        "per-stage local optimizer, lr and server lr (config/fedvln_recipe.py)", choices=RECIPES
    )
    server_lr: float = setting(
        "eta of Eq. 7, w <- w + eta * sum n_i/n (w_i - w); 0 = the recipe's", lo=0, hi=100
    )
    server_opt: str = setting(
        "the server's step: avg, Eq. 7 | adam, FedAdam (Reddi et al. 2021, Alg. 2: the mean "
        'update as Adam\'s pseudo-gradient, eta its step; strategies/fedadam.py); "" = the '
        "recipe's",
        choices=("", "avg", "adam"),
    )
    server_lr_decay: float = setting("eta_t = eta * decay^(t-1); 0 = the recipe's", lo=0, hi=1)
    optimizer: str = setting(
        'local optimizer; "" = the recipe\'s (official: RMSprop follower, Adam speaker)',
        choices=("", *OPTIMIZERS),
    )
    optimizer_state: str = setting(
        "round: a fresh local optimizer every round | house: each house keeps its own "
        "between rounds",
        choices=("round", "house"),
    )
    speaker_round: str = setting(
        "fedavg: every house of a speaker round trains from the global model (Eq. 7) | chain: "
        "each house, in a random order, trains the model the house before it returned, as the "
        "official code's speaker round (r2r_src/train.py:137-158); the next house learns what "
        "a house's training did, so houses serve it only with their policy's consent "
        "(fedvln.allow-chain, and fedvln.min-round-houses = 1); round-timeout then bounds each house, not the round",
        choices=SPEAKER_ROUNDS,
    )
    min_round_houses: int = setting(
        "the fewest houses whose accepted updates the server mixes into a model it sends on: "
        "a round with fewer is held back (the model stays), and the stage must sample at "
        "least this many a round; after a one-house round every house that gets the model "
        "learns that house's exact update, after a two-house round each learns the other's. "
        "Each house trains only if this is at least its policy's fedvln.min-round-houses",
        lo=1,
        hi=200,
    )
    local_epochs: float = setting(
        "tau for the follower (paper: 3 for Envdrop)", lo=0, hi=1000, lo_open=True
    )
    speaker_epochs: float = setting("tau for the speaker (paper: 5)", lo=0, hi=1000, lo_open=True)
    speaker_word_dropout: float = setting(
        "the speaker's word dropout: in teacher forcing each input word becomes <UNK> with "
        "this probability (Bowman et al. 2016; models/speaker.py), so the decoder must read "
        "the route; training only, a checkpoint's value does not bind the runs that load it",
        lo=0,
        hi=0.95,
    )
    preexplore_epochs: float = setting(
        "tau_1 in pre-exploration (paper: 1)", lo=0, hi=1000, lo_open=True
    )
    eval_seen: bool = setting(
        "agent | speaker | augment: also score val_seen (false: val_unseen only)"
    )
    max_local_steps: int = setting("> 0: cap on minibatches per local training", lo=0, hi=10**7)
    patience: int = setting(
        "stop the stage once val_unseen SR (BLEU for the speaker) has not improved for this "
        "many evaluations (num-server-rounds is then the cap); 0 = run every round",
        lo=0,
        hi=10**6,
    )
    batch_size: int = setting("local minibatch size", lo=1, hi=10**5)
    lr: float = setting("local learning rate; 0 = the recipe's", lo=0, hi=10)
    feedback: str = setting(
        "mixed (imitation + A2C, Envdrop) | teacher", choices=("mixed", "teacher")
    )
    ml_weight: float = setting("imitation weight on labelled batches (Envdrop)", lo=0, hi=100)
    aug_ml_weight: float = setting(
        "imitation weight on back-translated speaker routes (official train.py)", lo=0, hi=100
    )
    embedding: int = setting("word embedding size of follower and speaker", lo=1, hi=4096)
    hidden: int = setting("LSTM hidden size of follower and speaker", lo=1, hi=8192)
    agent_init: str = setting("follower checkpoint (model.pt of an agent run): augment, preexplore")
    speaker_init: str = setting(
        "speaker checkpoint (best.pt of a speaker run): augment, preexplore"
    )
    aug_routes: int = setting(
        "routes each seen house samples for back-translation (augment); 0 is the augment "
        "stage's control: the same fine-tuning from agent-init with no speaker routes",
        lo=0,
        hi=10**5,
    )
    preexplore_routes: int = setting(
        "routes each unseen house samples for back-translation (preexplore)", lo=1, hi=10**5
    )
    route_words: str = setting(
        "who writes the sampled routes' instructions (augment, preexplore): speaker "
        "(back-translation, the paper) | grammar (the embedded houses' own grammar, once per "
        "route: a perfect speaker, a diagnostic; embedded houses only)",
        choices=ROUTE_WORDS,
    )
    routes_house: str = setting(
        "where an unseen house samples its pre-exploration routes: own (the paper) | "
        "next-unseen (the held-out-house control, issue 64: the next unseen house's routes, "
        "walked in its rooms, while the house is still scored on its own episodes; a study "
        "control for simulation, where every house's data is on one machine)",
        choices=ROUTES_HOUSE,
    )

    def validate(self) -> None:
        if self.appearance and self.features_tsv:
            raise ConfigError(
                "run config 'fedvln.appearance' adds a house's look to the semantic view "
                f"features; 'fedvln.features-tsv' = {self.features_tsv!r} are image features, "
                "which have their own (set one of the two)"
            )
        if self.route_words == "grammar" and self.stage not in ("augment", "preexplore"):
            raise ConfigError(
                "run config 'fedvln.route-words' = \"grammar\" writes the routes of the augment "
                f"and preexplore stages; stage {self.stage!r} samples none"
            )
        if self.route_words == "grammar" and self.data_dir:
            raise ConfigError(
                "run config 'fedvln.route-words' = \"grammar\" needs the embedded houses "
                '(fedvln.data-dir = ""): only they have a grammar that wrote their '
                f"instructions, and {self.data_dir!r} is a data folder"
            )
        if self.routes_house != "own" and not self.data_dir and self.unseen_houses < 2:
            raise ConfigError(
                f"run config 'fedvln.routes-house' = {self.routes_house!r} adapts each unseen "
                "house on another's routes: it needs 'fedvln.unseen-houses' >= 2, not "
                f"{self.unseen_houses}"
            )
        if self.env_based_rate != 1 and (self.stage, self.variant) != ("preexplore", "env-based"):
            raise ConfigError(
                f"run config 'fedvln.env-based-rate' = {self.env_based_rate} is the share of "
                "houses of env-based pre-exploration; this run is stage "
                f"{self.stage!r}, variant {self.variant!r}"
            )
        if self.routes_house != "own" and self.stage != "preexplore":
            raise ConfigError(
                f"run config 'fedvln.routes-house' = {self.routes_house!r} is a control of the "
                f"preexplore stage; stage {self.stage!r} samples no unseen house's routes"
            )
        if self.speaker_round != "fedavg" and self.stage != "speaker":
            raise ConfigError(
                f"run config 'fedvln.speaker-round' = {self.speaker_round!r} is how the speaker "
                f"stage's round runs; stage {self.stage!r} trains no speaker"
            )
        if self.stage == "preexplore" and self.variant == "centralized":
            raise ConfigError(
                "fedvln.variant 'centralized' pools every house's data in one place "
                "and is not a federated run; the pipeline study (`python -m experiments.study "
                "experiments/studies/fedvln_pipeline.toml`) runs it beside the federated "
                "variants (Table 5)"
            )
        if self.stage == "preexplore" and self.variant not in VARIANTS:
            raise ConfigError(
                f"run config 'fedvln.variant' must be one of {', '.join(VARIANTS)}, "
                f"got {self.variant!r}"
            )
