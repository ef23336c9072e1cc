"""FedRL's orchestrator, written once (paper Algorithms 1-2 in rounds), with two transports.

`Protocol` drives the exchange over any `send(role, step, data, theta_g, evaluation, **config)`:
the ServerApp gives it Flower messages (`server/fedrl_run.Exchange`), `DirectTransport` direct
calls to the parties in this process (experiments and tests, ~0.1 s less per message). Both
transports end in `dispatch`, which maps one step to a party's methods, so the Flower app and
the one-process runner cannot drift (tests/test_fedrl.py checks they compute the same numbers).

One round of the chunked exchange (B environments, S steps, K minibatches), 2S messages:
  for each of S steps:  beta.act(prev alpha actions, C_alpha)  -> C_beta, a_beta
                        alpha.act(C_beta, a_beta)  -> alpha's action ids, C_alpha of s_alpha'
  in the last step, in the same two messages:
    beta.q_outputs(ids) -> C_beta(s_j), C'_beta(s'_j)   (K minibatches, after beta.act)
    alpha.update(ids, C_beta, C'_beta) -> Y, C_alpha, theta_g, C_alpha now  (Eq. 4, 6)
  in the next round's first beta.act (or alone before an evaluation):
    beta.update(ids, Y, C_alpha, theta_g) -> theta_g                        (Eq. 5, 7)
The ids are drawn from the transitions both parties hold when beta answers the last step, i.e.
all but the B of that step, which become eligible one round later (the one change to the order
of Algorithms 1-2, measured in experiments/fedrl/throughput.py).

An evaluation's plays (valid or test; test_noise on and off; the live or the kept networks) do
not depend on each other, so they step together: one chain of 2 messages a step carries every
play still running, each play's arrays named `name#play` (`contracts.fedrl.play_key`). The
messages a run sends: python -m experiments.bench.fedrl_messages.

The two parties' messages of a step are not sent as one exchange (both at once), because no
party's next move is independent of the other's current message: beta's C_beta of step t is
computed on its world after alpha's actions of step t-1 (`prev-alpha`), and alpha's actions of
step t are chosen on C_beta of step t (Eq. 2's joint Q). Sending both at once would need beta to
release C_beta for every action alpha might take (|A| times the releases, each one counted by
the ledger), or alpha to act on a stale C_beta: other numbers and other privacy, not the paper's
exchange. The chain is therefore 2 messages a step, and fewer messages come from stepping
independent plays together (above).
"""

from __future__ import annotations

import numpy as np

from contracts.errors import FederationError
from contracts.fedrl import PLAY, SENDS, parse_plays, play_key, plays_conf, sample_ids
from contracts.messages import SAVE_STATE
from training.fedrl_party import Alpha, Beta
from training.fedrl_privacy import RelayLedger
from training.fedrl_setup import Settings
from training.progress import StepLog

# metric names about privacy: only the relay's count (RelayLedger.report) may carry them
PRIVACY = ("epsilon", "releases")


def dispatch(party, role: str, step: str, data: dict, theta_in, conf) -> tuple:
    """One step of the exchange on a party: (arrays to send, theta_g to send, metrics).
    The Flower handler and the one-process runner (experiments/fedrl/local.py) both call it."""
    prev, theta, metrics = data.get("prev-alpha"), None, None
    if (role, step) not in SENDS:
        raise ValueError(f"unknown FedRL step {step!r} for {role}")
    if step.startswith("eval-"):
        out, metrics = _play_step(party, role, step, data, theta_in, conf)
        return out, None, {**metrics, **party.privacy()}
    party.close_plays()  # any other step ends the evaluation chain
    if step == "observe":
        out = {"c-alpha": party.observe()}
    elif step == "act" and role == "beta":
        if "update-ids" in data:  # alpha's targets from the last round: UpdateQ first
            theta, metrics = _beta_update(party, data, theta_in)
        c, a = party.act(prev, data.get("c-alpha"))
        out = {"c-beta": c, "a-beta": a}
        if "ids" in data:
            out["c-beta-ids"], out["c-beta-next-ids"] = party.q_outputs(data["ids"])
    elif step == "act":
        party.set_theta_g(theta_in)
        updating = "ids" in data
        a, c = party.act(data["c-beta"], data["a-beta"], observe=not updating)
        out = {"a-alpha": a, "c-alpha": c}
        metrics = party.take_stats() if bool(conf.get("report", False)) else {}
        if updating:  # C_alpha of the current observation is computed after the update
            y, c_ids, theta, loss, c_now = party.update(
                data["ids"], data["c-beta-ids"], data["c-beta-next-ids"], None
            )
            out.update({"y": y, "c-alpha-ids": c_ids, "c-alpha": c_now})
            metrics.update({"loss-alpha": loss, **party.privacy()})
    elif step == "update":
        theta, metrics = _beta_update(party, data, theta_in)
        out = {}
    elif step == "checkpoint":  # clients/app.py saves the context (clients/state_store.py)
        out = {}
    elif step == "keep-best":
        party.set_theta_g(theta_in)
        party.keep_best()
        out = {}
    if step in ("observe", "act"):  # the party's own account
        metrics = {**(metrics or {}), **party.privacy()}
    return out, theta, metrics


