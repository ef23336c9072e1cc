"""FedRL and its baselines in one process, without Flower.

`FedRLLocal` runs the same parties and the same chunked exchange as the Flower app
(`server/fedrl.py`), calling the party methods directly: it is the baseline of the throughput
benchmark and a quick way to try settings. The baselines (paper Sec. 5) are not federated:
- DQN-alpha: a DQN on alpha's observations only. In `paper` action mode it moves alpha only and
  beta stays where it is (beta has no rewards, so alone it cannot learn a policy); in
  `joint-action` mode it picks the 16 joint actions from alpha's observations (the reference).
- DQN-full: one DQN over both parties' observations, data pooled, 16 joint actions.
- FCN-alpha / FCN-full: the same networks trained by supervised learning (cross-entropy) on the
  first move of a BFS shortest path to the other agent (both agents' moves for -full), on the
  states visited while following those moves; no rewards involved.
"""
from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from clients.fedrl_party import (Alpha, Beta, Replay, Settings, count_episodes,
                                 episode_report, explore, sample_ids, split_joint)
from envs.gridworld import STAY, GridWorld
from models.fedrl_nets import N_ACTIONS, FullQNet, QNet

BASELINES = ("dqn-alpha", "dqn-full", "fcn-alpha", "fcn-full")


def evaluate_fedrl(alpha: Alpha, beta: Beta, split: str, test_noise: bool) -> dict:
    alpha.start_evaluation(split)
    beta.start_evaluation(split)
    prev, active = None, True
    while active:
        c, a_beta = beta.eval_act(prev)
        prev, active = alpha.eval_act(c, a_beta, test_noise)
    out = alpha.eval_result()
    alpha.end_evaluation()
    beta.end_evaluation()
    return out


class FedRLLocal:
    """Algorithms 1-2 with the same chunking as the Flower app, as direct calls."""

    def __init__(self, s: Settings):
        self.s = s
        self.alpha, self.beta = Alpha(s), Beta(s)
        self.rng = np.random.default_rng([s.seed, 99])
        self.theta_g = None
        self.prev = None
        self.env_steps = self.train_steps = 0

    def round(self) -> dict:
        s, alpha, beta = self.s, self.alpha, self.beta
        alpha.set_theta_g(self.theta_g)
        for _ in range(s.act_steps):
            c, a_beta = beta.act(self.prev)
            self.prev = alpha.act(c, a_beta)
        self.env_steps += s.act_steps * s.envs
        out = alpha.take_stats()
        ids = sample_ids(self.rng, alpha.counters["transitions"], s)
        if ids is not None:
            c, c2 = beta.q_outputs(ids, self.prev)
            self.prev = None
            y, c_alpha, theta_g, la = alpha.update(ids, c, c2, self.theta_g)
            self.theta_g, lb = beta.update(ids, y, c_alpha, theta_g)
            self.train_steps += ids.size
            out.update({"loss-alpha": la, "loss-beta": lb})
        return out

    def evaluate(self, split: str) -> dict:
        out = {}
        for noise in (True, False):
            tag = "on" if noise else "off"
            for k, v in evaluate_fedrl(self.alpha, self.beta, split, noise).items():
                out[f"{split}-{k}-test_noise={tag}"] = v
        return out


