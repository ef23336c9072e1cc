"""Non-IID driving silos for the embedded default: each silo has its own camera style and its own
distribution of road curves, both drawn deterministically from (silo id, seed).

Covariate shift: brightness, sky/verge/road/lane colours, fog, rain, sensor noise, camera
mounting offset and pitch (horizon). Label shift: each silo's curvature is drawn from
N(mu_i, sd_i) with a silo-specific mean (some silos drive mostly left-hand bends, some mostly
right-hand, some mostly straight) and spread. The steering label is the bicycle-model angle of
the curve plus Gaussian sensor noise of a silo-specific level.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from envs.road_renderer import RoadStyle, render_road, steering_from_curvature, to_channels

MAX_CURVATURE = 0.08  # 1/m; steering |s| <= 0.46


@dataclass
class SiloData:
    """One silo's train/test split: images N x C x H x W float32, steering N float32."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


@dataclass(frozen=True)
class SiloProfile:
    style: RoadStyle
    curve_mean: float
    curve_sd: float
    label_noise: float


def silo_profile(silo_id: int, seed: int) -> SiloProfile:
    """The style and curve distribution of one silo (same ids and seed -> same silo)."""
    r = np.random.default_rng([seed, silo_id, 7919])

    def jitter(base, amount):
        return tuple(float(np.clip(b + r.uniform(-amount, amount), 0, 1)) for b in base)

    style = RoadStyle(
        brightness=float(r.uniform(0.55, 1.25)),
        sky=jitter((0.55, 0.70, 0.90), 0.25),
        verge=jitter((0.30, 0.45, 0.22), 0.2),
        road=jitter((0.35, 0.35, 0.37), 0.2),
        lane=jitter((0.95, 0.95, 0.85), 0.15),
        noise=float(r.uniform(0.01, 0.06)),
        fog=float(r.choice([0.0, 0.0, r.uniform(0.2, 0.7)])),
        rain=float(r.choice([0.0, 0.0, r.uniform(0.1, 0.6)])),
        cam_offset_m=float(r.uniform(-0.8, 0.8)),
        horizon=float(r.uniform(0.3, 0.5)),
        road_half_width_m=float(r.uniform(2.5, 4.5)),
    )
    return SiloProfile(
        style=style,
        curve_mean=float(r.uniform(-0.6, 0.6) * MAX_CURVATURE),
        curve_sd=float(r.uniform(0.15, 0.5) * MAX_CURVATURE),
        label_noise=float(r.uniform(0.005, 0.03)),
    )


def render_samples(profile: SiloProfile, n: int, image_size: int, channels: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n images of this silo and their noisy steering labels."""
    c = np.clip(rng.normal(profile.curve_mean, profile.curve_sd, n), -MAX_CURVATURE, MAX_CURVATURE)
    if n == 0:
        return np.zeros((0, channels, image_size, image_size), np.float32), np.zeros(0, np.float32)
    x = np.stack([to_channels(render_road(ci, image_size, profile.style, rng,
                                          phase=rng.uniform(0, 6)), channels) for ci in c])
    y = steering_from_curvature(c) + rng.normal(0.0, profile.label_noise, n)
    return x.astype(np.float32), y.astype(np.float32)


def make_silo(silo_id: int, seed: int, n_train: int, n_test: int, image_size: int,
              channels: int = 1) -> SiloData:
    """Deterministic train/test split of one embedded silo."""
    profile = silo_profile(silo_id, seed)
    xtr, ytr = render_samples(profile, n_train, image_size, channels,
                              np.random.default_rng([seed, silo_id, 1]))
    xte, yte = render_samples(profile, n_test, image_size, channels,
                              np.random.default_rng([seed, silo_id, 2]))
    return SiloData(xtr, ytr, xte, yte)


def pooled_test(num_silos: int, seed: int, n_test: int, image_size: int,
                channels: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The union of every silo's test split (what the pooled metrics are computed on)."""
    parts = [make_silo(i, seed, 0, n_test, image_size, channels) for i in range(num_silos)]
    return np.concatenate([p.x_test for p in parts]), np.concatenate([p.y_test for p in parts])