def _play_step(party, role: str, step: str, data: dict, theta_in, conf) -> tuple[dict, dict]:
    """One step of every play the message names (`contracts.fedrl.parse_plays`), each on its
    own world, score and noise: arrays and metrics keyed `name#play` (`play_key`). The first
    message of a chain to a party (`start`) starts its plays with the theta_g it carries."""
    plays = parse_plays(conf["plays"])
    if bool(conf.get("start", False)):
        party.set_theta_g(theta_in)
        party.start_plays({i: (split, weights) for i, (split, weights, _) in plays.items()})
    out, metrics, ended = {}, {}, []
    for i, (_, _, noise) in plays.items():
        if i not in party.plays:
            raise ValueError(f"evaluation play {i} was not started on {role}")
        with party.playing(i):
            if step == "eval-observe":
                out[play_key("c-alpha", i)] = party.observe(party.eval_world)
            elif role == "beta":
                c, a = party.eval_act(
                    data.get(play_key("prev-alpha", i)), data.get(play_key("c-alpha", i)), noise
                )
                out.update({play_key("c-beta", i): c, play_key("a-beta", i): a})
            else:
                a, active, c = party.eval_act(
                    data[play_key("c-beta", i)], data[play_key("a-beta", i)], noise
                )
                out.update({play_key("a-alpha", i): a, play_key("c-alpha", i): c})
                metrics[play_key("active", i)] = float(active)
                if not active:
                    metrics.update({play_key(k, i): v for k, v in party.eval_result().items()})
                    ended.append(i)
    for i in ended:
        party.end_play(i)
    return out, metrics


def _beta_update(party, data: dict, theta_in) -> tuple[dict, dict]:
    theta, loss = party.update(data["update-ids"], data["y"], data["c-alpha-ids"], theta_in)
    return theta, {"loss-beta": loss, **party.privacy()}


def checkpoints(weights: str | tuple[str, ...]) -> tuple[str, ...]:
    """An evaluation's `weights`, one name ("last" | "best") or several, as a tuple."""
    return (weights,) if isinstance(weights, str) else tuple(weights)


