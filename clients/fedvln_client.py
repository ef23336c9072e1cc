"""Client side of FedVLN: one ClientApp per house (see `server/fedvln_run.py` for the stages).

A node's house is `--node-config house=<scan>` on a deployed SuperNode (with `data-dir=` the
folder holding it there, else run config `fedvln.data-dir`), or, in simulation, partition p of
the seen-then-unseen house order (`training.vln_house`). Whether it is seen or
unseen follows from its data. Messages (config `step`):

* `setup`: may carry the starting follower (kept in `context.state` as this house's local
  model) and the speaker, which the house keeps with routes it samples in itself; during
  training the speaker re-writes the instructions of every route batch (back-translation with
  environmental dropout, `training.vln_agent.BackTranslation`). Nothing but counts goes back.
* `follower` / `speaker`: load the global arrays (over the local model, when the stage keeps
  one), train `epochs` passes over this house's instructions, and send back only the arrays
  whose names start with a prefix in `share` (`*` = all, "" = none) and the instruction count.
* evaluate: score the global model (or, with `local`, this house's own model) on the house's
  validation split; the reply carries metric means (navigation) or counts (BLEU's n-grams, route fidelity's
  hits, `envs.vln_fidelity.stats`).

No instruction, route or feature is ever put in a reply; `tests/test_fedvln.py` checks that on
everything sent.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict

from clients import costs, faults, policy
from config import Config, parse
from config.fedvln_recipe import recipe_of
from contracts.fedvln import (
    FOLLOWER_TO,
    SPEAKER_TO,
    follower_size,
    shared_part,
    speaker_size,
)
from contracts.messages import (
    CHAIN_ROUND,
    FIT_S,
    LOCAL_STEPS,
    MIXES_AT_LEAST,
    NUM_AUGMENTED,
    NUM_EXAMPLES,
    SERVER_ROUND,
    TRAIN_LOSS,
)
from envs.vln_data import Episode
from models.envdrop import Follower
from models.rng import owned, stream_seed
from models.speaker import Speaker
from training import vln_agent, vln_speaker
from training.optimizer_state import load_optimizer_arrays, optimizer_arrays
from training.progress import StepLog, timed
from training.vln_house import (
    House,
    follower_steps,
    grammar_words,
    house_names,
    house_of_partition,
    local_iterations,
    open_house,
    routes_house,
    setup_of,
    speaker_routes,
    spec_of,
)
from training.vln_loop import make_optimizer

LOCAL = "fedvln-follower"  # this house's own follower (pre-exploration)
SPEAKER = "fedvln-speaker"  # the speaker this house back-translates its routes with
ROUTES = "fedvln-routes"  # routes this house sampled in itself for the speaker
OPTIM = "fedvln-optimizer"  # this house's optimizer state (fedvln.optimizer-state = house)
FLOOR = "fedvln-floor-"  # + model kind: the untrained model's scores here, made once per run


def house_of(context: Context) -> House:
    c = parse(context.run_config)
    nc = context.node_config
    setup = setup_of(c, str(nc.get("data-dir", "")))
    name = str(nc.get("house", "")) or house_of_partition(setup, int(nc["partition-id"]))
    return open_house(setup, name)


def identity(context: Context) -> dict:
    """What the server learns about a house: which one, seen or not, sizes, counts."""
    h = house_of(context)
    seen, unseen = house_names(h.setup)
    return {
        "house": h.name,
        "houses": len(seen) + len(unseen),  # how many nodes the federation needs
        "role": h.role,
        "vocab-size": len(h.setup.vocab),
        "feature-dim": h.setup.world.feature_dim,
        "num-train": len(h.train),
        "num-val": len(h.val),
    }


def _model(kind: str, c: Config, h: House):
    v, f = len(h.setup.vocab), h.setup.world.feature_dim
    return (
        Follower(follower_size(c, v, f)) if kind == "follower" else Speaker(speaker_size(c, v, f))
    )


def _load(model, *records: ArrayRecord | None) -> None:
    """Later records override earlier ones (the global part over the local model)."""
    state = model.state_dict()
    for rec in records:
        if rec is not None and len(rec):
            update = rec.to_torch_state_dict()
            unknown = sorted(set(update) - set(state))
            if unknown:
                raise ValueError(f"arrays {unknown[:3]} are not part of the {type(model).__name__}")
            state.update(update)
    model.load_state_dict(state)


def allowed_share(c: Config, node_config) -> tuple[str, str]:
    """(the most this house sends up in the run's stage, the policy key that says so): decided
    by its operator's policy (clients/policy.py), never by the run or the server's message.
    Default: the paper's, the model in federated training, the language encoder in
    pre-exploration (fed-lan)."""
    p = policy.of_node(node_config)
    if c.fedvln.stage == "preexplore":
        return p.fedvln.preexplore_share, f"fedvln.preexplore-share in {p.source}"
    return p.fedvln.train_share, f"fedvln.train-share in {p.source}"


def within(requested: str, allowed: str) -> bool:
    """Whether sending the `requested` prefixes reveals nothing beyond the `allowed` ones."""
    if allowed == "*":
        return True
    want = [p for p in requested.split(",") if p] if requested != "*" else ["*"]
    have = [p for p in allowed.split(",") if p]
    return all(any(w.startswith(h) for h in have) for w in want if w != "*") and "*" not in want


def routes_of(context: Context, h: House) -> list[Episode]:
    if ROUTES not in context.state:
        return []
    rec = context.state[ROUTES]
    words = rec["instructions"] if "instructions" in rec else [""] * len(rec["paths"])
    scan = str(rec["scan"]) if "scan" in rec else h.name  # another house's: the control
    return [
        Episode(f"aug-{scan}-{k}", scan, tuple(str(p).split()), float(hd), w, 10**7 + k)
        for k, (p, hd, w) in enumerate(zip(rec["paths"], rec["headings"], words))
    ]


def back_translation(context: Context, c: Config, h: House) -> vln_agent.BackTranslation | None:
    """The house's speaker, to write its routes' words batch by batch; None when it has no
    speaker or its routes carry their own words (`fedvln.route-words = "grammar"`)."""
    if SPEAKER not in context.state or c.fedvln.route_words == "grammar":
        return None
    speaker = _model("speaker", c, h)
    _load(speaker, context.state[SPEAKER])
    return vln_agent.BackTranslation(
        speaker,
        vln_speaker.PathInputs(h.setup.world),
        h.setup.vocab,
        vln_agent.AgentSettings.of(c).max_words,
    )


def _seed(c: Config, context: Context, rnd: int) -> int:
    return stream_seed(c.run.seed, int(context.node_config.get("partition-id", 0)), rnd)


def setup(msg: Message, context: Context, c: Config, h: House) -> RecordDict:
    if "follower" in msg.content:
        context.state[LOCAL] = msg.content["follower"]
    n_aug = 0
    if "speaker" in msg.content:
        context.state[SPEAKER] = msg.content["speaker"]
        src = routes_house(h, c.fedvln.routes_house)  # h, or the control's other house
        routes = speaker_routes(src, int(msg.content["config"]["routes"]), c.run.seed)
        rec = {
            "scan": src.name,
            "paths": [" ".join(e.path) for e in routes],
            "headings": [float(e.heading) for e in routes],
        }
        if c.fedvln.route_words == "grammar":  # a perfect speaker, kept on the house's disk
            rec["instructions"] = grammar_words(src, routes, spec_of(c), c.run.seed)
        context.state[ROUTES] = ConfigRecord(rec)
        n_aug = len(routes)
    return RecordDict(
        {"metrics": MetricRecord({NUM_EXAMPLES: len(h.train) + n_aug, NUM_AUGMENTED: n_aug})}
    )


def _begin(msg: Message, context: Context):
    """(run config, message config, this house), with torch's threads set for this node."""
    c = parse(context.run_config)
    torch.set_num_threads(c.run.client_threads)
    with costs.phase("rebuild"):  # the house's setup: features, splits, vocabulary
        return c, msg.content["config"], house_of(context)


def train(msg: Message, context: Context) -> Message:
    c, conf, h = _begin(msg, context)
    step = str(conf["step"])
    if step == "setup":
        with costs.phase("work"):
            return Message(setup(msg, context, c, h), reply_to=msg)
    share, (allowed, key) = str(conf["share"]), allowed_share(c, context.node_config)
    if not within(share, allowed):
        raise policy.Refused(
            f"house {h.name}: the server asked for share={share!r}; this "
            f"house sends at most {allowed!r} in this stage (policy key {key})"
        )
    node_policy = policy.of_node(context.node_config)
    if bool(conf.get(CHAIN_ROUND, False)) and not node_policy.fedvln.allow_chain:
        raise node_policy.refuse(
            "fedvln.allow-chain",
            f"house {h.name}: a chained speaker round passes the model this house returns on "
            "to the next house, and this house serves none",
        )
    least = node_policy.fedvln.min_round_houses
    if share and int(conf.get(MIXES_AT_LEAST, 0)) < least:  # fewer houses: barely mixed
        said = (
            f"sends on a model that mixes as few as {int(conf[MIXES_AT_LEAST])} houses' "
            "updates (run config fedvln.min-round-houses; 1 in a chained round)"
            if MIXES_AT_LEAST in conf
            else "declares no fewest number of houses it mixes (an older or altered server)"
        )
        raise node_policy.refuse(
            "fedvln.min-round-houses",
            f"house {h.name}: the server {said}, and this house trains only where at least "
            f"{least} are mixed",
        )
    rnd = int(conf[SERVER_ROUND])
    fault = faults.before_training(c, faults.partition(context.node_config), rnd, "training")
    rng = np.random.default_rng(_seed(c, context, rnd))
    # this house's torch stream (models/rng); the work: the model built from the message, trained
    with owned(_seed(c, context, rnd)), costs.phase("work"):
        return _train(msg, context, c, conf, h, step, share, rnd, fault, rng)


def _check_setup(context: Context, conf, h: House) -> None:
    """A house the stage's setup round equipped must still hold what it got (a resumed stage
    restores it from the house's disk): else it refuses rather than train without it."""
    missing = [
        what
        for key, what, held in (
            (SPEAKER_TO, "the speaker and its sampled routes", SPEAKER in context.state),
            (FOLLOWER_TO, "its own follower", LOCAL in context.state),
        )
        if h.role in str(conf.get(key, "")).split(",") and not held
    ]
    if missing:
        raise ValueError(
            f"house {h.name} ({h.role}) no longer holds {' and '.join(missing)} from this "
            "stage's setup round (its saved state is gone); start the stage again"
        )


def _train(msg, context, c, conf, h, step, share, rnd, fault, rng) -> Message:
    keep_local = bool(conf.get("keep-local", False))
    _check_setup(context, conf, h)
    model = _model(step, c, h)
    _load(model, context.state.get(LOCAL) if keep_local else None, msg.content["arrays"])
    # the follower trains on the house's labelled instructions and on whatever routes its
    # setup sampled for the speaker (augment: seen houses; pre-exploration: unseen houses)
    routes = routes_of(context, h) if step == "follower" else []
    if not h.train and not routes:
        raise ValueError(f"house {h.name} ({h.role}) has nothing to train on in this stage")
    batch, cap = c.fedvln.batch_size, c.fedvln.max_local_steps
    epochs = float(conf["epochs"])
    recipe = recipe_of(c.fedvln)
    opt = make_optimizer(recipe.optimizer, model.parameters(), recipe.lr)
    keep_opt = c.fedvln.optimizer_state == "house"
    if keep_opt and f"{OPTIM}-{step}" in context.state:
        load_optimizer_arrays(opt, context.state[f"{OPTIM}-{step}"].to_torch_state_dict())
    t0 = time.perf_counter()
    if step == "follower":
        iters = follower_steps(len(h.train), len(routes), epochs, batch, cap)
        s = vln_agent.AgentSettings.of(c)
        loss = vln_agent.train_batches(
            model,
            opt,
            h.setup.world,
            list(h.train),
            vln_agent.Tokens(h.setup.vocab, s.max_words),
            s,
            iterations=iters,
            rng=rng,
            progress=StepLog(f"house {h.name} round {rnd}: follower training", iters),
            routes=routes,
            back_translate=back_translation(context, c, h),
        )
    else:
        iters = local_iterations(len(h.train), epochs, batch, cap)
        s = vln_speaker.SpeakerSettings(batch_size=batch, lr=recipe.lr)
        loss = vln_speaker.train_batches(
            model,
            opt,
            vln_speaker.PathInputs(h.setup.world),
            list(h.train),
            h.setup.vocab,
            s,
            iterations=iters,
            rng=rng,
            progress=StepLog(f"house {h.name} round {rnd}: speaker training", iters),
        )
    if keep_local:
        context.state[LOCAL] = ArrayRecord(model.state_dict())
    if keep_opt:
        context.state[f"{OPTIM}-{step}"] = ArrayRecord(optimizer_arrays(opt))
    return Message(
        RecordDict(
            {
                "arrays": ArrayRecord(
                    faults.nan_state(dict(shared_part(model, share).to_torch_state_dict()), fault)
                ),
                "metrics": MetricRecord(
                    {
                        NUM_EXAMPLES: len(h.train) + len(routes),
                        TRAIN_LOSS: loss,
                        LOCAL_STEPS: iters,
                        FIT_S: time.perf_counter() - t0,
                    }
                ),
            }
        ),
        reply_to=msg,
    )


def evaluate(msg: Message, context: Context) -> Message:
    """Metrics of this house's validation split, prefixed by it (`val_seen_sr`, ...)."""
    c, conf, h = _begin(msg, context)
    kind = str(conf["model"])
    with costs.phase("rebuild"):
        model = _model(kind, c, h)
        _load(
            model,
            context.state.get(LOCAL) if conf.get("local", False) else None,
            msg.content.get("arrays"),
        )
    with costs.phase("work"):
        metrics = _scores(c, h, kind, model)
        metrics.update({f"floor-{k}": v for k, v in _floor(context, c, h, kind).items()})
        metrics[NUM_EXAMPLES] = len(h.val)
        return Message(RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)


def _floor(context: Context, c: Config, h: House, kind: str) -> dict:
    """The floor beside every evaluation (issue 66): the same scores of an untrained model
    (fresh weights from the run seed, drawn on a forked generator so no other draw moves) on
    the same episodes. Scored at the house's first evaluation of the run, kept in its context
    (a few numbers); the server pools them as it pools the scores (`floor-val_unseen_sr`...),
    and the run's plots draw them."""
    key = FLOOR + kind
    if key not in context.state:
        with owned(stream_seed(c.run.seed, 0, 0)):
            untrained = _model(kind, c, h)
        context.state[key] = MetricRecord(_scores(c, h, kind, untrained))
    return dict(context.state[key])


def _scores(c: Config, h: House, kind: str, model) -> dict:
    """The evaluation itself: the follower's navigation metrics or the speaker's BLEU and
    route fidelity on this house's validation split."""
    if not h.val:
        metrics = {f"{h.val_split}_n": 0}
    elif kind == "follower":
        s = vln_agent.AgentSettings.of(c)
        with timed(f"house {h.name}: scoring the follower on {len(h.val)} {h.val_split} episodes"):
            m, _ = vln_agent.evaluate(
                model, h.setup.world, h.val, vln_agent.Tokens(h.setup.vocab, s.max_words), s
            )
        metrics = {
            f"{h.val_split}_n": len(h.val),
            **{f"{h.val_split}_{k}": float(v) for k, v in m.items()},
        }
    else:
        with timed(f"house {h.name}: BLEU of the speaker on {len(h.val)} {h.val_split} paths"):
            stats = vln_speaker.bleu_stats(
                model, vln_speaker.PathInputs(h.setup.world), h.val, h.setup.vocab, h.setup.data
            )
        metrics = {f"{h.val_split}_{k}": v for k, v in stats.items()}
    return metrics
