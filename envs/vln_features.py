"""Per-view visual features of a viewpoint's 36-view panorama (no flwr).

No Matterport images or CNN features exist here, so the default features are *semantic view
features*, an honest substitute for ResNet features built from annotations the release has:
for each of the 36 views (3 elevation rows -30/0/+30 deg x 12 headings of 30 deg, absolute,
Matterport's order):

- `here`: one-hot room type of the viewpoint itself (`regions/vp2room_label.json`);
- `there`: one-hot room type of the nearest viewpoint seen in that view's direction
  (`visible` in the connectivity file, within the view's 30 deg heading sector, any
  elevation row mapped by its elevation): what a camera would show through a door;
- `objects`: the mean embedding of the objects visible in that view
  (`objects/viewpoint_objects.json`); a name embeds as the mean of fixed pseudo-random unit
  vectors of its words (seeded by the word), so "wooden table" shares a direction with "table".

The 128-d angle feature is Envdrop's: [sin h, cos h, sin e, cos e] repeated 32 times.

Users who have ResNet/CLIP features use `read_tsv` (the standard `ResNet-152-imagenet.tsv`
layout: scanId, viewpointId, image_w, image_h, vfov, features = base64 of 36 x D float32).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import math
import sys
from pathlib import Path

import numpy as np

from envs.errors import DataError
from envs.vln_data import VLNData

ROOM_CODES = "abcdefghijklmnoprstuvwxyzBCDSZ"  # Matterport region codes, '-' and unknown last
ROOM_DIM = len(ROOM_CODES) + 1
OBJECT_DIM = 64
VIEW_DIM = 2 * ROOM_DIM + OBJECT_DIM
ANGLE_DIM = 128
TSV_FIELDS = ["scanId", "viewpointId", "image_w", "image_h", "vfov", "features"]

VIEW_HEADING = np.array([(k % 12) * math.pi / 6 for k in range(36)])
VIEW_ELEVATION = np.array([(k // 12 - 1) * math.pi / 6 for k in range(36)])


def view_index(heading: float, elevation: float) -> int:
    """Matterport's absolute view index of a direction: 12 * elevation row + heading bucket."""
    row = 0 if elevation < math.radians(-15) else (2 if elevation > math.radians(15) else 1)
    return 12 * row + int(round(heading / (math.pi / 6))) % 12


