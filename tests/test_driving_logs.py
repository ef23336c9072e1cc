import numpy as np
import pytest
from PIL import Image

from envs.driving_logs import (
    WHEEL_DEG_PER_UNIT,
    load_log,
    load_npz,
    load_silo,
    read_sullychen_log,
    read_udacity_log,
    validate_data_dir,
)
from envs.errors import DataError
from tests.conftest import SHARED_DATA

SULLY = SHARED_DATA / "driving" / "sullychen_dataset1_first100"


def test_real_udacity_log_loads_with_windows_paths(udacity_dir):
    rows = read_udacity_log(udacity_dir / "driving_log.csv")
    assert len(rows) == 613
    assert rows[0][0].startswith("C:\\")  # absolute Windows paths in the real file
    x, y = load_log(udacity_dir / "driving_log.csv", 32, rows=slice(0, 20))
    assert x.shape == (20, 1, 32, 32) and 0 <= x.min() and x.max() <= 1
    assert y.dtype == np.float32 and np.all(np.abs(y) <= 1)
    validate_data_dir(udacity_dir, 5)


def test_shared_log_is_cut_into_contiguous_silos(udacity_dir):
    silos = [load_silo(udacity_dir, i, 5, 24) for i in range(5)]
    sizes = [len(s.y_train) + len(s.y_test) for s in silos]
    assert sum(sizes) == 613
    all_y = np.array(
        [s for _, s in read_udacity_log(udacity_dir / "driving_log.csv")], dtype=np.float32
    )
    first = silos[0]
    assert np.array_equal(np.concatenate([first.y_train, first.y_test]), all_y[: sizes[0]])


def _write_log(tmp_path, lines, images=("a.jpg",)):
    (tmp_path / "IMG").mkdir(exist_ok=True)
    for name in images:
        Image.new("RGB", (40, 20), (120, 80, 40)).save(tmp_path / "IMG" / name)
    (tmp_path / "driving_log.csv").write_text("\n".join(lines) + "\n")
    return tmp_path / "driving_log.csv"


def test_bad_logs_name_file_line_and_field(tmp_path):
    path = _write_log(
        tmp_path,
        [
            "D:\\rec\\IMG\\a.jpg, l.jpg, r.jpg, 0.1, 0, 0, 3",
            "D:\\rec\\IMG\\a.jpg, l.jpg, r.jpg, left, 0, 0, 3",
        ],
    )
    with pytest.raises(DataError, match=r"driving_log.csv:2: field 'steering'"):
        read_udacity_log(path)
    path.write_text("a.jpg, 0.1, 0\n")
    with pytest.raises(DataError, match=r"driving_log.csv:1: expected 7 columns"):
        read_udacity_log(path)
    path.write_text("missing.jpg, l, r, 0.1, 0, 0, 3\n" * 4)
    with pytest.raises(DataError, match="missing.jpg"):
        validate_data_dir(tmp_path, 1)
    with pytest.raises(DataError, match="nope: no such folder"):
        validate_data_dir(tmp_path / "nope", 1)


