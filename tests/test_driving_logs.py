import numpy as np
import pytest
from PIL import Image

from envs.driving_logs import (load_npz, load_silo, load_udacity_log, read_udacity_log,
                               validate_data_dir)
from envs.errors import DataError


def test_real_udacity_log_loads_with_windows_paths(udacity_dir):
    rows = read_udacity_log(udacity_dir / "driving_log.csv")
    assert len(rows) == 613
    assert rows[0][0].startswith("C:\\")  # absolute Windows paths in the real file
    x, y = load_udacity_log(udacity_dir / "driving_log.csv", 32, rows=slice(0, 20))
    assert x.shape == (20, 1, 32, 32) and 0 <= x.min() and x.max() <= 1
    assert y.dtype == np.float32 and np.all(np.abs(y) <= 1)
    validate_data_dir(udacity_dir, 5)


def test_shared_log_is_cut_into_contiguous_silos(udacity_dir):
    silos = [load_silo(udacity_dir, i, 5, 24) for i in range(5)]
    sizes = [len(s.y_train) + len(s.y_test) for s in silos]
    assert sum(sizes) == 613
    all_y = np.array([s for _, s in read_udacity_log(udacity_dir / "driving_log.csv")],
                     dtype=np.float32)
    first = silos[0]
    assert np.array_equal(np.concatenate([first.y_train, first.y_test]), all_y[:sizes[0]])


def _write_log(tmp_path, lines, images=("a.jpg",)):
    (tmp_path / "IMG").mkdir(exist_ok=True)
    for name in images:
        Image.new("RGB", (40, 20), (120, 80, 40)).save(tmp_path / "IMG" / name)
    (tmp_path / "driving_log.csv").write_text("\n".join(lines) + "\n")
    return tmp_path / "driving_log.csv"


def test_bad_logs_name_file_line_and_field(tmp_path):
    path = _write_log(tmp_path, ["D:\\rec\\IMG\\a.jpg, l.jpg, r.jpg, 0.1, 0, 0, 3",
                                 "D:\\rec\\IMG\\a.jpg, l.jpg, r.jpg, left, 0, 0, 3"])
    with pytest.raises(DataError, match=r"driving_log.csv:2: field 'steering'"):
        read_udacity_log(path)
    path.write_text("a.jpg, 0.1, 0\n")
    with pytest.raises(DataError, match=r"driving_log.csv:1: expected 7 columns"):
        read_udacity_log(path)
    path.write_text("missing.jpg, l, r, 0.1, 0, 0, 3\n" * 4)
    with pytest.raises(DataError, match="missing.jpg"):
        validate_data_dir(tmp_path, 1)
    with pytest.raises(DataError, match="not found"):
        validate_data_dir(tmp_path / "nope", 1)


def test_corrupt_image_is_reported(tmp_path):
    path = _write_log(tmp_path, ["a.jpg, l, r, 0.1, 0, 0, 3"] * 4)
    (tmp_path / "IMG" / "a.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(DataError, match="a.jpg: not a readable image"):
        load_udacity_log(path, 24)


def test_npz_with_images_or_file_names(tmp_path):
    rng = np.random.default_rng(0)
    for silo in (0, 1):
        d = tmp_path / str(silo)
        d.mkdir()
        np.savez(d / "train.npz", imgs=rng.integers(0, 255, (6, 30, 40)).astype(np.uint8),
                 ground_truths=rng.uniform(-1, 1, 6))
        Image.new("L", (40, 30), 77).save(d / "f0.png")
        np.savez(d / "test.npz", file_names=np.array(["/elsewhere/f0.png", "f0.png"]),
                 ground_truths=np.array([0.1, -0.2]))
    validate_data_dir(tmp_path, 2)
    silo = load_silo(tmp_path, 1, 2, 24)
    assert silo.x_train.shape == (6, 1, 24, 24) and silo.x_test.shape == (2, 1, 24, 24)
    assert np.allclose(silo.x_test, 77 / 255, atol=1e-6)
    np.savez(tmp_path / "bad.npz", pictures=np.zeros((2, 4, 4)), ground_truths=np.zeros(2))
    with pytest.raises(DataError, match="'imgs' or 'file_names'"):
        load_npz(tmp_path / "bad.npz", 24)
    (tmp_path / "broken.npz").write_bytes(b"PK\x03\x04 garbage")
    with pytest.raises(DataError, match="broken.npz: not a readable .npz"):
        load_npz(tmp_path / "broken.npz", 24)
