"""Loaders for real driving data in our users' layouts.

* Udacity simulator `driving_log.csv`: no header, columns center, left, right, steering,
  throttle, brake, speed. Image paths are often absolute paths from the recording machine
  (Windows ones included), so an image is found by its basename next to the CSV or in `IMG/`.
  Only the centre camera is used, as in DroNet/FADNet.
* The CDL/FADNet reference's per-silo `.npz`: `ground_truths` (N steering values) with either
  `imgs` (N x H x W [x C] images) or `file_names` (N image paths, resolved like the CSV's).
* SullyChen's dash-cam `data.txt`: one line `N.jpg angle_deg` (the 2018 log adds
  `,timestamp`), the steering-wheel angle in degrees (`read_sullychen_log` says how it becomes
  Udacity's [-1, 1]).

`load_silo` maps a silo id onto a data folder (see its docstring for the layouts it accepts).
Every failure raises DataError naming the file, the line or the field.
"""

from __future__ import annotations

import csv
from pathlib import Path, PureWindowsPath

import numpy as np
from PIL import Image, UnidentifiedImageError

from envs.driving_silos import SiloData
from envs.errors import DataError, missing

UDACITY_COLUMNS = ("center", "left", "right", "steering", "throttle", "brake", "speed")
# |label| above these is not a steering value: Udacity's logs are normalised to [-1, 1]; a car's
# steering wheel turns at most ~1.5 turns each way (SullyChen logs wheel degrees); the CDL
# reference's npz labels do not state a unit, so they get a generous bound.
MAX_STEERING = {"steering": 1.0, "angle_deg": 720.0, "ground_truths": 10.0}
MIN_IMAGE_SIDE = 8  # smaller images carry no road (a 1x1 "image" is a broken export)
# A camera frame is 320x160 (Udacity) to a few megapixels; a small PNG can declare 50,000 x
# 50,000 pixels and decode to gigabytes. Refused from its header, before decoding.
MAX_IMAGE_PIXELS = 4096 * 4096


