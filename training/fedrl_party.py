"""FedRL parties (paper Algorithms 1 and 2), without Flower: alpha has rewards, beta has none.

Each method of `Alpha` / `Beta` is one step of the exchange and takes/returns exactly what crosses
between the parties, so the Flower handlers (`clients/fedrl_client.py`) and the single-process runner
(`experiments/fedrl/local.py`) call the same code.

One round of the chunked exchange (B environments, S steps, K minibatches; `server/fedrl_run.py`'s
`Protocol` drives it, `training/fedrl_protocol.dispatch` maps a message to these methods), 2S messages:
  for each of S steps:  beta.act(prev alpha actions, C_alpha)  -> C_beta, a_beta
                        alpha.act(C_beta, a_beta)  -> alpha's action ids, C_alpha of s_alpha'
  in the last step, in the same two messages:
    beta.q_outputs(ids) -> C_beta(s_j), C'_beta(s'_j)   (K minibatches, after beta.act)
    alpha.update(ids, C_beta, C'_beta) -> Y, C_alpha, theta_g, C_alpha now  (Eq. 4, 6; after alpha.act)
  in the next round's first beta.act (or alone before an evaluation):
    beta.update(ids, Y, C_alpha, theta_g) -> theta_g                        (Eq. 5, 7; before acting)
The ids are drawn from the transitions both parties hold when beta answers the last step, i.e.
all but the B of that step, which become eligible one round later. Per step the paper's
semantics hold (each action on both parties' current Q); the only change to the order of
Algorithms 1-2 is that one-round lag of the newest B transitions in the replay, measured in
experiments/fedrl/throughput.py. The K minibatches' C_beta are computed before alpha's K
updates, so they are up to K updates stale: `fedrl.updates` trades that staleness against
messages (experiments/fedrl/sweep.py --knob updates).

The world: both agents move in one Grid-World. Each party holds a replica of the world simulator,
built from the run config (maps, seed) and stepped with both parties' action ids, so the replicas
stay identical without exchanging states; a party reads only its own window from its replica,
and only alpha reads the reward. Action and transition ids are the "IDs" the paper's A2 lets the
parties share. (In a physical deployment each party's sensors would replace its replica.)

Who acts on what. `paper` action mode: each party acts on the argmax of its own federated Q, in
training (epsilon-greedy) and in test (greedy), as the paper's testing procedure says (Sec. 4:
"both agents compute and send C_alpha and C_beta to each other for computing Q_f^alpha and
Q_f^beta"): alpha on Q_f^alpha = MLP_alpha([Q_hat_alpha(s_alpha) | C_beta]), beta on
Q_f^beta = MLP_beta([C_alpha | Q_hat_beta(s_beta)]). Algorithm 2 has beta act on its basic Q_beta,
which no loss trains to rank beta's moves (~73% of those greedy moves hit walls), so we do not.
Both C's travel in the step's existing round trip: alpha's reply to a step carries
C_alpha(s_alpha') of the observation after it (after an update, under the updated network), which the next message to beta carries; only the very
first step of training or of an evaluation needs one extra message ("observe"). In `joint-action`
mode (the reference code) alpha's MLP picks one of 16 joint actions that moves both agents, and
beta's replay stores that joint action. Target networks are real copies refreshed every
`fedrl.target-update` updates (the reference code copies its targets onto themselves, a bug).
"""

from __future__ import annotations

import contextlib
import copy

import numpy as np
import torch
from torch import nn

from envs.gridworld import STAY, GridWorld
from models.fedrl_nets import N_ACTIONS, SharedMLP
from models.rng import owned
from training.fedrl_privacy import EvalLedger, Ledger, SecretNoise, SeededNoise, new_key, release
from training.fedrl_replay import Replay, count_episodes, episode_report, explore
from training.fedrl_setup import SPLITS, Settings


