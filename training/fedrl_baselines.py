"""FedRL's baselines and floors in one process, and `train`, the loop that runs any of them or
FedRL itself with model selection (paper Tables 1 and 2; CLI: experiments/fedrl/local.py).

Every method sees the same maps, rules, T_m, replay, exploration schedule, chunking (B envs x S
steps, then K minibatch updates per round), target-update period and model selection. Who acts
on what (`paper` action mode | `joint-action`, which `reference` rules use):
- FedRL: alpha on Q_f^alpha, beta on Q_f^beta (training/fedrl_party.py, run by
  training/fedrl_protocol.DirectTransport) | alpha's MLP picks one
  of 16 joint actions that moves both.
- DQN-alpha: a DQN on alpha's observations only; alpha acts on it and beta, which has no reward
  and so no policy of its own without the federation, moves uniformly at random | the DQN picks
  the 16 joint actions from alpha's observations (the reference's `single_alpha`).
- DQN-full: one DQN over both parties' observations, data pooled; two 4-action heads, alpha's
  move and beta's move, each Q-learned on the shared reward with its own action (the same
  factorisation as FedRL, without privacy) | one 16-action head (the reference's `full`).
- FCN-alpha / FCN-full: the same networks trained by supervised learning (cross-entropy) on the
  first move of a BFS shortest path toward the other agent, on the states visited while
  following those moves; no rewards involved. Labels: alpha's move (FCN-alpha; beta moves at
  random as in DQN-alpha), alpha's and beta's moves on two heads (FCN-full) | the joint move of
  both, 16 classes, from alpha's observations (FCN-alpha) or both parties' (FCN-full).
- random-alpha / random-both (floors, no training): alpha moves uniformly at random and beta
  stays / both move uniformly at random.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch
from torch import nn

from contracts.fedrl import sample_ids
from envs.gridworld import STAY
from models.fedrl_nets import N_ACTIONS
from models.rng import owned
from training.fedrl_protocol import DirectTransport, Selection, checkpoints
from training.fedrl_replay import Replay, count_episodes, episode_report, explore
from training.fedrl_setup import Settings

BASELINES = ("dqn-alpha", "dqn-full", "fcn-alpha", "fcn-full")
FLOORS = ("random-alpha", "random-both")
METHODS = ("fedrl", *BASELINES, *FLOORS)
# evaluation streams of a policy whose moves are partly random (issue 66): with one stream per
# seed, DQN-alpha's three 16x16 networks each scored 146 / 386 test maps (sd 0.0), while another
# stream moved the same networks by 17-34 maps. The score is the mean over the streams, and
# every stream's score is kept beside it (`<key>-streams`).
EVAL_STREAMS = 5


def beta_at_random(full: bool, s: Settings) -> bool:
    """Whether beta moves at random beside the network: an alpha-only network in paper mode
    (in joint-action mode it moves both agents; a -full network has beta's own head)."""
    return not full and s.mode != "joint-action"


def eval_streams(method: str, s: Settings) -> int:
    """Streams `method`'s evaluation averages: EVAL_STREAMS where its moves are partly random
    (the floors; an alpha-only network in paper mode, beside a random beta), else 1 (FedRL,
    the -full networks and joint-action mode play greedily: one stream is the whole score)."""
    if method in FLOORS or (method in ("dqn-alpha", "fcn-alpha") and beta_at_random(False, s)):
        return EVAL_STREAMS
    return 1


def stream_ids(base: int, n: int) -> list[tuple[int, ...]]:
    """Seed words of n evaluation streams: the first is (base,), the one stream of the code
    before EVAL_STREAMS (so its scores are unchanged), then (1000 base + 1,), (1000 base + 2,),
    ... A step t draws from [seed, *stream, t]. Each stream is one word, never two: numpy's
    SeedSequence ignores trailing zeros, so a two-word stream (base, k) would draw at t = 0
    what the stream (base,) draws at t = k."""
    return [(base,)] + [(1000 * base + k,) for k in range(1, n)]


def over_streams(scores: list[dict]) -> dict:
    """One evaluation's scores from its streams': each key's mean, and with 2 or more streams
    each stream's value under `<key>-streams`."""
    out = {k: float(np.mean([sc[k] for sc in scores])) for k in scores[0]}
    if len(scores) > 1:
        out |= {f"{k}-streams": [float(sc[k]) for sc in scores] for k in scores[0]}
    return out


class DQNLocal:
    """DQN-alpha / DQN-full with the same replay, schedule and exploration as FedRL.
    Who acts: paper mode, DQN-alpha moves alpha (beta at random), DQN-full moves both from two
    heads; joint-action mode, one 16-action head moves both (alpha's or both observations)."""

    def __init__(self, s: Settings, full: bool):
        self.s, self.full = s, full
        self.joint = s.mode == "joint-action"
        # heads: one over the joint actions (16 | Text2Action's 2), or alpha's 4 (+ beta's 4
        # for -full) in paper mode
        self.n_out = s.n_actions * (1 if self.joint else (2 if full else 1))
        make = lambda: s.q_net("full" if full else "alpha", self.n_out)  # noqa: E731
        with owned(s.seed):  # models/rng
            self.net, self.target = make(), make()
        self.target.load_state_dict(self.net.state_dict())
        self.best = None
        self.opt = torch.optim.Adam(self.net.parameters(), lr=s.lr)
        oa, ob = s.obs_field("alpha"), s.obs_field("beta")
        self.replay = Replay(
            s.replay,
            {
                "sa": oa,
                "sb": ob,
                "a": ((), np.int64),
                "ab": ((), np.int64),
                "r": ((), np.float32),
                "sa2": oa,
                "sb2": ob,
                "done": ((), np.float32),
            },
        )
        self.world = s.world("train")
        self.n = self.updates = 0
        self.rng = np.random.default_rng([s.seed, 98])
        self.stats = np.zeros(3)
        self.returns = np.zeros(s.envs)

    def heads(self, net, sa, sb) -> list[torch.Tensor]:
        """Q (or logits) per head: [joint] | [alpha] | [alpha, beta]."""
        sa, sb = torch.as_tensor(sa), torch.as_tensor(sb)
        out = net(sa, sb) if self.full else net(sa)
        return [out] if self.joint or not self.full else [out[:, :N_ACTIONS], out[:, N_ACTIONS:]]

    def random_beta(self, n: int, key: int, stream: tuple[int, ...] = (3,)) -> np.ndarray:
        return np.random.default_rng([self.s.seed, *stream, key]).integers(0, N_ACTIONS, n)

    def moves(self, acts: list[np.ndarray], key: int, stream: tuple[int, ...] = (3,)):
        """(alpha's move, beta's move) from the heads' actions."""
        if self.joint:
            return self.s.joint_moves(acts[0])
        if self.full:
            return acts[0], acts[1]
        return acts[0], self.random_beta(len(acts[0]), key, stream)

    def round(self, evaluating: bool = False) -> dict:
        s = self.s
        for _ in range(s.act_steps):
            w = self.world
            sa, sb = w.obs_alpha.copy(), w.obs_beta.copy()
            with torch.no_grad():
                qs = self.heads(self.net, sa, sb)
            eps = s.epsilon_greedy(self.n)
            acts = [
                explore(
                    q.argmax(1).numpy(),
                    eps,
                    q.shape[1],
                    np.random.default_rng([s.seed, 2 + k, self.n]),
                )
                for k, q in enumerate(qs)
            ]
            moves = self.moves(acts, self.n)
            r, done, met, na, nb = w.step(*moves)
            self.replay.put(
                self.n,
                sa=sa,
                sb=sb,
                a=acts[0],
                ab=acts[-1],
                r=r,
                sa2=na,
                sb2=nb,
                done=done.astype(np.float32),
            )
            self.n += s.envs
            count_episodes(self.stats, self.returns, r, done, met)
        out = episode_report(self.stats)
        self.stats = np.zeros(3)
        ids = sample_ids(self.rng, self.n, s)
        if ids is not None:
            out["loss"] = self.train(ids)
        return out

    def train(self, ids: np.ndarray) -> float:
        losses = []
        for k in range(len(ids)):
            b = self.replay.get(ids[k])
            loss = self.loss(b)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self.updates += 1
            if self.updates % self.s.target_every == 0:
                self.target.load_state_dict(self.net.state_dict())
            losses.append(loss.item())
        return float(np.mean(losses))

    def loss(self, b: dict) -> torch.Tensor:
        """Q-learning on every head, each with its own action and the shared reward."""
        with torch.no_grad():
            nxt = self.heads(self.target, b["sa2"], b["sb2"])
        pred = self.heads(self.net, b["sa"], b["sb"])
        r, done = torch.as_tensor(b["r"]), torch.as_tensor(b["done"])
        total = 0.0
        for q, q2, a in zip(pred, nxt, (b["a"], b["ab"])):
            y = r + self.s.gamma * (1 - done) * q2.max(1).values
            total = total + nn.functional.mse_loss(
                q.gather(1, torch.as_tensor(a)[:, None]).squeeze(1), y
            )
        return total

    def evaluate(self, split: str, weights: str | tuple[str, ...] = "last") -> dict:
        """Greedy play of the last (and best) network, averaged over the evaluation streams of
        the random beta beside an alpha-only network (`eval_streams`; one where none moves at
        random). Valid scores choose the best checkpoint on that mean too."""
        n = EVAL_STREAMS if beta_at_random(self.full, self.s) else 1
        out = {}
        for w in checkpoints(weights):
            net = self.best if w == "best" and self.best is not None else self.net
            pre = "best-" if w == "best" else ""
            scores = [play(self.s, split, self.policy(net, st)) for st in stream_ids(5, n)]
            out.update({f"{pre}{split}-{k}": v for k, v in over_streams(scores).items()})
        return out

    def keep_best(self) -> None:
        self.best = copy.deepcopy(self.net)

    def policy(self, net, stream: tuple[int, ...] = (5,)):
        def act(w, t: int):
            with torch.no_grad():
                acts = [q.argmax(1).numpy() for q in self.heads(net, w.obs_alpha, w.obs_beta)]
            return self.moves(acts, t, stream=stream)

        return act


class FCNLocal(DQNLocal):
    """FCN-alpha / FCN-full: supervised on shortest-path moves, rolled out on train maps.
    Who acts: as DQNLocal (same heads), greedy on the logits."""

    def labels(self, w) -> list[np.ndarray]:
        """Per head: the joint label (both BFS first moves), or alpha's (and beta's);
        Text2Action: the action with the larger basic reward on the current word."""
        if self.s.text:
            return [w.expert()]
        a = np.clip(w.shortest_action(0), 0, None)  # STAY (already met) -> any move
        if not self.full and not self.joint:
            return [a]
        b = np.clip(w.shortest_action(1), 0, None)
        return [a * N_ACTIONS + b] if self.joint else [a, b]

    def round(self, evaluating: bool = False) -> dict:
        s, w = self.s, self.world
        for _ in range(s.act_steps):
            y = self.labels(w)
            self.replay.put(self.n, sa=w.obs_alpha, sb=w.obs_beta, a=y[0], ab=y[-1])
            w.step(*self.moves(y, self.n))  # follow the expert (beta at random if unlabelled)
            self.n += s.envs
        ids = sample_ids(self.rng, self.n, s)
        return {"loss": self.train(ids)} if ids is not None else {}

    def loss(self, b: dict) -> torch.Tensor:
        logits = self.heads(self.net, b["sa"], b["sb"])
        return sum(
            nn.functional.cross_entropy(z, torch.as_tensor(a))
            for z, a in zip(logits, (b["a"], b["ab"]))
        )


class RandomLocal:
    """The floors: alpha uniformly at random, beta staying (`both=False`) or random too."""

    def __init__(self, s: Settings, both: bool):
        self.s, self.both = s, both

    def round(self, evaluating: bool = False) -> dict:
        return {}

    def keep_best(self) -> None:
        pass  # nothing is trained

    def evaluate(self, split: str, weights: str | tuple[str, ...] = "last") -> dict:
        def policy(stream: tuple[int, ...]):
            def act(w, t: int):
                rng = np.random.default_rng([self.s.seed, *stream, t])
                if self.s.text:  # select or neglect each word with probability 1/2
                    return self.s.joint_moves(rng.integers(0, 2, w.B))
                a = rng.integers(0, N_ACTIONS, (2, w.B))
                return a[0], (a[1] if self.both else np.full(w.B, STAY))

            return act

        # the same moves at either "checkpoint", averaged over the evaluation streams
        scores = over_streams(
            [play(self.s, split, policy(st)) for st in stream_ids(4, EVAL_STREAMS)]
        )
        return {
            f"{'best-' if w == 'best' else ''}{split}-{k}": v
            for w in checkpoints(weights)
            for k, v in scores.items()
        }


def play(s: Settings, split: str, policy) -> dict:
    """Greedy episodes, one per usable map (or text) of the split, scored by the world:
    SuccRate and mean episode reward | precision, recall, F1 and AvgRwd per step."""
    w = s.world(split)
    total, met_all = np.zeros(w.B), np.zeros(w.B)
    t = 0
    while w.active.any():
        r, done, met, _, _ = w.step(*policy(w, t))
        total += r
        met_all += met
        t += 1
    return w.report(total, met_all)


def make(method: str, s: Settings):
    if method == "fedrl":
        return DirectTransport(s)
    if method in ("dqn-alpha", "dqn-full"):
        return DQNLocal(s, full=method.endswith("full"))
    if method in ("fcn-alpha", "fcn-full"):
        return FCNLocal(s, full=method.endswith("full"))
    if method in FLOORS:
        return RandomLocal(s, both=method == "random-both")
    raise ValueError(f"unknown method {method!r} ({', '.join(METHODS)})")


def train(method: str, s: Settings, rounds: int, eval_every: int = 0, log=print) -> list[dict]:
    """Train `method` for `rounds` rounds with model selection: valid every `eval_every` rounds
    and in the last; the best valid checkpoint is kept. The last row also has the test split
    (if any) at the last (`test-...`) and best (`best-test-...`) checkpoint, and the valid score
    of the best (`best-valid-...`). Floors train nothing and are scored once."""
    runner = make(method, s)
    select = Selection(s.select_key(fedrl=method == "fedrl"))
    rows, t0 = [], time.perf_counter()
    if method in FLOORS:
        rounds, eval_every = 1, 1
    for rnd in range(1, rounds + 1):
        last = rnd == rounds
        evaluating = last or bool(eval_every and rnd % eval_every == 0)
        row = {"round": rnd, **runner.round(evaluating)}
        if evaluating:
            row.update(select(runner, rnd, last, bool(len(s.test))))
            if method == "fedrl":  # the evaluation's releases counted too
                row.update(runner.proto.privacy())
        row["wall_s"] = time.perf_counter() - t0
        rows.append(row)
        if log and (last or (eval_every and rnd % eval_every == 0)):
            log(
                f"[{method}] round {rnd}: "
                + ", ".join(
                    f"{k}={v:.3g}" for k, v in row.items() if isinstance(v, float) and "-" in k
                )
            )
    return rows