def angle_feature(heading, elevation) -> np.ndarray:
    """Envdrop's 128-d angle feature of (arrays of) relative heading and elevation."""
    h, e = np.asarray(heading, dtype=np.float32), np.asarray(elevation, dtype=np.float32)
    base = np.stack([np.sin(h), np.cos(h), np.sin(e), np.cos(e)], axis=-1)
    return np.tile(base, ANGLE_DIM // 4).astype(np.float32)


def _word_vector(word: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(OBJECT_DIM)
    return v / np.linalg.norm(v)


_WORDS: dict[str, np.ndarray] = {}


def object_vector(name: str) -> np.ndarray:
    words = name.lower().split() or ["<none>"]
    for w in words:
        if w not in _WORDS:
            _WORDS[w] = _word_vector(w)
    return np.mean([_WORDS[w] for w in words], axis=0)


def _room_onehot(code: str | None) -> np.ndarray:
    v = np.zeros(ROOM_DIM, dtype=np.float32)
    k = ROOM_CODES.find(code) if code and len(code) == 1 else -1
    v[k if k >= 0 else ROOM_DIM - 1] = 1.0
    return v


def view_rooms(data: VLNData, scan_name: str) -> list[list[str | None]]:
    """Per included viewpoint (Scan order), the room code each of its 36 views shows: the
    nearest viewpoint visible in that view's direction, else the viewpoint's own (`there`)."""
    scan = data.scan(scan_name)
    rooms = data.rooms.get(scan_name, {})
    code = [rooms.get(v, {}).get("region_label") for v in scan.ids]
    visible = scan.visible if scan.visible is not None else np.zeros((len(scan.ids),) * 2, bool)
    out = []
    for i in range(len(scan.ids)):
        there = [None] * 36
        best = [np.inf] * 36
        for j in np.flatnonzero(visible[i]):
            k = view_index(*scan.heading_elevation(i, j))
            d = float(np.linalg.norm(scan.pos[j] - scan.pos[i]))
            if d < best[k]:
                best[k], there[k] = d, code[j]
        out.append([t if t else code[i] for t in there])
    return out


def semantic_features(data: VLNData, scan_name: str) -> np.ndarray:
    """(n_viewpoints, 36, VIEW_DIM) float32 for the scan's included viewpoints, in Scan order."""
    scan = data.scan(scan_name)
    rooms = data.rooms.get(scan_name, {})
    objects = data.objects.get(scan_name, {})
    out = np.zeros((len(scan.ids), 36, VIEW_DIM), dtype=np.float32)
    for i, (vp, there) in enumerate(zip(scan.ids, view_rooms(data, scan_name))):
        out[i, :, :ROOM_DIM] = _room_onehot(rooms.get(vp, {}).get("region_label"))
        for k in range(36):
            out[i, k, ROOM_DIM : 2 * ROOM_DIM] = _room_onehot(there[k])
        per_view: list[list[np.ndarray]] = [[] for _ in range(36)]
        for name, views in objects.get(vp, []):
            for k in views:
                if 0 <= int(k) < 36:
                    per_view[int(k)].append(object_vector(name))
        for k in range(36):
            if per_view[k]:
                out[i, k, 2 * ROOM_DIM :] = np.mean(per_view[k], axis=0)
    return out


def write_tsv(path: str | Path, rows) -> None:
    """rows: (scan, viewpoint, (36, D) float32) -> the standard feature TSV."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, delimiter="\t", fieldnames=TSV_FIELDS)
        for scan, vp, feat in rows:
            feat = np.ascontiguousarray(feat, dtype=np.float32)
            w.writerow(
                {
                    "scanId": scan,
                    "viewpointId": vp,
                    "image_w": 640,
                    "image_h": 480,
                    "vfov": 60,
                    "features": base64.b64encode(feat.tobytes()).decode(),
                }
            )


def read_tsv(path: str | Path) -> dict[tuple[str, str], np.ndarray]:
    """{(scan, viewpoint): (36, D) float32} from a standard feature TSV."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: feature file not found")
    csv.field_size_limit(sys.maxsize)
    out, dim = {}, None
    with open(path, newline="", encoding="utf-8", errors="strict") as f:
        rows = csv.DictReader(f, delimiter="\t", fieldnames=TSV_FIELDS)
        for n, row in enumerate(_rows_or_error(rows, path), 1):
            try:
                raw = np.frombuffer(
                    base64.b64decode(row["features"], validate=True), dtype=np.float32
                )
            except (TypeError, ValueError) as e:
                raise DataError(
                    f"{path}: line {n}: field 'features' is not base64 float32 ({e})"
                ) from None
            if raw.size == 0 or raw.size % 36:
                raise DataError(
                    f"{path}: line {n}: field 'features' has {raw.size} floats, not 36 x D"
                )
            feat = raw.reshape(36, -1)
            if dim is not None and feat.shape[1] != dim:
                raise DataError(
                    f"{path}: line {n}: feature size {feat.shape[1]} differs from the file's {dim}"
                )
            dim = feat.shape[1]
            if not np.isfinite(feat).all():
                raise DataError(f"{path}: line {n}: field 'features' has non-finite values")
            out[(row["scanId"], row["viewpointId"])] = feat.copy()
    if not out:
        raise DataError(f"{path}: no feature rows")
    return out


def _rows_or_error(rows, path: Path):
    """The TSV's rows; text that is not UTF-8 is a DataError naming the file."""
    try:
        yield from rows
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not a UTF-8 feature TSV ({e.reason} at byte {e.start})") from None
