"""A house's own look, appended to the semantic view features (no flwr; issue 41, item 5).

The semantic view features (`envs.vln_features`) are house-agnostic: a kitchen is the same
one-hot in every house and an object the same vector, so an unseen house looks like a seen one.
On the embedded houses Envdrop's val_seen and val_unseen SR are level (docs/fedvln.md), and
pre-exploration, which adapts a follower to an unseen house, has no appearance gap to close.
Real houses differ: the ResNet features of two kitchens differ, a follower trained on the seen
houses learns their looks, and it meets looks it never saw in an unseen house (the paper's
seen/unseen gap, and what its pre-exploration adapts to).

With `strength` s > 0 every view k of viewpoint v in house h gets APPEARANCE_DIM more numbers,

    a(h, v, k) = s * (kind(room(v, k)) + style(h) + detail(h, v, k)) / sqrt(3)

- `kind(r)`: one standard-normal vector per room type, the same in every house: what a kitchen
  looks like (two kitchens look alike, cosine 1/3 in expectation), so the seen houses teach a
  look that transfers. `room(v, k)` is the room the view shows (the semantic features' `there`:
  the nearest viewpoint visible in that direction, else v's own room);
- `style(h)`: one per house, in every view of it (its paint, its light): houses differ;
- `detail(h, v, k)`: one per view of each viewpoint (what that camera sees there), so, as with
  image features, a follower can tell the places of a seen house apart and remember them, but
  remembering them is not the only way to fit: the room-type part is shared.

Issue 64 item 5 added `kind`: with style and detail alone (issue 41's first version) houses
were separable by style, places memorisable, and nothing visual was shared between houses.
Choices the paper cannot make for us (it uses ResNet-152 features of real images), written
here: Gaussian, 32 dimensions (a quarter of the 126 semantic ones), the three parts of equal
weight, and one draw per room type, house and view: generators seeded by the SHA-256 of the
room code, the scan name and the viewpoint. Appearance is a property of the house, the same in
every run, seed, party and process, never of the run's seed (two embedded house sets generated
from different seeds name their houses alike, `house000`, ..., and share those looks; nothing
mixes two such sets in one run). With s = 0 nothing is appended, so the features, model sizes
and checkpoints are those without it.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

APPEARANCE_DIM = 32
# which formula makes the look: 1 = issue 41's style + detail, 2 = issue 64's room type + style +
# detail. A study's cache keys carry it wherever appearance is on, so a run made on another
# look is trained again, never reused (experiments/simulate, experiments/fedvln/centralized)
LOOK_VERSION = 2


def _rng(*names: str) -> np.random.Generator:
    digest = hashlib.sha256("\x1f".join(("appearance", *names)).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def appearance(scan: str, viewpoints: list[str], rooms: list[list], strength: float) -> np.ndarray:
    """(len(viewpoints), 36, APPEARANCE_DIM) float32: house `scan`'s look at its viewpoints,
    `rooms[i][k]` the room code view k of viewpoint i shows (module docstring)."""
    if not (math.isfinite(strength) and strength > 0):
        raise ValueError(f"appearance strength must be a finite number > 0, not {strength}")
    style = _rng(scan).standard_normal(APPEARANCE_DIM)
    kinds: dict = {}
    look = np.zeros((len(viewpoints), 36, APPEARANCE_DIM))
    for i, v in enumerate(viewpoints):
        for k, r in enumerate(rooms[i]):
            if r not in kinds:
                kinds[r] = _rng("room type", str(r or "-")).standard_normal(APPEARANCE_DIM)
            look[i, k] = kinds[r]
        look[i] += _rng(scan, v).standard_normal((36, APPEARANCE_DIM))
    return (strength * (style + look) / math.sqrt(3)).astype(np.float32)