class Protocol:
    """Algorithms 1-2 in rounds, model selection and evaluation, over any `send`."""

    def __init__(self, s: Settings, send, progress: bool = False):
        self.s, self._send = s, send
        # each party's epsilon as the relay counts it (training/fedrl_privacy.RelayLedger)
        self.ledger = RelayLedger(s.sigma, s.clip_bound, s.delta)
        self.claim_problems: list[str] = []
        self.progress = progress  # log evaluation steps (~700 messages on 32x32)
        self.rng = np.random.default_rng([s.seed, 99])
        self.theta_g = None
        self.prev = None  # alpha's last action ids, not yet seen by beta
        self.c_alpha = None  # C_alpha of alpha's current observation (paper action mode)
        self.pending = None  # alpha's last targets for beta: ids, Y, C_alpha(s_j), theta_g
        self.transitions = self.updates = self.samples = 0

    def send(self, role: str, step: str, data=None, theta_g=None, evaluation=False, **conf):
        """The transport's send, noting the figure the party claims for itself."""
        out, theta, metrics = self._send(
            role, step, data, theta_g=theta_g, evaluation=evaluation, **conf
        )
        for which in ("epsilon", "eval-epsilon"):
            if metrics and f"{role}-claimed-{which}" in metrics:
                self.ledger.claim(role, metrics[f"{role}-claimed-{which}"], which)
        # no party's word on privacy reaches the round's metrics: the server's count stands
        # there, the checked claim beside it (a party could name the other's keys, too)
        return (
            out,
            theta,
            {k: v for k, v in (metrics or {}).items() if not any(w in k for w in PRIVACY)},
        )

    def privacy(self) -> dict:
        """The server's count of each party's epsilon, the checked claims beside it; the
        problems with the claims are kept for the round line (`claim_problems`)."""
        out, self.claim_problems = self.ledger.report()
        return out

    def _opened(self, role: str, first: int, rows: int) -> None:
        """`rows` Q outputs about the transitions that start at the current observation."""
        self.ledger.transitions(role, np.arange(first, first + rows))

    def train_round(self, evaluating: bool = False) -> dict:
        """S acting steps, 2 messages each; the last step's two also carry the round's K
        updates (training/fedrl_party.py). A round that evaluates ends with beta's deferred
        update (one more message); any other has its last messages say `save-state` (the
        parties write their state to disk with them; an evaluating round's are written after
        the evaluation)."""
        s, send = self.s, self.send
        metrics: dict = {}
        if s.mode == "paper" and self.c_alpha is None:  # the run's first step only
            self.c_alpha = send("alpha", "observe")[0]["c-alpha"]
            self._opened("alpha", self.transitions, len(self.c_alpha))
        for step in range(s.act_steps):
            last = step == s.act_steps - 1
            mark = {SAVE_STATE: True} if last and not evaluating else {}
            # beta holds the transitions of every step before this one
            ids = sample_ids(self.rng, self.transitions + s.envs * step, s) if last else None
            data, theta = {"prev-alpha": self.prev, "c-alpha": self.c_alpha}, None
            if step == 0 and self.pending:
                data.update(self.pending[0])
                theta = self.pending[1]
            if ids is not None:
                data["ids"] = ids
            b, theta_b, mb = send("beta", "act", data, theta_g=theta, **mark)
            base = self.transitions + s.envs * step  # the transitions this step opens
            self._opened("beta", base, len(b["c-beta"]))
            if ids is not None:  # C_beta(s_j) and C'_beta(s'_j): two releases per id
                self.ledger.transitions("beta", ids)
                self.ledger.transitions("beta", ids)
            self.pending = None if theta is not None else self.pending
            self.theta_g = theta_b if theta_b is not None else self.theta_g
            data = {"c-beta": b["c-beta"], "a-beta": b["a-beta"]}
            if ids is not None:
                data.update(
                    {
                        "ids": ids,
                        "c-beta-ids": b["c-beta-ids"],
                        "c-beta-next-ids": b["c-beta-next-ids"],
                    }
                )
            a, theta_a, ma = send(
                "alpha",
                "act",
                data,
                theta_g=self.theta_g if step == 0 else None,
                report=last,
                **mark,
            )
            self.prev, self.c_alpha = a["a-alpha"], a.get("c-alpha")
            self._opened("alpha", base, len(self.prev))  # its move: a fresh draw of its noise
            if "c-alpha-ids" in a:
                self.ledger.transitions("alpha", ids)
            if self.c_alpha is not None:  # about the observation after this step
                self._opened("alpha", base + s.envs, len(self.c_alpha))
            if ids is not None:
                self.pending = (
                    {"update-ids": ids, "y": a["y"], "c-alpha-ids": a["c-alpha-ids"]},
                    theta_a,
                )
                self.updates += len(ids)
                self.samples += ids.size
            metrics.update({**mb, **ma})
        self.transitions += s.envs * s.act_steps
        if evaluating:
            metrics.update(self.flush())
        metrics.update(
            {"env-steps": self.transitions, "updates": self.updates, "train-samples": self.samples}
        )
        return {**metrics, **self.privacy()}

    def flush(self) -> dict:
        """Beta's deferred update alone (before an evaluation or keeping the best): its
        metrics, {} when none is pending."""
        if not self.pending:
            return {}
        data, theta = self.pending
        _, self.theta_g, m = self.send("beta", "update", data, theta_g=theta)
        self.pending = None
        return m

    def evaluate(self, split: str, weights: str | tuple[str, ...] = "last") -> dict:
        """Scores on `split` with test_noise on and off, at each of `weights` (live "last",
        kept "best"): all these plays step together, one chain of messages (`play`)."""
        self.flush()
        return self.play(
            [(split, w, noise) for w in checkpoints(weights) for noise in (True, False)]
        )

    def play(self, plays: list[tuple[str, str, bool]]) -> dict:
        """One greedy episode per usable map (or text) of each play's split, both parties on
        their federated Q; the scores are alpha's (Alpha.eval_result). The plays
        [(split, weights, test_noise)] do not depend on each other, so each message carries a
        step of every play still running (issue 63: 2 messages a step for all of them, where
        a play each took 2 a step for itself); a play leaves the chain when its episodes end."""
        send, paper = self.send, self.s.mode == "paper"
        running = dict(enumerate(plays))
        prev: dict[int, np.ndarray | None] = dict.fromkeys(running)
        c_alpha: dict[int, np.ndarray | None] = dict.fromkeys(running)
        scores: dict = {}
        step = 0  # the plays' observation step; every release is counted about its record

        def count(role: str, i: int, rows, noised: bool = True) -> None:
            if rows is not None:
                self.ledger.evaluation(role, running[i][0], step, len(rows), noised)

        def keyed(name: str, values: dict) -> dict:
            return {play_key(name, i): v for i, v in values.items() if v is not None}

        def need(got: dict, name: str, i: int, role: str):
            if play_key(name, i) not in got:  # a party that leaves a play out stops the run
                raise FederationError(f"{role} left {play_key(name, i)!r} out of its reply")
            return got[play_key(name, i)]

        if paper:
            out = send(
                "alpha",
                "eval-observe",
                theta_g=self.theta_g,
                evaluation=True,
                start=True,
                plays=plays_conf(running),
            )[0]
            for i in running:
                c_alpha[i] = need(out, "c-alpha", i, "alpha")
                count("alpha", i, c_alpha[i])
        what = ", ".join(f"{sp} {w} test_noise={'on' if n else 'off'}" for sp, w, n in plays)
        tick = StepLog(what, self.s.horizon + 1) if self.progress else None
        for first in [True] + [False] * self.s.horizon:
            if tick:
                tick()
            b, _, _ = send(
                "beta",
                "eval-act",
                {**keyed("prev-alpha", prev), **keyed("c-alpha", c_alpha)},
                evaluation=True,
                start=first,
                plays=plays_conf(running),
            )
            data = {}
            for i, (_, _, noise) in running.items():
                c_beta, a_beta = need(b, "c-beta", i, "beta"), need(b, "a-beta", i, "beta")
                count("beta", i, c_beta)
                if not noise and paper:  # beta's move, chosen on its un-noised Q, leaves
                    count("beta", i, a_beta, noised=False)
                data.update({play_key("c-beta", i): c_beta, play_key("a-beta", i): a_beta})
            a, _, m = send(
                "alpha",
                "eval-act",
                data,
                theta_g=self.theta_g if first and not paper else None,
                evaluation=True,
                start=first and not paper,
                plays=plays_conf(running),
            )
            for i, (_, _, noise) in running.items():
                prev[i], c_alpha[i] = need(a, "a-alpha", i, "alpha"), a.get(play_key("c-alpha", i))
                count("alpha", i, prev[i], noised=noise)  # alpha's move: a fresh draw, or none
            step += 1
            for i in list(running):
                count("alpha", i, c_alpha[i])  # about the next observation
            for i, (split, weights, noise) in list(running.items()):
                if need(m, "active", i, "alpha"):
                    continue
                pre, tag = ("best-" if weights == "best" else ""), ("on" if noise else "off")
                for k, v in m.items():
                    name, _, index = k.rpartition(PLAY)
                    if index == str(i) and name != "active":
                        scores[f"{pre}{split}-{name}-test_noise={tag}"] = v
                del running[i], prev[i], c_alpha[i]
            if not running:
                return scores
        raise FederationError(f"evaluation on {what} did not end")

    def keep_best(self) -> None:
        """Each party keeps a copy of its own networks (none leaves a party)."""
        self.flush()
        for role in ("alpha", "beta"):
            self.send(role, "keep-best", theta_g=self.theta_g)