def td_target(
    r: torch.Tensor, done: torch.Tensor, q_next: torch.Tensor, gamma: float
) -> torch.Tensor:
    """Eq. (6), alpha's target: Y_j = r_j + gamma (1 - done_j) max_a' Q_f^alpha(s_{j+1}, a'),
    `q_next` being alpha's federated Q from its target networks with beta's C'_beta."""
    return r + gamma * (1 - done) * q_next.max(1).values


def q_loss(q_f: torch.Tensor, actions: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Eq. (4) for alpha, Eq. (5) for beta (theta_g and the party's own Q through Eq. (7)):
    the mean of (Y_j - Q_f(s_j, a_j))^2 over the minibatch."""
    return nn.functional.mse_loss(q_f.gather(1, actions[:, None]).squeeze(1), y)


def _scalar(x) -> int:
    """A stored scalar (Flower keeps 0-d arrays as shape (1,))."""
    return int(np.asarray(x).ravel()[0])


def _t(x) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x))


class Party:
    """What both parties share: a basic Q-network with its target, theta_g, Adam, the replay,
    the world replica and the release ledger; and (de)serialisation for Flower's context.state.
    `keep_best` copies the party's own networks (Q and theta_g) aside, so an evaluation can
    score the best-on-valid checkpoint without either network leaving the party."""

    role = "party"
    head = 0
    EXTRA: tuple[str, ...] = ()  # numpy attributes that must survive between messages
    NETS = ("q", "q_target", "mlp", "mlp_target")
    PLAY = ("eval_world", "eval_split", "eval_weights", "eval_score", "eval_step")  # one play's

    def __init__(self, s: Settings, replay_fields: dict, restoring: bool = False):
        self.s = s
        heads = 1 if s.mode == "joint-action" else 2
        with owned(s.seed * 1009 + (0 if self.role == "alpha" else 1)):  # models/rng
            self.q = s.q_net(self.role)
            self.q_target = s.q_net(self.role)
            self.mlp = SharedMLP(2 * s.n_actions, heads, s.n_actions, s.mlp_width)
            self.mlp_target = SharedMLP(2 * s.n_actions, heads, s.n_actions, s.mlp_width)
        self.q_target.load_state_dict(self.q.state_dict())
        self.mlp_target.load_state_dict(self.mlp.state_dict())
        self.q_best = self.mlp_best = None
        self._opt: torch.optim.Adam | None = None
        self._opt_arrays: dict[str, np.ndarray] = {}  # its saved state, until it is built
        self.replay = Replay(s.replay, replay_fields)
        self.ledger = Ledger(s.replay)
        self.eval_ledger = EvalLedger()
        # the party's noise key (training/fedrl_privacy.py): its own secret, None in study mode
        self.noise_key = None if s.reproducible_noise else new_key()
        self.world = s.world("train", reset=not restoring)
        self.counters = {"transitions": 0, "updates": 0, "messages": 0, "opened": -1}
        self.eval_world: GridWorld | None = None  # the play being stepped (`playing`)
        self.eval_weights = "last"
        self.plays: dict[int, dict] = {}  # the evaluation chain's plays, parked between steps
        self.chain = np.zeros(2, np.int64)  # the open chain's first noise count, its blocks' size

    @property
    def opt(self) -> torch.optim.Adam:
        """Adam over Q and theta_g, built at its first use with the state the party saved.
        Lazily, because constructing a torch optimizer imports torch._dynamo (about 1 s in a
        fresh process), and a deployed party is a fresh process per message, most of which
        only compute and release Q outputs (issue 43)."""
        if self._opt is None:
            self._opt = torch.optim.Adam(
                [*self.q.parameters(), *self.mlp.parameters()], lr=self.s.lr
            )
            if self._opt_arrays:
                opt = self._opt.state_dict()
                state: dict[int, dict] = {}
                for k, v in self._opt_arrays.items():
                    _, idx, field = k.split(".", 2)
                    state.setdefault(int(idx), {})[field] = _t(v).clone()
                opt["state"] = state
                self._opt.load_state_dict(opt)
            self._opt_arrays = {}
        return self._opt

    # -- noise ------------------------------------------------------------------------------
    def _generator(self) -> SecretNoise | SeededNoise:
        """This message's noise: from the party's secret key (default), or in study mode
        (`fedrl.reproducible-noise`) from (seed, role, message count), which anyone with the
        run config can regenerate (training/fedrl_privacy.py)."""
        self.counters["messages"] += 1
        if self.noise_key is not None:
            return SecretNoise(self.noise_key, self.counters["messages"])
        role = 0 if self.role == "alpha" else 1
        return SeededNoise(self.s.seed, role, self.counters["messages"])

    def released(self, q: torch.Tensor, gen, noise: bool = True) -> torch.Tensor:
        return release(q, self.s.clip_bound, self.s.sigma if noise else 0.0, gen)

    def eval_released(self, q: torch.Tensor, gen) -> torch.Tensor:
        """A release about a world other than the training one, counted in the evaluation
        ledger (`eval_count`). In a play, a finished episode's rows are zeros before the noise:
        its frozen last observation would otherwise leave again at every later step, under a
        record (slot, step) the ledger counts as new. The noise drawn and every running row
        are unchanged, and a finished slot's moves are ignored by the world."""
        self.eval_count(len(q))
        if self.eval_world is not None:
            q = q * torch.as_tensor(self.eval_world.active, dtype=q.dtype)[:, None]
        return self.released(q, gen)

    def eval_count(self, rows: int, noised: bool = True) -> None:
        """Count a release of `rows` rows about the current evaluation observation: its record
        is the split, the episode slot and the observation's step in the play (outside a play,
        a study's own world: `other`). An action chosen on un-noised Q (test_noise=off) is a
        release without noise: the split's epsilon is then unbounded."""
        playing = self.eval_world is not None
        split, step = (self.eval_split, int(self.eval_step)) if playing else ("other", 0)
        if noised:
            self.eval_ledger.add(split, step, rows)
        else:
            self.eval_ledger.unnoised.add(split)

    def _open(self) -> np.ndarray:
        """Ids of the transitions that start at the current observation; the first release
        about them resets their (recycled) ledger slots."""
        n = self.counters["transitions"]
        ids = np.arange(n, n + self.s.envs)
        if self.counters["opened"] != n:
            self.ledger.reset_slots(ids)
            self.counters["opened"] = n
        return ids

    # -- shared module ----------------------------------------------------------------------
    def set_theta_g(self, arrays: dict[str, np.ndarray] | None) -> None:
        if arrays:
            self.mlp.load_state_dict({k: _t(v) for k, v in arrays.items()})

    def theta_g(self) -> dict[str, np.ndarray]:
        return {k: v.detach().numpy().copy() for k, v in self.mlp.state_dict().items()}

    def _after_update(self) -> None:
        self.counters["updates"] += 1
        if self.counters["updates"] % self.s.target_every == 0:
            self.q_target.load_state_dict(self.q.state_dict())
            self.mlp_target.load_state_dict(self.mlp.state_dict())

    def privacy(self) -> dict[str, float]:
        """The party's own claim: the epsilon of its most released training record, and of its
        most released evaluation record (unbounded once it acted on un-noised Q); the relay
        computes its own from the messages (training/fedrl_privacy.RelayLedger)."""
        k = self.ledger.max_releases()
        return {
            f"{self.role}-claimed-releases": float(k),
            f"{self.role}-claimed-epsilon": self.s.privacy_epsilon(k),
            f"{self.role}-claimed-eval-epsilon": self.eval_ledger.epsilon(self.s.privacy_epsilon),
        }

    # -- model selection --------------------------------------------------------------------
    def keep_best(self) -> None:
        """Copy this party's Q-network and theta_g aside (the server saw valid improve)."""
        self.q_best, self.mlp_best = copy.deepcopy(self.q), copy.deepcopy(self.mlp)

    def _saved(self) -> tuple[str, ...]:
        """Names of the networks context.state holds: the live ones and the kept best."""
        return self.NETS + (("q_best", "mlp_best") if self.q_best is not None else ())

    def nets(self) -> tuple[nn.Module, nn.Module]:
        """The (Q, MLP) an evaluation acts with: the live ones, or the kept best."""
        if self.eval_world is not None and self.eval_weights == "best" and self.q_best is not None:
            return self.q_best, self.mlp_best
        return self.q, self.mlp

    # -- context.state ----------------------------------------------------------------------
    def state_arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for name in self._saved():
            out.update(
                {
                    f"{name}.{k}": v.numpy().copy()
                    for k, v in getattr(self, name).state_dict().items()
                }
            )
        if self._opt is None:  # never needed since it was loaded: its state as it came
            out.update(self._opt_arrays)
        else:
            for idx, st in self._opt.state_dict()["state"].items():
                out.update(
                    {f"opt.{idx}.{k}": torch.as_tensor(v).numpy().copy() for k, v in st.items()}
                )
        filled = min(self.counters["transitions"], self.replay.capacity)
        out.update({f"replay.{k}": v[:filled] for k, v in self.replay.data.items()})
        out["ledger.counts"] = self.ledger.counts[: filled + self.s.envs]
        out["ledger.retired"] = np.array(self.ledger.retired_max)
        out.update(self.eval_ledger.arrays())
        if self.noise_key is not None:  # context.state: the node's own, never a message
            out["noise.key"] = np.frombuffer(self.noise_key, np.uint8).copy()
        out.update({f"world.{k}": v for k, v in self.world.state().items()})
        if self.chain.any():  # open until the next step that is not an evaluation's
            out["chain"] = self.chain.copy()
        for i, p in self.plays.items():
            pre = f"play.{i}."
            out.update({f"{pre}world.{k}": v for k, v in p["eval_world"].state().items()})
            out[pre + "split"] = np.array(SPLITS.index(p["eval_split"]))
            out[pre + "best"] = np.array(p["eval_weights"] == "best")
            out[pre + "score"] = p["eval_score"]
            out[pre + "step"] = np.asarray(p["eval_step"])
            out[pre + "draws"] = np.array([p["next"], p["end"]], np.int64)
            if "eval_pending" in p:
                out[pre + "pending"] = np.asarray(p["eval_pending"])
        out.update({f"counter.{k}": np.array(v) for k, v in self.counters.items()})
        out.update(
            {f"extra.{k}": np.asarray(getattr(self, k)) for k in self.EXTRA if hasattr(self, k)}
        )
        return out

    def load_arrays(self, a: dict[str, np.ndarray]) -> None:
        if any(k.startswith("q_best.") for k in a):
            self.q_best, self.mlp_best = copy.deepcopy(self.q), copy.deepcopy(self.mlp)
        for name in self._saved():
            getattr(self, name).load_state_dict(
                {k[len(name) + 1 :]: _t(v) for k, v in a.items() if k.startswith(name + ".")}
            )
        self._opt, self._opt_arrays = None, {k: v for k, v in a.items() if k.startswith("opt.")}
        for k, v in self.replay.data.items():
            v[: len(a[f"replay.{k}"])] = a[f"replay.{k}"]
        self.ledger.counts[: len(a["ledger.counts"])] = a["ledger.counts"]
        self.ledger.retired_max = _scalar(a["ledger.retired"])
        self.eval_ledger.load(a)
        if self.noise_key is not None and "noise.key" in a:  # a resume keeps its key
            self.noise_key = np.asarray(a["noise.key"], np.uint8).tobytes()
        self.world.load_state({k[6:]: v for k, v in a.items() if k.startswith("world.")})
        self.plays = {}
        if "chain" in a:
            self.chain = np.asarray(a["chain"], np.int64).copy()
        for i in sorted({int(k.split(".")[1]) for k in a if k.startswith("play.")}):
            pre = f"play.{i}."
            split = SPLITS[_scalar(a[pre + "split"])]
            world = self.s.world(split, reset=False)
            world.load_state(
                {k[len(pre) + 6 :]: v for k, v in a.items() if k.startswith(pre + "world.")}
            )
            nxt, end = (int(x) for x in a[pre + "draws"])
            self.plays[i] = {
                "eval_world": world,
                "eval_split": split,
                "eval_weights": "best" if _scalar(a[pre + "best"]) else "last",
                "eval_score": a[pre + "score"],
                "eval_step": np.array(_scalar(a[pre + "step"])),
                "next": nxt,
                "end": end,
            }
            if pre + "pending" in a:
                self.plays[i]["eval_pending"] = np.array(a[pre + "pending"])
        self.counters = {k[8:]: _scalar(v) for k, v in a.items() if k.startswith("counter.")}
        for k in self.EXTRA:
            if f"extra.{k}" in a:
                setattr(self, k, np.array(a[f"extra.{k}"]))

    # -- evaluation plays (issue 63: a chain steps several plays in one message) -----------
    def draws_per_play(self, steps: int) -> int:
        """Noise draws a play of `steps` steps takes from this party: one per step, and alpha in
        paper mode one more per observation it releases (the first, and one after each step
        but the last)."""
        return 2 * steps if self.role == "alpha" and self.s.mode == "paper" else steps

    def start_plays(self, plays: dict[int, tuple[str, str]]) -> None:
        """Start a chain of plays {index: (split, weights)}. The chain reserves one block of
        message counts per play, in index order, each as long as the play can be
        (`draws_per_play` of its world's `longest`), and the party's count goes on after the
        last block when the chain closes: no count is drawn twice, and what a play draws does
        not depend on how long the others ran. Study mode's numbers are then those of playing
        the plays one by one (each with its own messages, as before issue 63) whenever every
        play runs its full length: always in Text2Action, and in Grid-World unless every
        episode of a split meets before T_m (tests/test_fedrl.py checks the equality)."""
        self.close_plays()
        first = self.counters["messages"]
        self.chain = np.array([first, 0], np.int64)
        for i in sorted(plays):
            split, weights = plays[i]
            if weights not in ("last", "best"):
                raise ValueError(f"evaluation weights must be 'last' or 'best', got {weights!r}")
            world = self.s.world(split)
            block = self.draws_per_play(world.longest)
            self.plays[i] = {
                "eval_world": world,
                "eval_split": split,
                "eval_weights": weights,
                "eval_score": np.zeros((2, world.B), np.float64),  # reward sum, met
                "eval_step": np.array(0),  # the step of the observation the play is at
                "next": first,
                "end": first + block,
            }
            if "eval_pending" in self.PLAY:
                self.plays[i]["eval_pending"] = np.full(world.B, STAY, np.int64)
            first += block
            self.chain[1] += block

    @contextlib.contextmanager
    def playing(self, index: int):
        """Step play `index` of the chain: its world, score and noise count are the party's
        current evaluation while inside."""
        p, outside = self.plays[index], self.counters["messages"]
        for k in self.PLAY:
            setattr(self, k, p[k])
        self.counters["messages"] = p["next"]
        try:
            yield
        finally:
            for k in self.PLAY:
                p[k] = getattr(self, k)
            p["next"] = self.counters["messages"]
            self.counters["messages"], self.eval_world = outside, None
        if p["next"] > p["end"]:  # it would draw the next play's counts
            raise RuntimeError(f"evaluation play {index} drew past its block of noise counts")

    def end_play(self, index: int) -> None:
        """A play whose episodes all ended (alpha knows; beta keeps it until the chain closes)."""
        del self.plays[index]

    def close_plays(self) -> None:
        """End the chain: the noise count goes on after its last block."""
        for i in list(self.plays):
            self.end_play(i)
        if self.chain.any():
            self.counters["messages"] = int(self.chain[0] + self.chain[1])
            self.chain = np.zeros(2, np.int64)


class Beta(Party):
    """Agent beta (Algorithm 2): states and actions, no rewards. In `paper` action mode it acts
    on Q_f^beta = MLP_beta([C_alpha | Q_hat_beta(s_beta)]); in `joint-action` mode alpha's joint
    action moves it."""

    role, head = "beta", 1
    EXTRA = ("pending_s", "pending_a", "has_pending")
    PLAY = (*Party.PLAY, "eval_pending")  # its move in the play, applied with alpha's next

    def __init__(self, s: Settings, restoring: bool = False):
        obs = s.obs_field("beta")
        super().__init__(s, {"s": obs, "a": ((), np.int64), "s2": obs}, restoring)
        self.head = 0 if s.mode == "joint-action" else 1
        self.pending_s = np.zeros((s.envs, *obs[0]), obs[1])
        self.pending_a = np.full(s.envs, STAY, np.int64)
        self.has_pending = np.array(False)

    def _greedy(self, mlp: nn.Module, c_alpha, own: torch.Tensor) -> np.ndarray:
        if self.s.mode == "joint-action":
            return np.full(len(own), STAY, np.int64)  # alpha's joint action moves beta
        if c_alpha is None:
            raise ValueError("beta needs C_alpha to act in paper action mode")
        return mlp(_t(c_alpha).float(), own, self.head).argmax(1).numpy()

    def act(
        self, prev_alpha: np.ndarray | None, c_alpha: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """ComputeQBeta(): observe, release C_beta = Q_hat_beta(s_beta, .), choose a_beta
        epsilon-greedily on Q_f^beta(s_beta, ., C_alpha)."""
        self.sync(prev_alpha)
        gen = self._generator()
        s = self.world.obs_beta.copy()
        with torch.no_grad():
            c = self.released(self.q(_t(s)), gen)
            greedy = self._greedy(self.mlp, c_alpha, c)
        n = self.counters["transitions"]
        rng = np.random.default_rng([self.s.seed, 1, n])
        a = (
            greedy
            if self.s.mode == "joint-action"
            else explore(greedy, self.s.epsilon_greedy(n), N_ACTIONS, rng)
        )
        self.ledger.add(self._open())
        self.pending_s, self.pending_a, self.has_pending = s, a, np.array(True)
        return c.numpy(), a

    def sync(self, prev_alpha: np.ndarray | None) -> None:
        """Step the world replica with alpha's last action ids and store the finished
        transitions (s_beta, a_beta, s'_beta) under the same ids alpha uses."""
        if prev_alpha is None or not bool(np.asarray(self.has_pending).ravel()[0]):
            return
        prev_alpha = np.asarray(prev_alpha)
        if self.s.mode == "joint-action":
            a_alpha, a_beta = self.s.joint_moves(prev_alpha)
            stored = prev_alpha
        else:
            a_alpha, a_beta, stored = prev_alpha, self.pending_a, self.pending_a
        _, _, _, _, next_beta = self.world.step(a_alpha, a_beta)
        self.replay.put(self.counters["transitions"], s=self.pending_s, a=stored, s2=next_beta)
        self.counters["transitions"] += self.s.envs
        self.has_pending = np.array(False)

    def q_outputs(self, ids: np.ndarray):
        """ComputeQBeta(j) for K minibatches at once: C_beta(s_j) from the online network and
        C'_beta(s'_j) from the target network (for alpha's target Y_j). The ids are of stored
        transitions only: the orchestrator draws them before the step beta has just acted on."""
        gen = self._generator()
        batch = self.replay.get(ids.ravel())
        with torch.no_grad():
            c = self.released(self.q(_t(batch["s"])), gen)
            c2 = self.released(self.q_target(_t(batch["s2"])), gen)
        self.ledger.add(ids, times=2)
        shape = (*ids.shape, self.s.n_actions)
        return c.numpy().reshape(shape), c2.numpy().reshape(shape)

    def update(
        self,
        ids: np.ndarray,
        targets: np.ndarray,
        c_alpha: np.ndarray,
        theta_g: dict[str, np.ndarray],
    ) -> tuple[dict[str, np.ndarray], float]:
        """UpdateQ(Y_j, j, C_alpha, theta_g) for K minibatches: Eq. (5), (7) on theta_beta and
        theta_g, alpha's C_alpha held constant."""
        self.set_theta_g(theta_g)
        gen = self._generator()
        losses = []
        for k in range(len(ids)):
            b = self.replay.get(ids[k])
            own = self.released(self.q(_t(b["s"])), gen)
            qf = self.mlp(_t(c_alpha[k]).float(), own, self.head)
            loss = q_loss(qf, _t(b["a"]), _t(targets[k]).float())
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self._after_update()
            losses.append(loss.item())
        return self.theta_g(), float(np.mean(losses))

    # -- evaluation: greedy on Q_f^beta ------------------------------------------------------
    def eval_act(
        self, prev_alpha: np.ndarray | None, c_alpha: np.ndarray | None, test_noise: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """Greedy step; test_noise=False drops the noise on beta's own Q inside Q_f^beta (the
        C_beta that leaves is always noised)."""
        w = self.eval_world
        if prev_alpha is not None:
            prev_alpha = np.asarray(prev_alpha)
            if self.s.mode == "joint-action":
                w.step(*self.s.joint_moves(prev_alpha))
            else:
                w.step(prev_alpha, self.eval_pending)
            self.eval_step = np.array(int(self.eval_step) + 1)
        gen = self._generator()
        q_net, mlp = self.nets()
        with torch.no_grad():
            q = q_net(_t(w.obs_beta))
            c = self.eval_released(q, gen)
            own = c if test_noise else self.released(q, gen, noise=False)
            # a finished slot's move says nothing about its frozen observation (`eval_released`)
            self.eval_pending = np.where(w.active, self._greedy(mlp, c_alpha, own), STAY)
        if not test_noise and self.s.mode != "joint-action":  # its move leaves, un-noised
            self.eval_count(len(q), noised=False)
        return c.numpy(), self.eval_pending


class Alpha(Party):
    """Agent alpha (Algorithm 1): full transitions with rewards; computes the targets Y."""

    role, head = "alpha", 0
    EXTRA = ("stats", "returns")

    def __init__(self, s: Settings, restoring: bool = False):
        obs = s.obs_field("alpha")
        super().__init__(
            s,
            {
                "s": obs,
                "a": ((), np.int64),
                "r": ((), np.float32),
                "s2": obs,
                "done": ((), np.float32),
            },
            restoring,
        )
        self.stats = np.zeros(3)  # episodes finished, met, reward sum (since last report)
        self.returns = np.zeros(s.envs)

    def _qf(self, obs, c_beta, gen, noise=True, target=False, nets=None) -> torch.Tensor:
        q, mlp = (self.q_target, self.mlp_target) if target else (nets or (self.q, self.mlp))
        own = self.released(q(_t(obs)), gen, noise)
        return mlp(own, _t(c_beta).float(), self.head)

    def observe(self, world: GridWorld | None = None) -> np.ndarray | None:
        """C_alpha = Q_hat_alpha(s_alpha) of the current observation, for beta's Q_f^beta
        (`paper` action mode only; None in `joint-action` mode, where beta does not act)."""
        if self.s.mode == "joint-action":
            return None
        gen = self._generator()
        with torch.no_grad():
            if world is not None:  # an evaluation play
                return self.eval_released(self.nets()[0](_t(world.obs_alpha)), gen).numpy()
            c = self.released(self.q(_t(self.world.obs_alpha)), gen)
        self.ledger.add(self._open())
        return c.numpy()

    def act(
        self, c_beta: np.ndarray, a_beta: np.ndarray, observe: bool = True
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Alg. 1 steps 6-11: choose a_t epsilon-greedily on Q_f^alpha(s_alpha, ., C_beta),
        execute it (with beta's move) and store (s, a, r, s', done). Returns the action ids and
        C_alpha of the next observation (for beta's next step; None with observe=False, when
        an update follows and computes it afterwards)."""
        gen = self._generator()
        s = self.world.obs_alpha.copy()
        with torch.no_grad():
            greedy = self._qf(s, c_beta, gen).argmax(1).numpy()
        n = self.counters["transitions"]
        rng = np.random.default_rng([self.s.seed, 0, n])
        a = explore(greedy, self.s.epsilon_greedy(n), self.s.n_actions, rng)
        moves = self.s.joint_moves(a) if self.s.mode == "joint-action" else (a, np.asarray(a_beta))
        r, done, met, next_alpha, _ = self.world.step(*moves)
        # the action ids leave: argmax of Q_f on a fresh draw of alpha's own noise, so one more
        # Gaussian release of each acting transition (issue 61 review)
        self.ledger.add(self._open())
        self.replay.put(n, s=s, a=a, r=r, s2=next_alpha, done=done.astype(np.float32))
        self.counters["transitions"] += self.s.envs
        count_episodes(self.stats, self.returns, r, done, met)
        return a, (self.observe() if observe else None)

    def update(
        self,
        ids: np.ndarray,
        c_beta: np.ndarray,
        c_beta_next: np.ndarray,
        theta_g: dict[str, np.ndarray] | None,
    ):
        """K updates of Eq. (4), (6); after each, C_alpha = Q_hat_alpha(s_j) for beta.
        Returns (Y, C_alpha, theta_g, mean loss, C_alpha of the current observation)."""
        self.set_theta_g(theta_g)
        gen = self._generator()
        K, bs = ids.shape
        ys = np.zeros((K, bs), np.float32)
        cs = np.zeros((K, bs, self.s.n_actions), np.float32)
        losses = []
        for k in range(K):
            b = self.replay.get(ids[k])
            with torch.no_grad():
                q_next = self._qf(b["s2"], c_beta_next[k], gen, target=True)
                y = td_target(_t(b["r"]), _t(b["done"]), q_next, self.s.gamma)
            loss = q_loss(self._qf(b["s"], c_beta[k], gen), _t(b["a"]), y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self._after_update()
            with torch.no_grad():
                cs[k] = self.released(self.q(_t(b["s"])), gen).numpy()
            ys[k] = y.numpy()
            losses.append(loss.item())
        self.ledger.add(ids)
        return ys, cs, self.theta_g(), float(np.mean(losses)), self.observe()

    def take_stats(self) -> dict[str, float]:
        """Training episodes finished since the last call: count, success rate, mean reward."""
        out = episode_report(self.stats)
        if self.s.text:  # no success event in Text2Action
            out.pop("train-succ-rate")
        self.stats = np.zeros(3)
        return {**out, "exploration": self.s.epsilon_greedy(self.counters["transitions"])}

    # -- evaluation ------------------------------------------------------------------------
    def eval_act(self, c_beta: np.ndarray, a_beta: np.ndarray, test_noise: bool) -> tuple:
        """Greedy step on the evaluation world; test_noise=False drops the noise on alpha's own
        Q output inside Q_f^alpha (what leaves a party is always noised). Returns the action
        ids, whether any episode is still running, and C_alpha of the next observation."""
        w = self.eval_world
        gen = self._generator()
        with torch.no_grad():
            a = (
                self._qf(w.obs_alpha, c_beta, gen, noise=test_noise, nets=self.nets())
                .argmax(1)
                .numpy()
            )
        a = np.where(w.active, a, 0)  # a finished slot's move: a constant (`eval_released`)
        self.eval_count(len(a), noised=test_noise)  # the action ids leave
        moves = self.s.joint_moves(a) if self.s.mode == "joint-action" else (a, np.asarray(a_beta))
        r, done, met, _, _ = w.step(*moves)  # finished slots get reward 0
        self.eval_step = np.array(int(self.eval_step) + 1)
        self.eval_score[0] += r
        self.eval_score[1] += met
        active = bool(w.active.any())
        return a, active, (self.observe(w) if active else None)

    def eval_result(self) -> dict[str, float]:
        """SuccRate and AvgRwd (Grid-World) | precision, recall, F1 and AvgRwd (Text2Action):
        only alpha, which holds the rewards and labels, can score an evaluation."""
        return self.eval_world.report(self.eval_score[0], self.eval_score[1])
