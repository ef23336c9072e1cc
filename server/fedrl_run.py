"""Server side of FedRL: the ServerApp orchestrates the two parties and relays what they send.

It holds no data and no private network. `Protocol` (training/fedrl_protocol.py) is the exchange
itself, written once over a `send(role, step, data, theta_g, evaluation, **config)` callable:
the ServerApp gives it Flower messages (`Exchange`, below). Per
round it sends beta and alpha S acting messages each (B environments per message), draws K x
batch transition ids, and relays beta's noised Q outputs to alpha, alpha's targets Y, C_alpha and
theta_g to beta, and beta's theta_g back to alpha (see `training/fedrl_party.py` for the protocol
and who acts on what, and `contracts/fedrl.py` for what a party may send).

Model selection (as the reference's main.py, which tests at the best valid epoch): every
`eval-every` rounds and in the last, one greedy episode per usable valid map, test_noise on and
off; when valid SuccRate with test_noise=on beats the best so far, each party keeps a copy of its
own networks ("keep-best"). In the last round the test split (if the run has one) is scored at
the last and at the best checkpoint: `test-...` and `best-test-...` columns; `best-valid-...`
is the valid score of the kept checkpoint. The plays of an evaluation (test_noise on and off;
in the last round the last and the kept checkpoint too) step together, one chain of two messages
a step for all of them (issue 63), so on 32x32 (T_m = 178) one evaluation is ~360 messages:
choose `eval-every` accordingly.
"""

from __future__ import annotations

import json
import math
import time
from logging import INFO

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.common import log

from config import Config
from config.schema import ConfigError
from contracts.fedrl import ACTION_IDS, PLAY, not_allowed
from contracts.messages import SAVE_STATE, SERVER_ROUND
from contracts.records import array_record, arrays_of
from envs.errors import DataError
from server.recorder import Recorder, load_by_parity, recorder_for, save_by_parity
from strategies.nodes import FederationError, query_identities, wait_for_nodes
from strategies.screening import message_bytes, one_line
from training.fedrl_protocol import Protocol, Selection
from training.fedrl_setup import Settings


def check_config(c: Config) -> Settings:
    """The run's FedRL settings, maps or corpus checked; ConfigError naming the key."""
    try:
        s = Settings.of(c)
        s.check_maps()
    except (ValueError, DataError) as e:
        raise ConfigError(
            f"run config: {e}" if not isinstance(e, ConfigError) else str(e)
        ) from None
    return s


def query_roles(grid, node_ids: list[int], timeout: float, start_s: float) -> dict[str, int]:
    """role -> node id: each node's `role` from its identity (or partition 0 alpha, 1 beta)."""
    roles: dict[str, int] = {}
    for node, ident in query_identities(grid, node_ids, timeout, start_s).items():
        role = str(ident.get("role", "")) or (
            "alpha" if int(ident["partition-id"]) == 0 else "beta"
        )
        if role in roles:
            raise FederationError(
                f"two nodes claim role {role!r}; give each SuperNode "
                "--node-config role=alpha or role=beta"
            )
        roles[role] = node
    if set(roles) != {"alpha", "beta"}:
        raise FederationError(f"FedRL needs one alpha and one beta node, got {sorted(roles)}")
    return roles


