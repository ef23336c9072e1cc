"""Procedural forward-camera road images whose steering angle follows from the road's curvature.

The car drives on the centre of a road whose centreline, in the car's frame, is the arc
x(z) = c*z^2/2 (curvature c in 1/m, z metres ahead). A pinhole camera at height `cam_h` looks
down the road; every pixel below the horizon is back-projected to the ground plane and coloured
as sky, verge, road, edge line or dashed centre line. The true steering angle is the bicycle
model's answer for that curvature, atan(wheelbase*c), normalised by the maximum steering angle
to [-1, 1] as in the Udacity logs; sensor noise is added by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WHEELBASE_M = 2.7
MAX_STEER_RAD = np.deg2rad(25.0)


@dataclass(frozen=True)
class RoadStyle:
    """How one silo's camera and roads look (its covariate shift)."""

    brightness: float = 1.0  # global gain
    sky: tuple[float, float, float] = (0.55, 0.70, 0.90)
    verge: tuple[float, float, float] = (0.25, 0.45, 0.20)
    road: tuple[float, float, float] = (0.35, 0.35, 0.37)
    lane: tuple[float, float, float] = (0.95, 0.95, 0.90)
    noise: float = 0.02  # per-pixel sensor noise (std)
    fog: float = 0.0  # 0..1, blends far pixels to grey
    rain: float = 0.0  # density of rain streaks
    cam_offset_m: float = 0.0  # lateral camera mounting offset
    horizon: float = 0.4  # horizon row as a fraction of the image height
    road_half_width_m: float = 3.5


def steering_from_curvature(curvature: np.ndarray | float) -> np.ndarray:
    """Normalised steering in [-1, 1] (positive = right) for a road curvature in 1/m."""
    return np.clip(np.arctan(WHEELBASE_M * np.asarray(curvature)) / MAX_STEER_RAD, -1.0, 1.0)


def render_road(
    curvature: float, size: int, style: RoadStyle, rng: np.random.Generator, phase: float = 0.0
) -> np.ndarray:
    """One RGB image (size x size x 3, float32 in [0, 1]) of a road with the given curvature.

    `phase` shifts the dashes along the road so consecutive frames differ.
    """
    h = w = size
    f = 0.9 * w  # focal length in pixels
    cam_h = 1.4
    horizon = style.horizon * h
    v, u = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.empty((h, w, 3))
    img[:] = style.sky
    below = v > horizon + 0.5
    z = np.where(below, f * cam_h / np.maximum(v - horizon, 1e-6), 1e4)  # ground depth (1e4 = sky)
    x = (u - w / 2) * z / f + style.cam_offset_m  # lateral ground position
    xc = 0.5 * curvature * z**2  # road centreline at that depth
    d = np.abs(x - xc)
    ground = below & (z < 150)
    half = style.road_half_width_m
    road = ground & (d < half)
    edge = road & (d > half - 0.18)
    dash = road & (d < 0.12) & (np.mod(z + phase, 6.0) < 3.0)
    img[ground & ~road] = style.verge
    img[road] = style.road
    img[edge | dash] = style.lane
    # texture: darker far verge stripes make depth visible
    img[ground & ~road] *= (0.85 + 0.15 * (np.mod(z[ground & ~road], 4.0) < 2.0))[:, None]
    if style.fog > 0:
        a = np.clip(style.fog * (1 - np.exp(-np.minimum(z, 200.0) / 40.0)), 0, 1)[..., None]
        img = img * (1 - a) + 0.7 * a
    img = img * style.brightness
    if style.rain > 0:
        n = int(style.rain * w)
        cols = rng.integers(0, w, n)
        rows = rng.integers(0, h, n)
        length = max(2, h // 12)
        for r, c in zip(rows, cols):
            img[r : r + length, c] = 0.8
    img = img + rng.normal(0.0, style.noise, img.shape)
    return np.clip(img, 0.0, 1.0).astype(np.float32)


def to_channels(img: np.ndarray, channels: int) -> np.ndarray:
    """HxWx3 float image -> CxHxW (1 = luminance, as DroNet's grayscale input; 3 = RGB)."""
    if channels == 1:
        return (img @ np.array([0.299, 0.587, 0.114], dtype=np.float32))[None]
    if channels == 3:
        return np.transpose(img, (2, 0, 1))
    raise ValueError(f"channels must be 1 or 3, got {channels}")
