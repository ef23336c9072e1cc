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
"""

from __future__ import annotations

import numpy as np

from contracts.errors import FederationError
from contracts.fedrl import SENDS, sample_ids
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
    else:  # evaluation
        if bool(conf.get("start", False)):
            party.set_theta_g(theta_in)
            party.start_evaluation(str(conf["split"]), str(conf.get("weights", "last")))
        noise = bool(conf.get("test-noise", True))
        if step == "eval-observe":
            out = {"c-alpha": party.observe(party.eval_world)}
        elif role == "beta":
            c, a = party.eval_act(prev, data.get("c-alpha"), noise)
            out = {"c-beta": c, "a-beta": a}
        else:
            a, active, c = party.eval_act(data["c-beta"], data["a-beta"], noise)
            out, metrics = {"a-alpha": a, "c-alpha": c}, {"active": float(active)}
            if not active:
                metrics.update(party.eval_result())
                party.end_evaluation()
    if step in ("observe", "act", "eval-observe", "eval-act"):  # the party's own account
        metrics = {**(metrics or {}), **party.privacy()}
    return out, theta, metrics


def _beta_update(party, data: dict, theta_in) -> tuple[dict, dict]:
    theta, loss = party.update(data["update-ids"], data["y"], data["c-alpha-ids"], theta_in)
    return theta, {"loss-beta": loss, **party.privacy()}


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

    def evaluate(self, split: str, weights: str = "last") -> dict:
        """Scores on `split` with test_noise on and off (`weights`: live or kept best)."""
        self.flush()
        return {**self.play(split, True, weights), **self.play(split, False, weights)}

    def play(self, split: str, test_noise: bool, weights: str = "last") -> dict:
        """One greedy episode per usable map (or text) of `split`, both parties on their
        federated Q; the scores are alpha's (Alpha.eval_result)."""
        send, paper = self.send, self.s.mode == "paper"
        conf = {"split": split, "weights": weights, "test-noise": test_noise}
        c_alpha, prev, first = None, None, True
        step = 0  # the play's observation step; every release is counted about its record

        def count(role: str, rows, noised: bool = True) -> None:
            if rows is not None:
                self.ledger.evaluation(role, split, step, len(rows), noised)

        if paper:
            c_alpha = send(
                "alpha", "eval-observe", theta_g=self.theta_g, evaluation=True, start=True, **conf
            )[0]["c-alpha"]
            count("alpha", c_alpha)
        what = f"{split} episodes, test_noise={'on' if test_noise else 'off'}"
        tick = StepLog(what, self.s.horizon + 1) if self.progress else None
        for _ in range(self.s.horizon + 1):
            if tick:
                tick()
            b, _, _ = send(
                "beta",
                "eval-act",
                {"prev-alpha": prev, "c-alpha": c_alpha},
                evaluation=True,
                start=first,
                **conf,
            )
            count("beta", b["c-beta"])
            if not test_noise and paper:  # beta's move, chosen on its un-noised Q, leaves
                count("beta", b["a-beta"], noised=False)
            a, _, m = send(
                "alpha",
                "eval-act",
                {"c-beta": b["c-beta"], "a-beta": b["a-beta"]},
                theta_g=self.theta_g if first and not paper else None,
                evaluation=True,
                start=first and not paper,
                **conf,
            )
            prev, c_alpha, first = a["a-alpha"], a.get("c-alpha"), False
            count("alpha", prev, noised=test_noise)  # alpha's move: a fresh draw, or none
            step += 1
            count("alpha", c_alpha)  # about the next observation
            if not m["active"]:
                tag = "on" if test_noise else "off"
                pre = "best-" if weights == "best" else ""
                return {
                    f"{pre}{split}-{k}-test_noise={tag}": v for k, v in m.items() if k != "active"
                }
        raise FederationError(f"evaluation on {split} did not end")

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
        if last and has_test:
            out.update(runner.evaluate("test"))
            out.update(runner.evaluate("test", "best"))
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

    def evaluate(self, split: str, weights: str = "last") -> dict:
        return self.proto.evaluate(split, weights)

    def keep_best(self) -> None:
        self.proto.keep_best()