def _lines(path: Path):
    """The file's text lines; a file that is not UTF-8 text is a DataError naming it."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            yield from f
    except UnicodeDecodeError as e:
        raise DataError(
            f"{path}: not UTF-8 text (byte {e.start}: {e.reason}); save the log as UTF-8"
        ) from None


def _label(path: Path, lineno: int, field: str, raw: str) -> float:
    """A finite steering label with |label| <= MAX_STEERING[field], or DataError."""
    try:
        v = float(raw)
    except ValueError:
        raise DataError(
            f"{path}:{lineno}: field {field!r} is not a number: {raw.strip()[:40]!r}"
        ) from None
    if not np.isfinite(v):
        raise DataError(f"{path}:{lineno}: field {field!r} is not finite")
    if abs(v) > MAX_STEERING[field]:
        raise DataError(
            f"{path}:{lineno}: field {field!r} = {v:g} is not a steering value "
            f"(|value| <= {MAX_STEERING[field]:g})"
        )
    return v


def _resolve_image(raw: str, base: Path) -> Path:
    name = PureWindowsPath(raw.strip()).name if "\\" in raw else Path(raw.strip()).name
    for candidate in (Path(raw.strip()), base / name, base / "IMG" / name):
        if candidate.is_file():
            return candidate
    raise DataError(
        f"{base}: image '{raw.strip()}' not found (looked for {name} next to the log and in IMG/)"
    )


def load_image(path: Path, image_size: int, channels: int) -> np.ndarray:
    """Read, resize to image_size x image_size and scale to [0, 1]; returns C x H x W float32."""
    try:
        with Image.open(path) as im:
            if im.size[0] * im.size[1] > MAX_IMAGE_PIXELS:
                raise DataError(
                    f"{path}: image declares {im.size[0]}x{im.size[1]} pixels, over the "
                    f"{MAX_IMAGE_PIXELS} a camera frame may have"
                )
            if min(im.size) < MIN_IMAGE_SIDE:
                raise DataError(
                    f"{path}: image is {im.size[0]}x{im.size[1]}, smaller than "
                    f"{MIN_IMAGE_SIDE}x{MIN_IMAGE_SIDE}"
                )
            im = im.convert("L" if channels == 1 else "RGB").resize((image_size, image_size))
            a = np.asarray(im, dtype=np.float32) / 255.0
    except DataError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as e:
        raise DataError(f"{path}: not a readable image ({e})") from None
    return a[None] if channels == 1 else np.transpose(a, (2, 0, 1))


def read_udacity_log(csv_path: Path) -> list[tuple[str, float]]:
    """(centre image path as written, steering) per row, validated."""
    csv_path = Path(csv_path)
    if not csv_path.is_file():
        raise DataError(f"{csv_path}: driving log not found")
    rows = []
    try:
        for lineno, row in enumerate(csv.reader(_lines(csv_path)), start=1):
            if not row or all(not c.strip() for c in row):
                continue
            if lineno == 1 and row[0].strip().lower() == "center":
                continue  # a header line, as in Udacity's sample data
            if len(row) != len(UDACITY_COLUMNS):
                raise DataError(
                    f"{csv_path}:{lineno}: expected {len(UDACITY_COLUMNS)} columns "
                    f"({', '.join(UDACITY_COLUMNS)}), got {len(row)}"
                )
            if not row[0].strip():
                raise DataError(f"{csv_path}:{lineno}: field 'center' is empty")
            rows.append((row[0], _label(csv_path, lineno, "steering", row[3])))
    except csv.Error as e:  # an oversized field, a NUL byte, ...
        raise DataError(f"{csv_path}: not a driving-log CSV ({e})") from None
    if not rows:
        raise DataError(f"{csv_path}: no rows")
    return rows


# SullyChen: steering-wheel degrees -> Udacity's normalised steering. Udacity's [-1, 1] spans
# +-25 degrees of road-wheel angle; a passenger car's steering ratio is ~15:1 (assumed: the
# dataset does not state its car's), so one unit is 15 * 25 = 375 wheel degrees.
WHEEL_DEG_PER_UNIT = 15.0 * 25.0
LOG_NAMES = ("driving_log.csv", "data.txt")  # Udacity, SullyChen


def read_sullychen_log(path: Path) -> list[tuple[str, float]]:
    """(image name, steering in [-1, 1]) per line of a SullyChen `data.txt`: the wheel angle
    divided by WHEEL_DEG_PER_UNIT and clipped to [-1, 1]."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: steering log not found")
    rows = []
    for lineno, line in enumerate(_lines(path), start=1):
        if not line.strip():
            continue
        parts = line.split(maxsplit=1)  # the 2018 log's timestamp has a space
        if len(parts) != 2:
            raise DataError(
                f"{path}:{lineno}: expected 'image angle_deg', got {line.strip()[:60]!r}"
            )
        deg = _label(path, lineno, "angle_deg", parts[1].split(",")[0])
        rows.append((parts[0], float(np.clip(deg / WHEEL_DEG_PER_UNIT, -1.0, 1.0))))
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


def read_log(path: Path) -> list[tuple[str, float]]:
    """A Udacity `driving_log.csv` or a SullyChen `data.txt`, by file name."""
    return read_sullychen_log(path) if Path(path).name == "data.txt" else read_udacity_log(path)


def _find_log(folder: Path) -> Path | None:
    return next((folder / n for n in LOG_NAMES if (folder / n).is_file()), None)


def load_log(
    log_path: Path, image_size: int, channels: int = 1, rows: slice = slice(None)
) -> tuple[np.ndarray, np.ndarray]:
    """Centre-camera images and steering of (a slice of) a driving log (either layout)."""
    csv_path = Path(log_path)
    entries = read_log(csv_path)[rows]
    x = (
        np.stack(
            [
                load_image(_resolve_image(p, csv_path.parent), image_size, channels)
                for p, _ in entries
            ]
        )
        if entries
        else np.zeros((0, channels, image_size, image_size), np.float32)
    )
    y = np.array([s for _, s in entries], dtype=np.float32)
    return x, y


