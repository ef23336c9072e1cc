"""Server side of FedVLN (Zhou et al. 2022): one client per house, four stages.

* `agent`: decentralized federated training of the Envdrop follower (Eq. 6-7): per round a
  share r (`fedvln.seen-rate`, 0.2) of the seen houses trains tau epochs (`local-epochs`, 3) on
  its own instructions; the server steps `w <- w + eta * sum n_i/n (w_i - w)` (eta from the
  recipe, `config/fedvln_recipe.py`). Every house scores the global model on its own validation
  split (seen houses val_seen, unseen houses val_unseen) and the server pools the metrics.
* `speaker`: the same for the speaker (tau = `speaker-epochs`, 5), scored by BLEU and route
  fidelity (`envs.vln_fidelity`) on each house's paths.
* `augment`: in a setup round every seen house receives the speaker and samples routes in
  itself (`aug-routes`); then the follower (from `agent-init`) trains federated on labelled
  batches plus route batches the speaker back-translates inside the house. No route or
  instruction leaves its house.

Whenever the whole model is global, the one with the best pooled val_unseen SR is kept as
`best.pt`, as the paper and the official code select checkpoints (`best_val_unseen`); for the
speaker the best pooled val_seen route fidelity (`contracts.fedvln.SPEAKER_SELECTION`, where
the paper keeps the best BLEU: why, there); `model.pt` is the last round's. The local
optimizer, its learning rate and the server learning rate come from `config/fedvln_recipe.py`.
* `preexplore` (Algorithm 1), starting from `agent-init`, on routes each unseen house samples
  and the speaker (`speaker-init`) describes; variant:
    - `env-based`: every unseen house trains its own follower each round (or a share
      `env-based-rate` of them: at r1, each house makes the federated variants' updates);
      nothing is sent up;
    - `fed-full`: unseen houses at r1 (`unseen-rate`, 0.6) share the whole follower;
    - `fed-lan`: they send only the language encoder; decoder and critic stay in the house;
    - `fed-lan+seen`: as fed-lan, plus seen houses at r2 (`preexplore-seen-rate`, 0.18)
      training on their labelled instructions.
  Each unseen house scores its own model (after its last local training) on its val_unseen
  instructions; the pooled number is their instruction-weighted mean, as in the paper.
  `centralized` pre-exploration pools every house's data in one place, so it is not a
  federated run: `experiments/fedvln/pipeline.py` runs it in one process for Table 5.

Choices where the paper is silent: env-based houses train every round (with no communication
there is nothing to schedule); the server's model in pre-exploration is what is shared (the
language encoder in fed-lan), so `checkpoints/` hold only that part; the local optimizer state
is reset every round (see `config/fedvln_recipe.py`).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, replace
from logging import INFO, WARNING
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.common import log

from config import Config
from config.fedvln_recipe import recipe_of, recipe_record
from config.schema import ConfigError
from contracts.fedvln import (
    FOLLOWER_TO,
    LANG,
    SPEAKER_SELECTION,
    SPEAKER_TO,
    follower_size,
    shared_part,
    speaker_size,
)
from contracts.messages import NUM_AUGMENTED, NUM_EXAMPLES, SAVE_STATE, SERVER_ROUND
from models import vln_checkpoint
from models.envdrop import Follower, parameter_share
from models.rng import owned
from models.speaker import Speaker
from server.recorder import (
    load_by_parity,
    load_round,
    recorder_for,
    save_by_parity,
    trailing_empty_rounds,
)
from server.strategy_args import budget_stops, central_dp, screened_args
from strategies.fedadam import moments_from, moments_state
from strategies.fedvln_strategy import FedVLNStrategy, houses_a_round
from strategies.nodes import FederationError, partitions_of, query_identities, wait_for_nodes
from strategies.screening import message_bytes
from training.convergence import Patience


@dataclass
class Plan:
    """What one stage does: which model, what is shared, who trains at which rate, who is
    scored, and what the setup round hands out."""

    model: str  # follower | speaker
    share: str  # "*" all, "lang_encoder.", "" nothing
    rates: dict[str, float]
    eval_roles: tuple[str, ...]
    epochs: float
    keep_local: bool = False  # houses keep their own follower
    init_agent: bool = False
    speaker_to: tuple[str, ...] = ()  # roles that get the speaker in setup
    follower_to: tuple[str, ...] = ()  # roles that get the starting follower in setup
    routes: int = 0


def plan_of(c: Config) -> Plan:
    stage, variant = c.fedvln.stage, c.fedvln.variant
    r = recipe_of(c.fedvln).seen_rate
    both = ("seen", "unseen")
    scored = both if c.fedvln.eval_seen else ("unseen",)
    if stage == "agent":
        return Plan("follower", "*", {"seen": r}, scored, c.fedvln.local_epochs)
    if stage == "speaker":
        return Plan("speaker", "*", {"seen": r}, scored, c.fedvln.speaker_epochs)
    if stage == "augment":
        # aug-routes 0 is augmentation's control (issue 41): the same restart from agent-init,
        # patience and cap, on labels alone, so "augmentation gains" is not confounded with
        # "fine-tuning again gains"; then no house needs the speaker
        return Plan(
            "follower",
            "*",
            {"seen": r},
            scored,
            c.fedvln.local_epochs,
            init_agent=True,
            speaker_to=("seen",) if c.fedvln.aug_routes else (),
            routes=c.fedvln.aug_routes,
        )
    r1, r2 = c.fedvln.unseen_rate, c.fedvln.preexplore_seen_rate
    common = dict(
        eval_roles=("unseen",),
        epochs=c.fedvln.preexplore_epochs,
        keep_local=True,
        init_agent=True,
        speaker_to=("unseen",),
        routes=c.fedvln.preexplore_routes,
    )
    if variant == "env-based":
        rate = c.fedvln.env_based_rate
        return Plan("follower", "", {"unseen": rate}, follower_to=("unseen",), **common)
    if variant == "fed-full":
        return Plan("follower", "*", {"unseen": r1}, follower_to=("unseen",), **common)
    if variant == "fed-lan":
        return Plan("follower", LANG, {"unseen": r1}, follower_to=("unseen",), **common)
    return Plan("follower", LANG, {"unseen": r1, "seen": r2}, follower_to=both, **common)


def check_config(c: Config) -> Plan:
    """The stage's plan, or ConfigError naming the key (ranges and choices: config/fedvln.py;
    here only what needs files: the checkpoints a stage starts from)."""
    plan = plan_of(c)
    if c.fedvln.speaker_round == "chain" and c.dp.mode == "central":
        raise ConfigError(  # central DP noises only the aggregate the server releases
            "run config 'fedvln.speaker-round' = \"chain\" relays each house's model, un-noised, "
            "to the next house, and a house's update moves every later house's start, so its "
            "influence on the mean is not bounded by dp.clip: 'dp.mode' = \"central\" protects "
            'neither (use dp.mode = "local": each house noises what it returns)'
        )
    if not c.fedvln.data_dir:  # the embedded houses: known before any node starts
        check_mixing(c, plan, {"seen": c.fedvln.train_houses, "unseen": c.fedvln.unseen_houses})
    if recipe_of(c.fedvln).server_opt == "adam" and c.dp.mode == "central":
        raise ConfigError(  # strategies/dp.py scales its noise by Eq. 7's eta
            "the server step 'fedvln.server-opt' = \"adam\" (this stage's, or the run "
            "config's) moves the model by Adam's normalised step, not by eta times the noised "
            'mean that \'dp.mode\' = "central" calibrates to: use dp.mode = "local", or '
            'fedvln.server-opt = "avg"'
        )
    needs = (["agent-init"] if plan.init_agent else []) + (
        ["speaker-init"] if plan.speaker_to else []
    )
    for key in needs:
        path = getattr(c.fedvln, key.replace("-", "_"))
        if not path:
            raise ConfigError(
                f"stage {c.fedvln.stage!r} needs run config 'fedvln.{key}': a checkpoint of "
                f"the {'agent' if 'agent' in key else 'speaker'} stage"
            )
        if not Path(path).is_file():
            raise ConfigError(f"run config 'fedvln.{key}': {path} is not a file")
    return plan


def _houses(grid, c: Config) -> tuple[dict[int, int], dict[int, dict]]:
    """(node -> partition, partition -> identity) of every house, checked for agreement."""
    first = wait_for_nodes(grid, 1, c.run.node_wait_timeout)[:1]
    waits = (c.run.node_wait_timeout, c.run.node_start_timeout)
    houses = int(query_identities(grid, first, *waits)[first[0]]["houses"])
    if houses != c.run.num_clients:  # plain `flwr run .` says 10 whatever the data holds
        log(
            WARNING,
            "[fedembodied] FedVLN: the houses' data holds %d houses (seen and unseen), the run "
            "config num-clients=%d: waiting for %d nodes, one per house (plain `flwr run .`: "
            '--federation-config "num-supernodes=%d")',
            houses,
            c.run.num_clients,
            houses,
            houses,
        )
    nodes = wait_for_nodes(grid, houses, c.run.node_wait_timeout)
    idents = query_identities(grid, nodes, *waits)
    parts = partitions_of(idents)
    by_part = {parts[n]: i for n, i in idents.items()}
    names = [i["house"] for i in by_part.values()]
    if len(set(names)) != len(names):
        raise FederationError(f"two nodes hold the same house: {sorted(names)}")
    sizes = {(int(i["vocab-size"]), int(i["feature-dim"])) for i in by_part.values()}
    if len(sizes) != 1:
        raise FederationError(f"houses disagree on (vocabulary, feature) sizes: {sorted(sizes)}")
    return parts, by_part


def _architecture(size):
    """A model size without what only training reads (the speaker's word dropout): a speaker
    trained with any word dropout starts or writes for a run with another."""
    return replace(size, word_dropout=0.0) if hasattr(size, "word_dropout") else size


def _load_init(path: str, want) -> torch.nn.Module:
    model, _, _ = vln_checkpoint.load(path)
    if _architecture(model.size) != _architecture(want):
        raise ConfigError(
            f"{path}: a {type(model).__name__} of size {model.size}, but this "
            f"run's houses and config need {want}"
        )
    return model


def _setup_round(grid, c, plan: Plan, parts, idents, recorder, follower, speaker) -> None:
    """Round 0: hand the starting follower and/or the speaker to the houses that need them."""
    recorder.start_round(0)
    msgs = []
    for node, p in sorted(parts.items(), key=lambda kv: kv[1]):
        role = idents[p]["role"]
        conf = {"step": "setup", "routes": plan.routes, SERVER_ROUND: 0, SAVE_STATE: True}
        content = RecordDict({"config": ConfigRecord(conf)})  # saved: a resumed stage keeps it
        if role in plan.follower_to:
            content["follower"] = ArrayRecord(follower.state_dict())
        if role in plan.speaker_to:
            content["speaker"] = ArrayRecord(speaker.state_dict())
        if len(content.array_records):
            msgs.append(Message(content, dst_node_id=node, message_type=MessageType.TRAIN))
    recorder.add_bytes(down=sum(message_bytes(m) for m in msgs))
    n_aug = 0
    for rep in grid.send_and_receive(msgs, timeout=c.run.round_timeout):
        if rep.has_error():
            raise FederationError(
                f"house of node {rep.metadata.src_node_id} failed its setup: {rep.error.reason}"
            )
        m = rep.content["metrics"]
        n_aug += int(m[NUM_AUGMENTED])
        recorder.add_client(
            node=rep.metadata.src_node_id,
            partition=parts[rep.metadata.src_node_id],
            num_examples=int(m[NUM_EXAMPLES]),
            bytes_up=message_bytes(rep),
            status="ok",
        )
    recorder.add_metrics({"augmented_episodes": n_aug})
    recorder.end_round()
    log(
        INFO,
        "[fedembodied] setup: %d houses received models; %d routes sampled in the "
        "houses for the speaker",
        len(msgs),
        n_aug,
    )


def run(grid, c: Config, name: str) -> None:
    """One FedVLN stage: the houses, the starting models, the setup round (models and routes
    to the houses that need them), then the rounds of FedVLNStrategy (Eq. 7) with a line and
    the best checkpoint after each."""
    plan = check_config(c)
    stage, rounds = c.fedvln.stage, c.run.num_server_rounds
    tag = stage + (f"/{c.fedvln.variant}" if stage == "preexplore" else "")
    recorder = recorder_for(c, name, stage=tag.replace("/", "-"))
    done = recorder.last_round()
    parts, idents = _houses(grid, c)
    check_mixing(c, plan, dict(Counter(i["role"] for i in idents.values())))  # data-dir's too
    follower, speaker = _starting_models(c, plan, idents)
    model = speaker if plan.model == "speaker" else follower
    shared = _announce(c, plan, tag, recorder, model, follower, idents)
    if (plan.speaker_to or plan.follower_to) and not done:
        _setup_round(grid, c, plan, parts, idents, recorder, follower, speaker)
    elif plan.speaker_to or plan.follower_to:  # each house restored its setup from its disk
        log(INFO, "[fedembodied] resuming: the houses keep this stage's setup on their disks")
    strategy = _strategy(c, plan, {p: i["role"] for p, i in idents.items()}, parts, recorder)
    key = SPEAKER_SELECTION if plan.model == "speaker" else "val_unseen_sr"
    best = Patience(c.fedvln.patience)
    last = {"arrays": None, "round": done}
    t0 = time.perf_counter()
    initial = shared
    if done:  # resume: the shared arrays after the last finished round, the best score so far
        # env-based pre-exploration shares nothing: its round checkpoints are empty, and each
        # house's own model comes back from its disk
        initial = ArrayRecord(load_round(recorder, done)) if len(shared) else shared
        strategy.round_offset = done
        strategy.empty_rounds = trailing_empty_rounds(recorder)
        if strategy.server_opt == "adam":  # FedAdam's moments as of that round
            strategy.moments = moments_from(load_by_parity(recorder, "server-adam", done))
        best = Patience.replay(
            c.fedvln.patience,
            [(int(r["round"]), float(r[key])) for r in recorder.rounds if key in r],
        )
        log(INFO, "[fedembodied] resuming FedVLN %s after round %d of %d", tag, done, rounds)
    fed = strategy
    if c.dp.mode == "central":  # Flower's DP wrapper (strategies/dp.py)
        strategy = central_dp(strategy, c, recorder)

    def end_of_round(server_round: int, arrays: ArrayRecord):
        if server_round == 0:
            return None
        server_round += strategy.round_offset
        row = recorder.end_round(arrays)
        if fed.server_opt == "adam":  # a resumed run goes on with the same moments
            save_by_parity(recorder, "server-adam", server_round, moments_state(fed.moments))
        last.update(arrays=arrays, round=server_round)
        if best.update(float(row.get(key, math.nan)), server_round) and plan.share == "*":
            _save(model, arrays, recorder.out / "best.pt", round=server_round, **{key: best.best})
        _round_line(server_round, rounds, row)
        if best.stop:
            raise _Converged
        return None

    if not best.stop:  # a resumed stage may have converged already
        try:
            with budget_stops(recorder):
                _start(strategy, grid, c, plan, initial, rounds - done, end_of_round)
        except _Converged:
            log(
                INFO,
                "[fedembodied] FedVLN %s converged: %s has not improved on %.4g (round %d) "
                "for %d evaluations; stopped after round %d of %d",
                tag,
                key,
                best.best,
                best.best_at,
                best.patience,
                last["round"],
                rounds,
            )
    if plan.share == "*":  # the last round's model (a resumed, finished stage: its last round's)
        _save(model, last["arrays"] or initial, recorder.out / "model.pt", rounds=last["round"])
    recorder.write_config(
        wall_s=round(time.perf_counter() - t0, 2),
        convergence={
            "patience": best.patience,
            "selection": key,
            "best": best.best if best.best_at is not None else None,
            "best_round": best.best_at,
            "last_round": last["round"],
            "stopped_early": best.stop,
        },
    )
    recorder.write_config(wall_s=round(time.perf_counter() - t0, 2))


def _start(strategy, grid, c: Config, plan: Plan, initial, rounds: int, end_of_round) -> None:
    """Flower's round loop for `rounds` rounds of the stage's step, `end_of_round` after each."""
    strategy.start(
        grid=grid,
        initial_arrays=initial,
        num_rounds=rounds,
        timeout=c.run.round_timeout,
        train_config=ConfigRecord(
            {
                "step": plan.model,
                "epochs": plan.epochs,
                "share": plan.share,
                "keep-local": plan.keep_local,
                SPEAKER_TO: ",".join(plan.speaker_to),
                FOLLOWER_TO: ",".join(plan.follower_to),
            }
        ),
        evaluate_config=ConfigRecord({"model": plan.model, "local": plan.keep_local}),
        evaluate_fn=end_of_round,
    )


class _Converged(Exception):
    """Raised by the end-of-round hook to leave Flower's round loop once patience runs out."""


def _starting_models(c: Config, plan: Plan, idents: dict) -> tuple[Follower, Speaker]:
    """The follower and speaker the stage starts from: the checkpoints it names, else new
    models drawn from the run's seed (models/rng)."""
    vocab, feat = int(idents[0]["vocab-size"]), int(idents[0]["feature-dim"])
    with owned(c.run.seed):
        if plan.init_agent:
            follower = _load_init(c.fedvln.agent_init, follower_size(c, vocab, feat))
        else:
            follower = Follower(follower_size(c, vocab, feat))
        speaker = (
            _load_init(c.fedvln.speaker_init, speaker_size(c, vocab, feat))
            if plan.speaker_to
            else Speaker(speaker_size(c, vocab, feat))
        )
    return follower, speaker


def _announce(c, plan: Plan, tag: str, recorder, model, follower, idents) -> ArrayRecord:
    """What the stage shares, recorded in config.json and said in one line; the shared part."""
    n_params = sum(p.numel() for p in model.parameters())
    shared = shared_part(model, plan.share)
    n_shared = sum(int(a.numpy().size) for a in shared.values())
    roles = [i["role"] for i in idents.values()]
    recorder.write_config(
        num_parameters=n_params,
        shared_parameters=n_shared,
        shared_fraction=n_shared / n_params,
        language_encoder_fraction=parameter_share(follower, LANG),
        houses={i["house"]: i["role"] for i in idents.values()},
    )
    log(
        INFO,
        "[fedembodied] FedVLN %s: %d seen + %d unseen houses; %s of %d parameters, "
        "%d shared (%.1f%%); results in %s",
        tag,
        roles.count("seen"),
        roles.count("unseen"),
        plan.model,
        n_params,
        n_shared,
        100 * n_shared / n_params,
        recorder.out,
    )
    return shared


def check_mixing(c: Config, plan: Plan, counts: dict[str, int]) -> None:
    """ConfigError when the stage's rounds train fewer houses than fedvln.min-round-houses
    (strategies/fedvln_strategy.py, Mixing): every round would be held back. A stage that
    shares nothing (env-based pre-exploration) mixes nothing and is not bounded."""
    k, least = houses_a_round(counts, plan.rates), c.fedvln.min_round_houses
    if plan.share and k < least:
        rates = "fedvln.seen-rate"
        if c.fedvln.stage == "preexplore":
            rates = "fedvln.unseen-rate' (or 'fedvln.preexplore-seen-rate"
        raise ConfigError(
            f"stage {c.fedvln.stage!r} trains {k} house(s) a round "
            f"({', '.join(f'{n} {role}' for role, n in counts.items())}; rates {plan.rates}), "
            f"fewer than run config 'fedvln.min-round-houses' = {least}: each round's model "
            f"would reach every house with fewer houses' updates mixed in. Raise '{rates}' "
            "(or the houses), or set 'fedvln.min-round-houses' lower where every house's "
            "policy allows it"
        )


def _strategy(c: Config, plan: Plan, roles: dict, parts: dict, recorder) -> FedVLNStrategy:
    """The stage's FedVLNStrategy: per-role sampling rates, the recipe's server learning rate
    and its decay (Eq. 7), evaluation by role."""
    recipe = recipe_of(c.fedvln)
    recorder.write_config(recipe=recipe_record(c.fedvln))
    strategy = FedVLNStrategy(
        roles=roles,
        rates=plan.rates,
        eval_roles=plan.eval_roles,
        server_lr=recipe.server_lr,
        lr_decay=recipe.server_lr_decay,
        send_global_for_eval=not plan.keep_local,
        chain=c.fedvln.speaker_round == "chain",
        round_timeout=c.run.round_timeout,
        min_mixed=c.fedvln.min_round_houses,
        server_opt=recipe.server_opt,
        num_clients=len(parts),
        **screened_args(c, recorder),
    )
    strategy.partitions = parts
    return strategy


def _round_line(server_round: int, rounds: int, row: dict) -> None:
    scores = "  ".join(
        f"{s} {m} {row[f'{s}_{m}']:.1f}"
        for s in ("val_seen", "val_unseen")
        for m in ("sr", "spl", "bleu", "fidelity")
        if f"{s}_{m}" in row
    )
    log(
        INFO,
        "[fedembodied] round %d/%d  %s  loss %.3f  clients %d  up %.1f MB  wall %.1fs",
        server_round,
        rounds,
        scores or "(no evaluation)",
        row.get("train_loss", float("nan")),
        row["n_clients"],
        row["bytes_up"] / 1e6,
        row["wall_s"],
    )


def _save(model, arrays: ArrayRecord, path: Path, **extra) -> None:
    """The global model as a checkpoint the next stage (`agent-init`, `speaker-init`) loads."""
    state = model.state_dict()
    state.update(arrays.to_torch_state_dict())
    model.load_state_dict(state)
    vln_checkpoint.save(path, model, None, **extra)
