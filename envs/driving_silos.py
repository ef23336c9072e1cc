"""Non-IID driving silos for the embedded default: each silo has its own camera style and its own
distribution of road curves, both drawn deterministically from (silo id, seed).

Covariate shift: brightness, sky/verge/road/lane colours, fog, rain, sensor noise, camera
mounting offset and pitch (horizon). Label shift: each silo's curvature is drawn from
N(mu_i, sd_i) with a silo-specific mean (some silos drive mostly left-hand bends, some mostly
right-hand, some mostly straight) and spread. The steering label is the bicycle-model angle of
the curve plus Gaussian sensor noise of a silo-specific level.

`non_iid` in [0, 1] sets how far each silo is from a shared profile (drawn from the seed alone):
every numeric field of the profile, style and label distribution alike, is
(1 - non_iid) * shared + non_iid * own. 1 (the default) is the silos above, unchanged; 0 makes
every silo draw from the same distribution (IID; the samples still differ). One knob moves the
label skew and the style shift together, so the sweep from IID to the default is one line.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

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


def _blend(shared, own, k: float):
    """(1 - k) * shared + k * own, field by field (tuples element-wise); exact `own` at k = 1."""
    if isinstance(own, tuple):
        return tuple(_blend(a, b, k) for a, b in zip(shared, own))
    if isinstance(own, RoadStyle):
        return replace(
            own,
            **{
                f.name: _blend(getattr(shared, f.name), getattr(own, f.name), k)
                for f in fields(RoadStyle)
            },
        )
    return (1.0 - k) * shared + k * own


def silo_profile(silo_id: int, seed: int, non_iid: float = 1.0) -> SiloProfile:
    """The style and curve distribution of one silo (same ids, seed and non_iid -> same silo)."""
    if not 0.0 <= non_iid <= 1.0:
        raise ValueError(f"non_iid must be in [0, 1], got {non_iid}")
    own = _drawn_profile([seed, silo_id, 7919])
    if non_iid == 1.0:
        return own
    shared = _drawn_profile([seed, 104729])
    return SiloProfile(
        style=_blend(shared.style, own.style, non_iid),
        **{
            f: _blend(getattr(shared, f), getattr(own, f), non_iid)
            for f in ("curve_mean", "curve_sd", "label_noise")
        },
    )


def _drawn_profile(rng_seed: list[int]) -> SiloProfile:
    r = np.random.default_rng(rng_seed)

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


def render_samples(
    profile: SiloProfile, n: int, image_size: int, channels: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """n images of this silo and their noisy steering labels."""
    c = np.clip(rng.normal(profile.curve_mean, profile.curve_sd, n), -MAX_CURVATURE, MAX_CURVATURE)
    if n == 0:
        return np.zeros((0, channels, image_size, image_size), np.float32), np.zeros(0, np.float32)
    x = np.stack(
        [
            to_channels(
                render_road(ci, image_size, profile.style, rng, phase=rng.uniform(0, 6)), channels
            )
            for ci in c
        ]
    )
    y = steering_from_curvature(c) + rng.normal(0.0, profile.label_noise, n)
    return x.astype(np.float32), y.astype(np.float32)


def make_silo(
    silo_id: int,
    seed: int,
    n_train: int,
    n_test: int,
    image_size: int,
    channels: int = 1,
    non_iid: float = 1.0,
) -> SiloData:
    """Deterministic train/test split of one embedded silo."""
    profile = silo_profile(silo_id, seed, non_iid)
    xtr, ytr = render_samples(
        profile, n_train, image_size, channels, np.random.default_rng([seed, silo_id, 1])
    )
    xte, yte = render_samples(
        profile, n_test, image_size, channels, np.random.default_rng([seed, silo_id, 2])
    )
    return SiloData(xtr, ytr, xte, yte)


def pooled_test(
    num_silos: int, seed: int, n_test: int, image_size: int, channels: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """The union of every silo's test split (what the pooled metrics are computed on)."""
    parts = [make_silo(i, seed, 0, n_test, image_size, channels) for i in range(num_silos)]
    return np.concatenate([p.x_test for p in parts]), np.concatenate([p.y_test for p in parts])