class Exchange:
    """Sends one message to one party and returns its reply, counting the bytes.

    A party whose call raised (an error reply) is sent the same step again, up to `retries`
    times, each attempt stamped with its number and a row in clients.csv: the party rebuilds
    its state from its context on every call and saves it only after a step succeeded, so a
    failed call changed nothing. No reply within the timeout, or non-finite values, stop the
    run at once: the party may have acted on the step (a late reply, a released NaN), and
    sending it again would put the two parties out of step."""

    def __init__(
        self, grid, roles: dict[str, int], recorder: Recorder, timeout: float, retries: int = 0
    ):
        self.grid, self.roles, self.rec, self.timeout = grid, roles, recorder, timeout
        self.retries = retries
        self.messages = 0
        self.up: dict[str, int] = {}  # bytes each party sent this round (its clients.csv row)
        self.round = 0  # the server round, stamped on every message

    def __call__(
        self,
        role: str,
        step: str,
        data: dict | None = None,
        theta_g=None,
        evaluation: bool = False,
        **conf,
    ):
        for attempt in range(self.retries + 1):
            content = RecordDict(
                {
                    "config": ConfigRecord(
                        {"step": step, SERVER_ROUND: self.round, "attempt": attempt, **conf}
                    )
                }
            )
            if data:
                content["data"] = array_record(data)
            if theta_g is not None:
                content["theta-g"] = theta_g
            kind = MessageType.EVALUATE if evaluation else MessageType.TRAIN
            msg = Message(content, dst_node_id=self.roles[role], message_type=kind)
            t0 = time.monotonic()
            replies = list(self.grid.send_and_receive([msg], timeout=self.timeout))
            self.messages += 1
            if not replies:
                # the wait it was given: the grid's adaptive timeout (strategies/timeouts.py)
                # may have cut the run config's round-timeout short, so say both
                waited = time.monotonic() - t0
                self.rec.add_client(
                    node=self.roles[role],
                    partition=role,
                    status=f"failed: no reply to {step!r} within {waited:.1f} s",
                )
                cut = ", cut short by timeout-factor" if waited < self.timeout - 1 else ""
                raise FederationError(
                    f"{role} did not answer {step!r} in round {self.round}: no reply after "
                    f"{waited:.1f} s (round-timeout {self.timeout:.0f} s{cut})"
                )
            rep = replies[0]
            if not rep.has_error():
                break
            log(
                INFO,
                "[fedembodied] %s failed in %r (attempt %d):\n%s",
                role,
                step,
                attempt,
                rep.error.reason,
            )
            self.rec.add_client(
                node=self.roles[role],
                partition=role,
                status=f"failed in {step!r}, attempt {attempt + 1}: {one_line(rep.error.reason)}",
            )
        else:  # two parties cannot lose one: the run stops, naming it
            raise FederationError(
                f"{role} failed in {step!r} in round {self.round} "
                f"{self.retries + 1} times (fedrl.retries = {self.retries}); "
                f"last: {one_line(rep.error.reason)}"
            )
        self.rec.add_bytes(up=message_bytes(rep), down=message_bytes(msg), evaluation=evaluation)
        self.up[role] = self.up.get(role, 0) + message_bytes(rep)
        out = arrays_of(rep.content["data"])
        theta = rep.content.get("theta-g")
        sent = {**out, **{f"theta-g/{k}": v for k, v in arrays_of(theta).items()}}
        bad = [k for k, v in sent.items() if v.dtype.kind == "f" and not np.isfinite(v).all()]
        if bad:  # relaying NaN/inf would poison the other party's network
            self.rec.add_client(
                node=self.roles[role],
                partition=role,
                status=f"rejected: non-finite {', '.join(bad)} in {step!r}",
            )
            raise FederationError(
                f"{role} sent non-finite values in {step!r} in round {self.round}: {', '.join(bad)}"
            )
        self.check_relayed(role, step, out, theta)
        metrics = dict(rep.content["metrics"]) if "metrics" in rep.content else {}
        return out, theta, metrics

    def check_relayed(self, role: str, step: str, out: dict, theta) -> None:
        """What the server relays to the other party must be what the protocol allows:
        only the arrays `SENDS` lists, action ids as integers in [-1, 16) (4 moves, 4 x 4 joint
        actions, Text2Action's 2; beta's -1 = stays, in joint-action mode), and theta_g with the names and shapes it had the first time
        (a wrong one would reach the other party's network unchecked)."""
        extra = not_allowed(role, step, out)
        if extra:
            raise FederationError(
                f"{role} sent arrays {extra} in {step!r}, which the protocol does not relay"
            )
        for k in out:
            if (
                k.split(PLAY, 1)[0] in ("a-alpha", "a-beta")
                and out[k].size
                and (
                    out[k].dtype.kind not in "iu"
                    or out[k].min() < ACTION_IDS.start
                    or out[k].max() >= ACTION_IDS.stop
                )
            ):
                raise FederationError(f"{role} sent {k} that are not action ids in {step!r}")
        if theta is not None:
            shapes = {k: tuple(v.shape) for k, v in theta.items()}
            self.theta_shapes = getattr(self, "theta_shapes", None) or shapes
            if shapes != self.theta_shapes:
                raise FederationError(f"{role} sent a theta_g of other names or shapes in {step!r}")


class Floors:
    """The floor each evaluation is drawn against (issue 66): the paper's random baseline on the
    same split (Grid-World: both agents move uniformly at random, the `random-both` row of
    Table 1; Text2Action: each word selected with probability 1/2, Table 2's random row),
    played by the server on the maps or texts it already reads to check the run (no party is
    asked; its own seeded stream, so the parties' runs are unchanged). rounds.csv gets
    `floor-<split>-<metric>`; the run's plots draw it on that split's curves."""

    def __init__(self, s: Settings):
        self.s, self.done = s, {}

    def __call__(self, split: str) -> dict:
        if split not in self.done:
            from training.fedrl_baselines import RandomLocal

            scores = RandomLocal(self.s, both=not self.s.text).evaluate(split)
            self.done[split] = {f"floor-{k}": v for k, v in scores.items()}
        return self.done[split]


