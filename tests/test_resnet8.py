import pytest
import torch

from models.resnet8 import ResNet8, count_parameters, feature_map_size
from models.state import load_shared_state, shared_state


def test_parameter_count_matches_paper_at_200px():
    # The CDL paper reports 314,657 parameters for ResNet-8 on 1x200x200 images.
    assert count_parameters(ResNet8(200, 1)) == 314_657


def test_small_inputs_change_only_the_head():
    big, small = ResNet8(200), ResNet8(64)
    assert feature_map_size(200) == 7 and feature_map_size(64) == 2
    diff = count_parameters(big) - count_parameters(small)
    assert diff == 128 * (7 * 7 - 2 * 2)
    out = small(torch.randn(5, 1, 64, 64))
    assert out.shape == (5,)
    assert small.features(torch.randn(2, 1, 64, 64)).shape == (2, small.feature_dim)


def test_too_small_input_is_refused():
    with pytest.raises(ValueError, match="too small"):
        ResNet8(4)


def test_shared_state_round_trip_skips_bn_counters():
    a, b = ResNet8(32), ResNet8(32)
    state = shared_state(a)
    assert not any(k.endswith("num_batches_tracked") for k in state)
    load_shared_state(b, state)
    for k, v in state.items():
        assert torch.equal(b.state_dict()[k], v)
    state.pop(next(iter(state)))
    with pytest.raises(KeyError):
        load_shared_state(b, state)