def test_corrupt_image_is_reported(tmp_path):
    path = _write_log(tmp_path, ["a.jpg, l, r, 0.1, 0, 0, 3"] * 4)
    (tmp_path / "IMG" / "a.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(DataError, match="a.jpg: not a readable image"):
        load_log(path, 24)


def test_npz_with_images_or_file_names(tmp_path):
    rng = np.random.default_rng(0)
    for silo in (0, 1):
        d = tmp_path / str(silo)
        d.mkdir()
        np.savez(
            d / "train.npz",
            imgs=rng.integers(0, 255, (6, 30, 40)).astype(np.uint8),
            ground_truths=rng.uniform(-1, 1, 6),
        )
        Image.new("L", (40, 30), 77).save(d / "f0.png")
        np.savez(
            d / "test.npz",
            file_names=np.array(["/elsewhere/f0.png", "f0.png"]),
            ground_truths=np.array([0.1, -0.2]),
        )
    validate_data_dir(tmp_path, 2)
    silo = load_silo(tmp_path, 1, 2, 24)
    assert silo.x_train.shape == (6, 1, 24, 24) and silo.x_test.shape == (2, 1, 24, 24)
    assert np.allclose(silo.x_test, 77 / 255, atol=1e-6)
    np.savez(tmp_path / "bad.npz", pictures=np.zeros((2, 4, 4)), ground_truths=np.zeros(2))
    with pytest.raises(DataError, match="'imgs' or 'file_names'"):
        load_npz(tmp_path / "bad.npz", 24)
    for field in ("imgs", "ground_truths"):  # complex values were cut to their real part
        arrays = {"imgs": np.zeros((2, 4, 4)), "ground_truths": np.zeros(2)}
        arrays[field] = arrays[field].astype(np.complex64)
        np.savez(tmp_path / "complex.npz", **arrays)
        with pytest.raises(DataError, match=f"complex.npz: field '{field}' is not real-valued"):
            load_npz(tmp_path / "complex.npz", 24)
    (tmp_path / "broken.npz").write_bytes(b"PK\x03\x04 garbage")
    with pytest.raises(DataError, match="broken.npz: not a readable .npz"):
        load_npz(tmp_path / "broken.npz", 24)


def test_real_sullychen_dash_cam_loads_as_silos_with_wheel_degrees_normalised():
    if not (SULLY / "data.txt").is_file():
        pytest.skip(f"real data not found at {SULLY}")
    rows = read_sullychen_log(SULLY / "data.txt")
    assert len(rows) == 101 and rows[0] == ("0.jpg", 0.0)
    raw = {line.split()[0]: float(line.split()[1]) for line in open(SULLY / "data.txt")}
    name, value = max(rows, key=lambda r: abs(r[1]))
    assert value == pytest.approx(raw[name] / WHEEL_DEG_PER_UNIT) and abs(raw[name]) > 5
    validate_data_dir(SULLY, 2)
    silos = [load_silo(SULLY, i, 2, 24) for i in range(2)]
    assert sum(len(s.y_train) + len(s.y_test) for s in silos) == 101
    assert silos[0].x_train.shape[1:] == (1, 24, 24) and silos[0].x_train.max() <= 1
    log2018 = SHARED_DATA / "driving" / "sullychen_2018_07_01_steering_log" / "data.txt"
    if log2018.is_file():  # `N.jpg angle,timestamp` (no images shipped)
        labels = read_sullychen_log(log2018)
        assert len(labels) == 63825 and all(-1 <= v <= 1 for _, v in labels)


def test_bad_sullychen_line_names_file_line_and_field(tmp_path):
    (tmp_path / "data.txt").write_text("0.jpg 1.5\n1.jpg left\n")
    with pytest.raises(DataError, match=r"data.txt:2: field 'angle_deg'"):
        read_sullychen_log(tmp_path / "data.txt")
    (tmp_path / "data.txt").write_text("0.jpg\n")
    with pytest.raises(DataError, match=r"data.txt:1: expected 'image angle_deg'"):
        read_sullychen_log(tmp_path / "data.txt")


def test_a_data_path_that_is_not_there_says_so_and_what_shared_is(tmp_path):
    """Issue 66 item 3: a missing data folder said what it lacked ("no connectivity/ folder"
    for a FedVLN folder that does not exist), and no error said what ../shared is. Every
    reader of a real dataset says "no such" and where real data is kept; a file where a folder
    belongs is named as such."""
    from envs.gridworld import load_mat
    from envs.text2action import load_corpus
    from envs.vln_data import VLNData

    gone = tmp_path / "shared" / "data" / "nowhere"
    readers = {
        "folder": [
            lambda p: validate_data_dir(p, 2),
            lambda p: VLNData(p),
            lambda p: load_corpus(str(p), "win2k", 100, 10, 0, 10),
        ],
        "map file": [load_mat],
    }
    for what, calls in readers.items():
        for call in calls:
            with pytest.raises(DataError) as e:
                call(gone)
            assert f"{gone}: no such {what} (real datasets are read from ../shared/data, a " \
                "folder beside this checkout" in str(e.value)  # fmt: skip
    afile = tmp_path / "f"
    afile.write_text("x")
    for call in (lambda p: validate_data_dir(p, 2), lambda p: VLNData(p)):
        with pytest.raises(DataError, match=f"{afile}: not a folder$"):
            call(afile)