def run(grid, c: Config, name: str) -> None:
    s = check_config(c)
    recorder = recorder_for(c, name)
    try:
        _run(grid, s, c, recorder)
    except FederationError as e:  # what stopped the run is in clients.csv too, not only the log
        recorder.add_client(node="", partition="", status=f"run stopped: {one_line(str(e))}")
        recorder.write_clients()
        raise


def _run(grid, s: Settings, c, recorder: Recorder) -> None:
    rounds, eval_every = c.run.num_server_rounds, c.run.eval_period
    nodes = wait_for_nodes(grid, 2, c.run.node_wait_timeout)
    roles = query_roles(grid, nodes, c.run.node_wait_timeout, c.run.node_start_timeout)
    send = Exchange(grid, roles, recorder, c.run.round_timeout, retries=c.fedrl.retries)
    proto = Protocol(s, send, progress=True)
    select = Selection(s.select_key())
    maps = _announce(s)
    eps: dict[str, float | None] = {"alpha": None, "beta": None}  # for the round line
    privacy: dict = {}
    floors = Floors(s)
    t_start = time.perf_counter()
    done = recorder.last_round()
    if done:
        privacy = load_round(recorder, done, proto, select, send)
        log(INFO, "[fedembodied] resuming FedRL after round %d of %d", done, rounds)
    for rnd in range(done + 1, rounds + 1):
        recorder.start_round(rnd)
        send.round, send.up = rnd, {}
        evaluating = rnd == rounds or rnd % eval_every == 0
        metrics = proto.train_round(evaluating)
        metrics["messages"] = send.messages
        if evaluating:
            metrics.update(select(proto, rnd, rnd == rounds, bool(len(s.test))))
            metrics.update(proto.privacy())  # the evaluation's releases counted too
            metrics.update(floors("valid"))
            if rnd == rounds and len(s.test):
                metrics.update(floors("test"))
        privacy.update({k: v for k, v in metrics.items() if "epsilon" in k or "releases" in k})
        recorder.add_metrics(metrics)
        for role in ("alpha", "beta") if evaluating else ():  # each party writes its own state
            send(role, "checkpoint", evaluation=True, **{SAVE_STATE: True})
        for role in ("alpha", "beta"):
            recorder.add_client(
                node=roles[role], partition=role, bytes_up=send.up.get(role, 0), status="ok"
            )
        save_round(recorder, rnd, proto, select, send, privacy)  # before rounds.csv says rnd
        _round_line(rnd, rounds, recorder.end_round(proto.theta_g), eps, proto.claim_problems)
    recorder.write_config(
        privacy={
            **privacy,
            "delta": s.delta,
            "sigma": s.sigma,
            "clip": s.clip_bound,
            "insecure_no_noise": c.fedrl.insecure_no_noise,
        },
        maps=maps,
        rules=s.rules,
        action_mode=s.mode,
        update_ratio=s.update_ratio,
        wall_s=round(time.perf_counter() - t_start, 2),
    )
    log(INFO, "[fedembodied] privacy at delta=%g: %s", s.delta, ledger_line(privacy))


def ledger_line(privacy: dict) -> str:
    """Each party's epsilon as the server counted it from what it relayed
    (training/fedrl_privacy.RelayLedger), with the party's own claim where it differs or is
    missing."""
    parts = []
    for role in ("alpha", "beta"):
        eps = privacy.get(f"{role}-privacy-epsilon")
        if eps is None:
            parts.append(f"{role}: released nothing")
            continue
        k = privacy.get(f"{role}-max-releases", float("nan"))
        part = f"{role} epsilon {eps:.4g} ({k:.0f} releases of one record at most)"
        claim = privacy.get(f"{role}-claimed-epsilon")
        if claim is None:
            part += f", no usable claim from party {role}"
        elif not math.isclose(claim, eps, rel_tol=1e-9) and claim != eps:
            part += f", party {role} claims {claim:.4g}"
        parts.append(part)
    return ", ".join(parts)


def _announce(s: Settings) -> dict:
    """Log the world, the exchange's shape and each split's maps (or texts); returns the
    split report that config.json keeps."""
    maps = s.map_report()
    for split, rep in maps.items():
        log(INFO, "[fedembodied] %s %s: %s", split, "texts" if s.text else "maps", rep)
    world = (
        f"Text2Action {s.t2a_dataset} fold {s.t2a_fold}/{s.t2a_folds}"
        if s.text
        else f"Grid-World {s.size}x{s.size}, {s.rules} rules"
    )
    log(
        INFO,
        "[fedembodied] FedRL %s, %s mode, B=%d envs x %d steps, K=%d updates/round "
        "(%.3g per transition)",
        world,
        s.mode,
        s.envs,
        s.act_steps,
        s.updates,
        s.update_ratio,
    )
    return maps


