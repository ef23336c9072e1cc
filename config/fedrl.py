"""Run-config keys of FedRL (`fedrl.*`): the world, the exchange, the noise and the learning.

What the run builds from them (worlds, networks, derived sizes) is `training/fedrl_setup.py`."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from config.schema import ConfigError, Section, setting
from envs.gridworld import RULES, paper_split, parse_range
from envs.text2action_data import DOMAINS as T2A_DATASETS

DOMAINS = ("gridworld", "text2action")


@dataclass(frozen=True)
class FedRLSettings(Section):
    prefix = "fedrl."
    title = "FedRL"

    retries: int = setting(
        "a party's failed call (an error reply) is sent again this many times; then the run stops",
        lo=0,
        hi=100,
    )
    domain: str = setting(
        "gridworld (paper Sec. 5.1) | text2action (Sec. 5.2, the t2a-* keys)", choices=DOMAINS
    )
    t2a_data: str = setting(
        "Text2Action: directory of the EASDRL pickles (e.g. ../shared/data/text2action)"
    )
    t2a_dataset: str = setting(
        "Text2Action data set: win2k (WHS), cooking (CT), wikihow (WHG)", choices=T2A_DATASETS
    )
    t2a_words: int = setting(
        "words per text kept (the reference's num_words); longer texts are cut", lo=5, hi=10**5
    )
    t2a_folds: int = setting("the official k-fold split (5 or 10)", lo=2, hi=100)
    t2a_fold: int = setting("the fold held out as test", lo=0, hi=99)
    t2a_valid_every: int = setting(
        "every n-th remaining text is validation (checkpoint selection), the rest train",
        lo=0,
        hi=10**5,
    )
    size: int = setting("Grid-World size 8 | 16 | 32 (any >= 5 with generated maps)", lo=5, hi=256)
    map_file: str = setting(
        '"" = generated maps (embedded default); else a gridworld_o_<n>.mat (the paper\'s maps)'
    )
    maps_seed: int = setting("generated maps only: their seed", lo=0, hi=2**32 - 1)
    train_maps: str = setting(
        'training map index range FIRST-LAST; "auto" = the paper\'s split of the maps there '
        "are: 0-6399 of 8000 (6400/800/800), and of the shipped .mat files' 7,200 too"
    )
    valid_maps: str = setting(
        'validation map range (checkpoint selection); "auto" = 6400-7199 of 8000 maps, '
        "6400-6799 of the shipped files' 7,200"
    )
    test_maps: str = setting(
        'test map range; "" = none; "auto" = 7200-7999 of 8000 maps, 6800-7199 of the '
        "shipped files' 7,200"
    )
    windows: str = setting(
        "alpha,beta observation windows, odd sizes (paper 3,5; the reference code 5,3)"
    )
    history: int = setting(
        "H stacked observations; 0 = 8 at 8x8 (Figure 4, measured), 16 at 16x16 and 32x32 "
        "(the paper's text)",
        lo=0,
        hi=1024,
    )
    max_steps: int = setting(
        "T_m, the most steps of an episode; 0 = the paper's 38/86/178 at 8/16/32",
        lo=0,
        hi=10**5,
    )
    rules: str = setting(
        "paper (Sec. 5.1 text) | reference (what FRL2019/FRL computes): distance, meeting, "
        "rewards, starts (envs/gridworld.py)",
        choices=RULES,
    )
    action_mode: str = setting(
        '"" = follows rules (paper -> paper, reference -> joint-action) | paper (each party '
        "acts on its own federated Q) | joint-action (alpha picks 4x4 joint actions)",
        choices=("", "paper", "joint-action"),
    )
    sigma: float = setting(
        "std of the Gaussian noise on every released Q output (each party's own policy "
        "sets its floor, default 1: clients/policy.py)",
        lo=0,
        hi=1e6,
    )
    reproducible_noise: bool = setting(
        "study mode, NOT private: the noise is drawn from the run seed, so anyone with the run "
        "config can regenerate and remove it; false (default) = each party's own secret key "
        "from OS entropy. A party refuses it unless its policy sets allow-reproducible-noise"
    )
    insecure_no_noise: bool = setting(
        "allow sigma = 0: Q outputs leave un-noised (config.json says so)"
    )
    mlp_hidden: int = setting(
        "theta_g's hidden ReLU units; 0 = the paper's: 32 Grid-World, 4 Text2Action",
        lo=0,
        hi=10**5,
    )
    clip: float = setting(
        "L2 bound C on each Q output vector before noising (sensitivity 2C); 0 = the "
        "domain's: 10 Grid-World, 1000 Text2Action",
        lo=0,
        hi=1e6,
    )
    delta: float = setting(
        "delta of the (epsilon, delta) privacy the run reports (RDP accountant)",
        lo=0,
        hi=0.5,
        lo_open=True,
    )
    envs: int = setting("B parallel environments acted on per message", lo=1, hi=10**5)
    act_steps: int = setting(
        "environment steps per round (2 messages each); 128 x 1: 0.9 of one process's "
        "speed, SuccRate as good as any (experiments/fedrl/throughput.py)",
        lo=1,
        hi=10**5,
    )
    updates: int = setting(
        "K minibatch updates per round (carried by the last acting step); K / (envs x "
        "act-steps) = 0.5 updates per transition (measured)",
        lo=1,
        hi=10**6,
    )
    batch_size: int = setting("minibatch size of an update", lo=1, hi=10**5)
    lr: float = setting("Adam's learning rate, as the paper", lo=0, hi=1, lo_open=True)
    gamma: float = setting("discount (the reference code's 0.9)", lo=0, hi=1)
    target_update: int = setting(
        "copy online -> target networks every this many updates; 0 = the domain's: 100 "
        "Grid-World, 1000 Text2Action (every 5 or 100 let FedRL's Q diverge and collapse "
        "there: experiments/fedrl/t2a_collapse.py)",
        lo=0,
        hi=10**7,
    )
    eps_start: float = setting("exploration epsilon at the start", lo=0, hi=1)
    eps_end: float = setting("exploration epsilon after eps-decay transitions", lo=0, hi=1)
    eps_decay: int = setting(
        "transitions over which exploration decays linearly (measured)", lo=1, hi=10**9
    )
    replay: int = setting("replay capacity (transitions)", lo=1, hi=10**8)
    warmup: int = setting("transitions before the first update", lo=0, hi=10**8)
    eval_episodes: int = setting(
        "episodes per evaluation: 0 = one per map of the range", lo=0, hi=10**7
    )

    def validate(self) -> None:
        self.window_sizes  # noqa: B018 (ConfigError naming fedrl.windows)
        self.map_ranges()  # ... or a map range
        if self.domain == "text2action" and self.action_mode == "paper":
            raise ConfigError(
                "run config 'fedrl.action-mode': Text2Action has one joint action per word "
                "(select or neglect); use '' or 'joint-action'"
            )
        if self.sigma == 0 and not self.insecure_no_noise:
            raise ConfigError(
                "run config 'fedrl.sigma' = 0 would release Q outputs without noise; set "
                "fedrl.insecure-no-noise=true to run that anyway"
            )
        if self.eps_end > self.eps_start:
            raise ConfigError("run config 'fedrl.eps-end' must be <= 'fedrl.eps-start'")

    @cached_property
    def window_sizes(self) -> tuple[int, int]:
        """(alpha's, beta's) observation window."""
        try:
            w = tuple(int(x) for x in self.windows.split(","))
        except ValueError:
            w = ()
        if len(w) != 2 or not all(x >= 1 and x % 2 == 1 for x in w):
            raise ConfigError(
                f"run config 'fedrl.windows': expected two odd sizes 'alpha,beta', "
                f"got {self.windows!r}"
            )
        return w

    def map_ranges(self, count: int = 8000) -> dict[str, range]:
        """split -> the map indices of `fedrl.<split>-maps`, "auto" read as the paper's split
        of the `count` maps there are (envs/gridworld.paper_split)."""
        out = {}
        for split in ("train", "valid", "test"):
            key = f"fedrl.{split}-maps"
            text = getattr(self, f"{split}_maps")
            try:
                auto = text == "auto"
                out[split] = parse_range(paper_split(count)[split] if auto else text, key)
            except ValueError as e:
                raise ConfigError(f"run config {key}: {e}" if auto else f"run config {e}") from None
        return out

    @property
    def mode(self) -> str:
        """Who acts on what: `paper` or `joint-action` (Text2Action: always joint)."""
        if self.domain == "text2action":
            return "joint-action"
        return self.action_mode or ("joint-action" if self.rules == "reference" else "paper")