class Selection:
    """Model selection for any runner with `evaluate(split, weights)` and `keep_best()`: the
    ServerApp's FedRL and every method of experiments/fedrl/local.py go through it."""

    def __init__(self, key: str):
        self.key, self.score, self.best = key, -np.inf, {}

    def __call__(self, runner, rnd: int, last: bool, has_test: bool) -> dict:
        """Valid; keep the networks when `key` improves; in the last round, test at the last
        and at the kept checkpoint. Returns the round's metrics, `best-...` included."""
        valid = runner.evaluate("valid")
        if valid[self.key] > self.score:
            self.score = valid[self.key]
            self.best = {**{f"best-{k}": v for k, v in valid.items()}, "best-round": rnd}
            runner.keep_best()
        out = {**valid, **self.best}
        if last and has_test:  # the last and the kept checkpoint, played together
            out.update(runner.evaluate("test", ("last", "best")))
        return out


class DirectTransport:
    """The protocol with both parties in this process: `send` calls `dispatch` on the party
    instead of sending a message. Who acts: alpha on Q_f^alpha, beta on Q_f^beta (paper mode)
    | alpha's 16-action head moves both."""

    def __init__(self, s: Settings):
        self.s = s
        self.alpha, self.beta = Alpha(s), Beta(s)
        self.proto = Protocol(s, self.send)

    def send(
        self,
        role: str,
        step: str,
        data: dict | None = None,
        theta_g=None,
        evaluation: bool = False,
        **conf,
    ):
        party = self.alpha if role == "alpha" else self.beta
        data = {k: v for k, v in (data or {}).items() if v is not None}
        out, theta, metrics = dispatch(party, role, step, data, theta_g, conf)
        return {k: v for k, v in out.items() if v is not None}, theta, metrics or {}

    def round(self, evaluating: bool = False) -> dict:
        return self.proto.train_round(evaluating)

    def evaluate(self, split: str, weights: str | tuple[str, ...] = "last") -> dict:
        return self.proto.evaluate(split, weights)

    def keep_best(self) -> None:
        self.proto.keep_best()
