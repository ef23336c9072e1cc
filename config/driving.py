"""Run-config keys of the driving methods: the silos and local training (`driving.*`), FedProx's
proximal term (`fedprox.*`) and CDL's loss (`cdl.*`)."""

from __future__ import annotations

from dataclasses import dataclass

from config.schema import ConfigError, Section, setting


@dataclass(frozen=True)
class DrivingSettings(Section):
    prefix = "driving."
    title = "Driving silos (fedavg, fedprox, gossip, cdl, cdl-sfl)"

    data_dir: str = setting(
        '"" = embedded procedural silos; else a folder of driving logs (envs/driving_logs.py)'
    )
    image_size: int = setting(
        "input side in pixels; 200 is the paper's DroNet input, 64 keeps CPU runs short",
        lo=8,
        hi=1024,
    )
    channels: int = setting("image channels: 1 (grey) or 3 (RGB)", lo=1, hi=3)
    train_per_silo: int = setting("embedded silos: training images per silo", lo=1, hi=10**7)
    test_per_silo: int = setting("embedded silos: test images per silo", lo=1, hi=10**7)
    local_epochs: int = setting("local epochs per round", lo=1, hi=1000)
    local_steps: int = setting(
        "> 0: exactly this many minibatches per round instead of epochs (the reference's "
        "local_steps)",
        lo=0,
        hi=10**7,
    )
    batch_size: int = setting("local minibatch size", lo=1, hi=10**5)
    lr: float = setting("local learning rate", lo=0, hi=10, lo_open=True)
    optimizer: str = setting(
        "local optimizer: sgd (momentum 0.9) | adam (the CDL reference's)", choices=("sgd", "adam")
    )
    weight_decay: float = setting(
        "L2 weight decay (the CDL official code's Adam uses 1e-5)", lo=0, hi=1
    )
    lr_decay: str = setting(
        "none | sqrt (lr / sqrt(t) over the silo's local steps: the official --decay sqrt)",
        choices=("none", "sqrt"),
    )
    optimizer_state: str = setting(
        "round (fresh optimizer each round) | silo (kept in the silo's context across rounds, "
        "never sent; the official code)",
        choices=("round", "silo"),
    )
    batchnorm_statistics: str = setting(
        "shared (the papers': running means and variances travel with the weights) | local "
        "(they never leave a silo; every model is normalised with statistics of the data it "
        "runs on: models/state.py)",
        choices=("shared", "local"),
    )
    grad_clip: float = setting("> 0: clip each local gradient at this norm (0 = off)", lo=0, hi=1e6)
    non_iid: float = setting(
        "embedded silos: 1 = default non-IID silos, 0 = IID (every silo the same distribution)",
        lo=0,
        hi=1,
    )

    @property
    def statistics_travel(self) -> bool:
        """Whether BatchNorm running statistics travel with the weights (models/state.py)."""
        return self.batchnorm_statistics == "shared"

    def validate(self) -> None:
        from models.resnet8 import feature_map_size

        if self.channels not in (1, 3):
            raise ConfigError(f"run config 'driving.channels' must be 1 or 3, got {self.channels}")
        try:
            feature_map_size(self.image_size)
        except ValueError as e:
            raise ConfigError(f"run config 'driving.image-size': {e}") from None


@dataclass(frozen=True)
class FedProxSettings(Section):
    prefix = "fedprox."
    title = "FedProx"

    proximal_mu: float = setting(
        "mu of the proximal term (mu/2)||w - w_global||^2 added to each local loss", lo=0, hi=1e4
    )


@dataclass(frozen=True)
class CDLSettings(Section):
    prefix = "cdl."
    title = "CDL (cdl, cdl-sfl)"

    variant: str = setting(
        "paper (the article's Eq.) | reference (what the official code computes)",
        choices=("paper", "reference"),
    )
    beta: float = setting("L_cd = beta * KL(P_b||P_s) + (1 - beta) * KL(P_s||P_b)", lo=0, hi=1)
    temperature: float = setting(
        "P = softmax(features / T); 1 = the article", lo=0, hi=1e4, lo_open=True
    )