def load_npz(path: Path, image_size: int, channels: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """A CDL-reference silo file: `ground_truths` plus `imgs` or `file_names`."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        data = np.load(path, allow_pickle=False)
        keys = set(data.files)
        if "ground_truths" not in keys:
            raise DataError(f"{path}: missing field 'ground_truths' (has: {sorted(keys)})")
        fields = {k: data[k] for k in keys & {"ground_truths", "imgs", "file_names"}}
    except DataError:
        raise
    except Exception as e:  # zip/format errors, object arrays (pickles), ... come in many types
        raise DataError(f"{path}: not a readable .npz file ({e})") from None
    for name, arr in fields.items():  # complex values would be cut to their real part
        if name != "file_names" and np.asarray(arr).dtype.kind not in "biuf":
            raise DataError(
                f"{path}: field {name!r} is not real-valued (dtype {np.asarray(arr).dtype})"
            )
    try:
        y = np.asarray(fields["ground_truths"], dtype=np.float32).reshape(-1)
    except (TypeError, ValueError):
        raise DataError(
            f"{path}: field 'ground_truths' is not numeric (dtype {fields['ground_truths'].dtype})"
        ) from None
    if len(y) == 0:
        raise DataError(f"{path}: field 'ground_truths' is empty")
    if not np.all(np.isfinite(y)):
        raise DataError(f"{path}: field 'ground_truths' has non-finite values")
    if np.abs(y).max() > MAX_STEERING["ground_truths"]:
        raise DataError(
            f"{path}: field 'ground_truths' has {np.abs(y).max():g}, not a steering "
            f"value (|value| <= {MAX_STEERING['ground_truths']:g})"
        )
    if "imgs" in fields:
        try:
            imgs = np.asarray(fields["imgs"], dtype=np.float32)
        except (TypeError, ValueError):
            raise DataError(
                f"{path}: field 'imgs' is not numeric (dtype {fields['imgs'].dtype})"
            ) from None
        if imgs.ndim == 3:
            imgs = imgs[..., None]
        if imgs.ndim != 4 or len(imgs) != len(y) or imgs.shape[-1] not in (1, 3):
            raise DataError(
                f"{path}: field 'imgs' has shape {imgs.shape}, expected N x H x W "
                f"[x 1|3] with N = {len(y)}"
            )
        if min(imgs.shape[1:3]) < MIN_IMAGE_SIDE:
            raise DataError(
                f"{path}: field 'imgs' holds {imgs.shape[1]}x{imgs.shape[2]} images, "
                f"smaller than {MIN_IMAGE_SIDE}x{MIN_IMAGE_SIDE}"
            )
        if not np.all(np.isfinite(imgs)):
            raise DataError(f"{path}: field 'imgs' has non-finite values")
        if imgs.max(initial=0) > 1.0:
            imgs = imgs / 255.0
        x = np.stack([_resize(im, image_size, channels) for im in imgs])
    elif "file_names" in fields:
        names = [str(n) for n in np.asarray(fields["file_names"]).reshape(-1)]
        if len(names) != len(y):
            raise DataError(
                f"{path}: 'file_names' has {len(names)} entries, 'ground_truths' {len(y)}"
            )
        x = np.stack(
            [load_image(_resolve_image(n, path.parent), image_size, channels) for n in names]
        )
    else:
        raise DataError(f"{path}: needs field 'imgs' or 'file_names' (has: {sorted(keys)})")
    return x.astype(np.float32), y


def _resize(im: np.ndarray, size: int, channels: int) -> np.ndarray:
    """H x W x C float image -> C x size x size."""
    mode_in = im[..., 0] if im.shape[-1] == 1 else im
    pil = Image.fromarray(np.uint8(np.clip(mode_in, 0, 1) * 255))
    pil = pil.convert("L" if channels == 1 else "RGB").resize((size, size))
    a = np.asarray(pil, dtype=np.float32) / 255.0
    return a[None] if channels == 1 else np.transpose(a, (2, 0, 1))


def load_silo(
    data_dir: Path,
    silo_id: int,
    num_silos: int,
    image_size: int,
    channels: int = 1,
    test_fraction: float = 0.2,
) -> SiloData:
    """The real data of one silo. Accepted layouts of `data_dir`:

    * `driving_log.csv` (one recording shared by all silos): its rows are cut into `num_silos`
      contiguous chunks in recording order (contiguous stretches of road are non-IID, as the
      reference splits sequences between silos); each chunk's last `test_fraction` is its test set.
    * `<silo_id>/train.npz` and `<silo_id>/test.npz` (the reference's per-silo files).
    * `<silo_id>/driving_log.csv` (one recording per silo), split in time like the first case.
    Wherever a `driving_log.csv` is accepted, a SullyChen `data.txt` is too.
    A deployed SuperNode can instead be given its own folder by node config (`data-dir`), in
    which case it is the only silo of that folder: call with silo_id=0, num_silos=1.
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise missing(data_dir, "folder")
    per_silo = data_dir / str(silo_id)
    if (per_silo / "train.npz").is_file():
        xtr, ytr = load_npz(per_silo / "train.npz", image_size, channels)
        xte, yte = load_npz(per_silo / "test.npz", image_size, channels)
        return SiloData(xtr, ytr, xte, yte)
    if _find_log(per_silo):
        return _time_split(_find_log(per_silo), 0, 1, image_size, channels, test_fraction)
    if _find_log(data_dir):
        return _time_split(
            _find_log(data_dir), silo_id, num_silos, image_size, channels, test_fraction
        )
    raise DataError(
        f"{data_dir}: no driving_log.csv / data.txt, {silo_id}/train.npz or "
        f"{silo_id}/driving_log.csv for silo {silo_id}"
    )


def _time_split(
    csv_path: Path,
    silo_id: int,
    num_silos: int,
    image_size: int,
    channels: int,
    test_fraction: float,
) -> SiloData:
    n = len(read_log(csv_path))
    bounds = np.linspace(0, n, num_silos + 1).astype(int)
    lo, hi = bounds[silo_id], bounds[silo_id + 1]
    if hi - lo < 2:
        raise DataError(f"{csv_path}: {n} rows are too few for {num_silos} silos")
    cut = hi - max(1, int(round((hi - lo) * test_fraction)))
    xtr, ytr = load_log(csv_path, image_size, channels, slice(lo, cut))
    xte, yte = load_log(csv_path, image_size, channels, slice(cut, hi))
    return SiloData(xtr, ytr, xte, yte)


def validate_data_dir(data_dir: Path, num_silos: int) -> None:
    """Check that every silo finds readable data: every label in range and every image decodable
    and at least MIN_IMAGE_SIDE wide (DataError naming the file if not), before a run starts."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise missing(data_dir, "folder")
    for silo in range(num_silos):
        per_silo = data_dir / str(silo)
        if (per_silo / "train.npz").is_file():
            for split in ("train", "test"):
                _check_npz(per_silo / f"{split}.npz")
        elif _find_log(per_silo):
            _check_log(_find_log(per_silo))
        elif _find_log(data_dir):
            n = _check_log(_find_log(data_dir))
            if n < 2 * num_silos:
                raise DataError(
                    f"{_find_log(data_dir)}: {n} rows are too few for {num_silos} silos"
                )
            return
        else:
            raise DataError(
                f"{data_dir}: no driving_log.csv / data.txt, {silo}/train.npz or "
                f"{silo}/driving_log.csv for silo {silo}"
            )


def _check_log(csv_path: Path) -> int:
    rows = read_log(csv_path)
    for raw, _ in rows:
        load_image(_resolve_image(raw, csv_path.parent), MIN_IMAGE_SIDE, 1)
    return len(rows)


def _check_npz(path: Path) -> None:
    load_npz(path, MIN_IMAGE_SIDE, 1)