def _round_line(rnd: int, rounds: int, row: dict, eps: dict, problems: list[str]) -> None:
    """The round's log line: its valid/test scores (when it evaluated), the epsilon the server
    counts for each party so far (`eps` keeps a party's last value through rounds it released
    nothing in), and any party's claim that differs from it or is impossible."""
    scores = "  ".join(
        f"{k}={v:.3g}"
        for k, v in row.items()
        if k.endswith(("succ-rate-test_noise=on", "f1-test_noise=on")) and v == v
    )
    for r in eps:
        v = row.get(f"{r}-privacy-epsilon")
        if isinstance(v, float) and v == v:
            eps[r] = v
    log(
        INFO,
        "[fedembodied] round %d/%d  %s  privacy epsilon alpha=%s beta=%s  wall=%.2fs%s",
        rnd,
        rounds,
        scores or "(not evaluated this round)",
        *(f"{v:.3g}" if isinstance(v, float) else "not reported yet" for v in eps.values()),
        row["wall_s"],
        "".join(f"  CLAIM MISMATCH: {p}" for p in problems),
    )


def _tensors(arrays) -> dict | None:
    return None if arrays is None else {k: torch.from_numpy(np.array(v)) for k, v in arrays.items()}


def save_round(
    recorder: Recorder, rnd: int, proto: Protocol, select: Selection, send: Exchange, privacy: dict
) -> None:
    """What the server needs to go on after round `rnd`: theta_g, the protocol's in-flight
    values (alpha's last actions and C_alpha, beta's deferred update), counters, its RNG, model selection and the
    privacy ledger's last report (checkpoints/fedrl_{0,1}.pt; the parties save their own
    state: clients/state_store.py)."""
    theta = None if proto.theta_g is None else {k: v.numpy() for k, v in proto.theta_g.items()}
    pending = None
    if proto.pending:
        data, theta_a = proto.pending
        pending = {
            **{f"data/{k}": v for k, v in data.items()},
            **{f"theta/{k}": v.numpy() for k, v in theta_a.items()},
        }
    state = {
        "theta_g": _tensors(theta),
        "pending": _tensors(pending),
        "prev": None if proto.prev is None else torch.from_numpy(np.array(proto.prev)),
        "c_alpha": None if proto.c_alpha is None else torch.from_numpy(np.array(proto.c_alpha)),
        "counters": [proto.transitions, proto.updates, proto.samples, send.messages],
        "rng": json.dumps(proto.rng.bit_generator.state),
        "theta_shapes": json.dumps(getattr(send, "theta_shapes", None)),
        "select": json.dumps({"score": select.score, "best": select.best}),
        "privacy": json.dumps(privacy),
        "ledger": _tensors(proto.ledger.arrays()),
    }
    save_by_parity(recorder, "fedrl", rnd, state)


def load_round(
    recorder: Recorder, rnd: int, proto: Protocol, select: Selection, send: Exchange
) -> dict:
    """The server's state after round `rnd` (save_round); returns the privacy report."""
    st = load_by_parity(recorder, "fedrl", rnd)
    if st["theta_g"] is not None:
        proto.theta_g = ArrayRecord({k: Array(v.numpy()) for k, v in st["theta_g"].items()})
    proto.prev = None if st["prev"] is None else st["prev"].numpy()
    pending = st.get("pending")
    if pending:
        data = {k[5:]: v.numpy() for k, v in pending.items() if k.startswith("data/")}
        theta_a = ArrayRecord(
            {k[6:]: Array(v.numpy()) for k, v in pending.items() if k.startswith("theta/")}
        )
        proto.pending = (data, theta_a)
    proto.c_alpha = None if st["c_alpha"] is None else st["c_alpha"].numpy()
    proto.transitions, proto.updates, proto.samples, send.messages = st["counters"]
    proto.rng.bit_generator.state = json.loads(st["rng"])
    shapes = json.loads(st["theta_shapes"])
    if shapes:
        send.theta_shapes = {k: tuple(v) for k, v in shapes.items()}
    proto.ledger.load({k: v.numpy() for k, v in st["ledger"].items()})
    sel = json.loads(st["select"])
    select.score, select.best = sel["score"], sel["best"]
    return json.loads(st["privacy"])