class DQNLocal:
    """DQN-alpha / DQN-full with the same replay, schedule and exploration as FedRL."""

    def __init__(self, s: Settings, full: bool):
        self.s, self.full = s, full
        torch.manual_seed(s.seed)
        self.joint = full or s.mode == "joint-action"
        self.n_actions = N_ACTIONS * N_ACTIONS if self.joint else N_ACTIONS
        H = s.history
        if full:
            self.net = FullQNet(H, s.w_alpha, s.w_beta, self.n_actions)
            self.target = FullQNet(H, s.w_alpha, s.w_beta, self.n_actions)
        else:
            self.net = QNet(H, s.w_alpha, self.n_actions)
            self.target = QNet(H, s.w_alpha, self.n_actions)
        self.target.load_state_dict(self.net.state_dict())
        self.opt = torch.optim.Adam(self.net.parameters(), lr=s.lr)
        wa, wb = s.w_alpha, s.w_beta
        self.replay = Replay(s.replay, {"sa": ((H, wa, wa), np.uint8), "sb": ((H, wb, wb), np.uint8),
                                        "a": ((), np.int64), "r": ((), np.float32),
                                        "sa2": ((H, wa, wa), np.uint8),
                                        "sb2": ((H, wb, wb), np.uint8), "done": ((), np.float32)})
        self.world = s.world("train")
        self.n = self.updates = 0
        self.rng = np.random.default_rng([s.seed, 98])
        self.stats = np.zeros(3)
        self.returns = np.zeros(s.envs)

    def q(self, net, sa, sb) -> torch.Tensor:
        sa, sb = torch.as_tensor(sa), torch.as_tensor(sb)
        return net(sa, sb) if self.full else net(sa)

    def moves(self, a: np.ndarray):
        return split_joint(a) if self.joint else (a, np.full(len(a), STAY))

    def round(self) -> dict:
        s = self.s
        for _ in range(s.act_steps):
            w = self.world
            sa, sb = w.obs_alpha.copy(), w.obs_beta.copy()
            with torch.no_grad():
                greedy = self.q(self.net, sa, sb).argmax(1).numpy()
            rng = np.random.default_rng([s.seed, 2, self.n])
            a = explore(greedy, s.epsilon_greedy(self.n), self.n_actions, rng)
            r, done, met, na, nb = w.step(*self.moves(a))
            self.replay.put(self.n, sa=sa, sb=sb, a=a, r=r, sa2=na, sb2=nb,
                            done=done.astype(np.float32))
            self.n += s.envs
            count_episodes(self.stats, self.returns, r, done, met)
        out = episode_report(self.stats)
        self.stats = np.zeros(3)
        ids = sample_ids(self.rng, self.n, s)
        if ids is not None:
            losses = []
            for k in range(len(ids)):
                b = self.replay.get(ids[k])
                with torch.no_grad():
                    nxt = self.q(self.target, b["sa2"], b["sb2"]).max(1).values
                    y = torch.as_tensor(b["r"]) + s.gamma * (1 - torch.as_tensor(b["done"])) * nxt
                pred = self.q(self.net, b["sa"], b["sb"]).gather(
                    1, torch.as_tensor(b["a"])[:, None]).squeeze(1)
                loss = nn.functional.mse_loss(pred, y)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                self.updates += 1
                if self.updates % s.target_update == 0:
                    self.target.load_state_dict(self.net.state_dict())
                losses.append(loss.item())
            out["loss"] = float(np.mean(losses))
        return out

    def evaluate(self, split: str) -> dict:
        return {f"{split}-{k}": v for k, v in play(self.s, split, self.policy).items()}

    def policy(self, w: GridWorld):
        with torch.no_grad():
            return self.moves(self.q(self.net, w.obs_alpha, w.obs_beta).argmax(1).numpy())


class FCNLocal(DQNLocal):
    """FCN-alpha / FCN-full: supervised on shortest-path moves, rolled out on train maps."""

    def label(self, w: GridWorld) -> np.ndarray:
        a = w.shortest_action(0)
        if not self.joint:
            return a
        b = w.shortest_action(1)
        return np.clip(a, 0, 3) * N_ACTIONS + np.clip(b, 0, 3)

    def round(self) -> dict:
        s, w = self.s, self.world
        for _ in range(s.act_steps):
            y = self.label(w)
            self.replay.put(self.n, sa=w.obs_alpha, sb=w.obs_beta, a=np.clip(y, 0, None))
            self.n += s.envs
            # follow the expert; a slot whose agents are adjacent (label STAY) meets on any move
            w.step(*self.moves(np.clip(y, 0, None)))
        ids = sample_ids(self.rng, self.n, s)
        out = {}
        if ids is not None:
            losses = []
            for k in range(len(ids)):
                b = self.replay.get(ids[k])
                logits = self.q(self.net, b["sa"], b["sb"])
                loss = nn.functional.cross_entropy(logits, torch.as_tensor(b["a"]))
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
                losses.append(loss.item())
            out["loss"] = float(np.mean(losses))
        return out


def play(s: Settings, split: str, policy) -> dict:
    """Greedy episodes, one per map of the split: success rate and mean episode reward."""
    w = s.world(split)
    total, met_all = np.zeros(w.B), np.zeros(w.B)
    while w.active.any():
        r, done, met, _, _ = w.step(*policy(w))
        total += r
        met_all += met
    return {"succ-rate": float(met_all.mean()), "avg-reward": float(total.mean())}


def make(method: str, s: Settings):
    if method == "fedrl":
        return FedRLLocal(s)
    if method in ("dqn-alpha", "dqn-full"):
        return DQNLocal(s, full=method.endswith("full"))
    if method in ("fcn-alpha", "fcn-full"):
        return FCNLocal(s, full=method.endswith("full"))
    raise ValueError(f"unknown method {method!r} (fedrl, {', '.join(BASELINES)})")


def train(method: str, s: Settings, rounds: int, eval_every: int = 0, splits=("valid",),
          log=print) -> list[dict]:
    """Train `method` for `rounds` rounds; rows of metrics per round (evaluation every
    `eval_every` rounds and at the end)."""
    runner = make(method, s)
    rows, t0 = [], time.perf_counter()
    for rnd in range(1, rounds + 1):
        row = {"round": rnd, **runner.round()}
        if rnd == rounds or (eval_every and rnd % eval_every == 0):
            for split in splits:
                row.update(runner.evaluate(split))
        row["wall_s"] = time.perf_counter() - t0
        rows.append(row)
        if log and (rnd == rounds or (eval_every and rnd % eval_every == 0)):
            log(f"[{method}] round {rnd}: " + ", ".join(
                f"{k}={v:.3g}" for k, v in row.items() if isinstance(v, float) and "-" in k))
    return rows
