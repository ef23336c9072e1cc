"""What a FedRL run builds from its config: worlds, networks and the sizes derived from
`fedrl.*` (the keys themselves, their ranges and meaning: config/fedrl.py).

Both parties, the orchestrator and the baselines build from one `Settings`, so they agree on
maps, windows, horizon and network shapes without exchanging them."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from torch import nn

from config import Config
from config.fedrl import FedRLSettings
from envs import text2action as t2a
from envs.gridworld import (
    DEFAULT_HISTORY,
    GridWorld,
    Maps,
    generate_maps,
    load_mat,
    max_steps_for,
)
from envs.word_vectors import word_table
from models.fedrl_nets import N_ACTIONS, FullQNet, QNet
from models.text_cnn import FullFeatures, PosFeatures, TextCNN, WordFeatures
from training.fedrl_privacy import epsilon
from training.fedrl_replay import split_joint

SPLITS = ("train", "valid", "test")
# fedrl.clip = 0: the domain's L2 bound on a released Q vector. Grid-World's Q outputs stay
# within ~10; Text2Action's reach ~r/(1-gamma) = 500 (reward base 50), so a bound of 10 would
# wash out the ranking under sigma = 1, while 1000 leaves them as the reference releases them.
DEFAULT_CLIP = {"gridworld": 10.0, "text2action": 1000.0}
# fedrl.target-update = 0: the domain's target-copy period, in updates. Grid-World: 100 (Table 1
# was measured with it). Text2Action: 1000; copies every 5 or 100 updates let FedRL's Q_hat
# diverge and the run collapse to selecting nothing (experiments/fedrl/t2a_collapse.py).
DEFAULT_TARGET_UPDATE = {"gridworld": 100, "text2action": 1000}


@dataclass(frozen=True)
class Settings:
    """A FedRL run's settings: the `fedrl.*` keys as parsed (`f`, a FedRLSettings, read under
    their own names: `s.envs`, `s.sigma`, `s.mlp_hidden`), plus only what derives from the run:
    its seed, the map ranges resolved against the map file, the windows, and the defaults that
    0 stands for (`history_len`, `clip_bound`, `mlp_width`).

    `domain` picks the world and the networks: Grid-World (Sec. 5.1) or Text2Action (Sec. 5.2,
    `t2a_*` keys; one joint action, select or neglect the current word, chosen on alpha's
    Q_f as the reference's `frl_separate`); the protocol is the same."""

    f: FedRLSettings
    seed: int
    train: range
    valid: range
    test: range
    w_alpha: int
    w_beta: int
    history_len: int  # fedrl.history, or the size's default for 0
    clip_bound: float  # fedrl.clip, or the domain's bound for 0 (DEFAULT_CLIP)

    def __getattr__(self, name: str):
        """A `fedrl.*` key under its own name (called only for what Settings itself lacks)."""
        if name == "f":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.f, name)

    @classmethod
    def of(cls, c: Config) -> "Settings":
        """The run's FedRL settings with what derives from them (windows, map ranges)."""
        f = c.fedrl
        w_alpha, w_beta = f.window_sizes
        ranges = f.map_ranges(_map_count(f.map_file, f.size, f.maps_seed))
        return cls(
            f=f,
            seed=c.run.seed,
            train=ranges["train"],
            valid=ranges["valid"],
            test=ranges["test"],
            w_alpha=w_alpha,
            w_beta=w_beta,
            history_len=f.history or DEFAULT_HISTORY.get(f.size, 8),
            clip_bound=f.clip or DEFAULT_CLIP[f.domain],
        )

    @property
    def target_every(self) -> int:
        """Updates between copies of the online networks into the targets: `fedrl.target-update`,
        or the domain's for 0 (DEFAULT_TARGET_UPDATE)."""
        return self.target_update or DEFAULT_TARGET_UPDATE[self.domain]

    @property
    def update_ratio(self) -> float:
        """Minibatch updates per environment transition: K / (B x S) (the reference: 1)."""
        return self.updates / (self.envs * self.act_steps)

    @property
    def text(self) -> bool:
        return self.domain == "text2action"

    @property
    def n_actions(self) -> int:
        """Actions one Q head ranks: a party's own 4, the 16 joint actions, or Text2Action's
        select/neglect."""
        if self.text:
            return 2
        return N_ACTIONS * N_ACTIONS if self.mode == "joint-action" else N_ACTIONS

    @property
    def mlp_width(self) -> int:
        """theta_g's hidden width: `fedrl.mlp-hidden`, or 0 for the paper's: Grid-World
        "32 x 4" (Sec. 5.1), Text2Action "4 x 2" (Sec. 5.2; the reference's 2 x num_actions)."""
        return self.mlp_hidden or (2 * self.n_actions if self.text else 32)

    @property
    def horizon(self) -> int:
        """Most steps an episode can take (an evaluation's bound)."""
        return self.t2a_words if self.text else max_steps_for(self.size, self.max_steps)

    def select_key(self, fedrl: bool = True) -> str:
        """The valid score model selection maximises (F1 | SuccRate; FedRL's with test noise)."""
        key = "valid-f1" if self.text else "valid-succ-rate"
        return key + ("-test_noise=on" if fedrl else "")

    def corpus(self) -> t2a.Corpus:
        return t2a.load_corpus(
            self.t2a_data,
            self.t2a_dataset,
            self.t2a_words,
            self.t2a_folds,
            self.t2a_fold,
            self.t2a_valid_every,
        )

    def obs_field(self, role: str) -> tuple[tuple, type]:
        """Shape and dtype of one observation of `role` in a replay."""
        if self.text:
            return (self.t2a_words + 1,), np.int16
        w = self.w_alpha if role == "alpha" else self.w_beta
        return (self.history_len, w, w), np.uint8

    def q_net(self, role: str, n_out: int | None = None) -> nn.Module:
        """A basic Q-network on `role`'s observations ("full": both parties' features)."""
        n = n_out or self.n_actions
        if not self.text:
            if role == "full":
                return FullQNet(self.history_len, self.w_alpha, self.w_beta, n)
            return QNet(self.history_len, self.w_alpha if role == "alpha" else self.w_beta, n)
        c = self.corpus()

        def pos():
            return PosFeatures(c.pos, c.n_pos)

        def word():
            table = _word_table(
                self.t2a_data,
                self.t2a_dataset,
                self.t2a_words,
                self.t2a_folds,
                self.t2a_fold,
                self.t2a_valid_every,
            )
            return WordFeatures(table)

        feats = {"alpha": pos, "beta": word, "full": lambda: FullFeatures(word(), pos())}[role]()
        return TextCNN(feats, n)

    def joint_moves(self, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(alpha's move, beta's move) of joint action ids: Grid-World's divmod(a, 4); in
        Text2Action the one tag applies to the word both replicas are at."""
        return (np.asarray(a), np.asarray(a)) if self.text else split_joint(a)

    def maps(self) -> Maps:
        return _maps(self.map_file, self.size, self.maps_seed)

    def split(self, name: str):
        if self.text:
            return self.corpus().splits[name]
        return {"train": self.train, "valid": self.valid, "test": self.test}[name]

    def check_maps(self) -> None:
        """Fail early, naming the key, when a range does not fit the maps (Text2Action: load
        and check the corpus)."""
        if self.text:
            c = self.corpus()
            if not len(c.splits["train"]) or not len(c.splits["valid"]):
                raise ValueError("fedrl.t2a-valid-every leaves no train or no valid texts")
            return
        maps = self.maps()
        if self.map_file and maps.size != self.size:
            raise ValueError(
                f"fedrl.size is {self.size} but {self.map_file} holds {maps.size}x{maps.size} maps"
            )
        if not len(self.train):
            raise ValueError("fedrl.train-maps is empty")
        for name in ("train", "valid", "test"):
            maps.check_range(self.split(name), f"fedrl.{name}-maps")
            if len(self.split(name)) and not maps.usable(self.split(name), self.rules):
                report = maps.report(self.split(name), self.rules)
                raise ValueError(
                    f"fedrl.{name}-maps: no usable map in {maps.source} "
                    f"under {self.rules} rules ({report})"
                )

    def map_report(self) -> dict[str, dict]:
        """Per split: maps in the range, maps used, and why the others were skipped."""
        if self.text:
            c = self.corpus()
            return {
                name: {"texts": len(ids), "words": int(c.lengths[ids].sum())}
                for name, ids in c.splits.items()
                if len(ids)
            }
        maps = self.maps()
        return {
            name: maps.report(self.split(name), self.rules)
            for name in SPLITS
            if len(self.split(name))
        }

    def world(self, split: str = "train", n_envs: int | None = None, reset: bool = True):
        evaluation = split != "train"
        if self.text:
            return t2a.TextWorld(
                self.corpus(),
                split,
                n_envs or self.envs,
                seed=self.seed,
                evaluation=evaluation,
                reset=reset,
            )
        r = self.split(split)
        if evaluation:
            n_envs = self.eval_episodes or len(r)
        return GridWorld(
            self.maps(),
            r,
            n_envs or self.envs,
            windows=(self.w_alpha, self.w_beta),
            history=self.history_len,
            max_steps=self.max_steps,
            rules=self.rules,
            seed=self.seed,
            evaluation=evaluation,
            reset=reset,
        )

    def epsilon_greedy(self, transitions: int) -> float:
        frac = min(1.0, transitions / self.eps_decay)
        return self.eps_start + (self.eps_end - self.eps_start) * frac

    def privacy_epsilon(self, releases: int) -> float:
        return epsilon(releases, self.sigma, self.clip_bound, self.delta)


@lru_cache(maxsize=4)
def _word_table(data_dir, dataset, words, folds, fold, valid_every) -> np.ndarray:
    c = t2a.load_corpus(data_dir, dataset, words, folds, fold, valid_every)
    return word_table(c.words, words, data_dir)


def _map_count(map_file: str, size: int, seed: int) -> int:
    """How many maps there are, for "auto" ranges: a file's own count (8000 generated). A file
    that does not load counts as 8000 here; check_maps() then names what is wrong with it."""
    if not map_file:
        return 8000
    try:
        return _maps(map_file, size, seed).count
    except (OSError, ValueError, KeyError):
        return 8000


@lru_cache(maxsize=4)
def _maps(map_file: str, size: int, seed: int) -> Maps:
    return load_mat(map_file) if map_file else generate_maps(size, seed=seed)
