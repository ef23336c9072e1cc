import numpy as np
import pytest

from envs.driving_silos import make_silo, pooled_test, silo_profile
from envs.road_renderer import RoadStyle, render_road, steering_from_curvature


def test_silos_are_deterministic_and_differ():
    a = make_silo(2, seed=5, n_train=8, n_test=4, image_size=32)
    b = make_silo(2, seed=5, n_train=8, n_test=4, image_size=32)
    c = make_silo(3, seed=5, n_train=8, n_test=4, image_size=32)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.x_train, c.x_train)
    assert a.x_train.shape == (8, 1, 32, 32) and a.x_train.dtype == np.float32
    assert silo_profile(2, 5) != silo_profile(2, 6)


def test_steering_follows_curvature():
    c = np.array([-0.05, -0.01, 0.0, 0.01, 0.05])
    s = steering_from_curvature(c)
    assert np.all(np.diff(s) > 0) and s[2] == 0 and np.all(np.abs(s) <= 1)
    # the picture changes with the curve: a right-hand bend puts more road on the right far away
    rng = np.random.default_rng(0)
    style = RoadStyle(noise=0.0)
    left = render_road(-0.05, 64, style, rng)
    right = render_road(0.05, 64, style, rng)
    road = np.array(style.road)
    far = slice(28, 34)  # rows just below the horizon (0.4 * 64)

    def road_cols(img):
        mask = np.all(np.abs(img[far] - road) < 0.02, axis=-1)
        return np.nonzero(mask.any(axis=0))[0].mean()

    assert road_cols(right) > road_cols(left)


def test_silos_are_non_iid():
    means = [silo_profile(i, 0).curve_mean for i in range(10)]
    brightness = [silo_profile(i, 0).style.brightness for i in range(10)]
    assert np.std(means) > 0.01 and np.std(brightness) > 0.05
    labels = [make_silo(i, 0, 200, 1, 24).y_train.mean() for i in (0, 3)]
    assert abs(labels[0] - labels[1]) > 0.1


def test_pooled_test_is_union_of_silo_tests():
    x, y = pooled_test(3, seed=1, n_test=5, image_size=24)
    parts = [make_silo(i, 1, 7, 5, 24) for i in range(3)]
    assert np.array_equal(y, np.concatenate([p.y_test for p in parts]))
    assert x.shape == (15, 1, 24, 24)


def test_non_iid_knob_runs_from_iid_to_the_default_silos():
    # 1 is the default silos exactly; 0 gives every silo the same distribution
    assert silo_profile(4, 0, 1.0) == silo_profile(4, 0)
    assert silo_profile(1, 0, 0.0) == silo_profile(7, 0, 0.0)
    assert np.array_equal(
        make_silo(2, 0, 6, 2, 24, 1, 1.0).x_train, make_silo(2, 0, 6, 2, 24).x_train
    )
    spread = {}
    for k in (0.0, 0.5, 1.0):
        silos = [make_silo(i, 0, 150, 1, 24, 1, k) for i in range(8)]
        ys = np.concatenate([s.y_train for s in silos])
        spread[k] = np.var([s.y_train.mean() for s in silos]) / np.var(ys)  # between-silo share
    assert spread[0.0] < 0.05 < spread[0.5] < spread[1.0]
    half = silo_profile(3, 0, 0.5)
    mean = (silo_profile(3, 0, 0.0).curve_mean + silo_profile(3, 0).curve_mean) / 2
    assert np.isclose(half.curve_mean, mean)
    with pytest.raises(ValueError, match="non_iid"):
        silo_profile(0, 0, 1.5)
