"""DroNet's ResNet-8 steering regressor, the backbone of FADNet/CDL.

Layout follows DroNet (Loquercio et al. 2018): a 5x5 stride-2 stem conv and a 3x3 stride-2
max-pool, three residual blocks of 32/64/128 channels (each BN-ReLU-conv(s2)-BN-ReLU-conv with a
1x1 stride-2 shortcut), then ReLU, dropout and one linear steering output. At a 1x200x200 input it
has 314,657 trainable parameters, the count the CDL paper reports. The input size is configurable
so that CPU runs can use small images; the head's width follows from it.
"""

from __future__ import annotations

import torch
from torch import nn

from models.rng import builds_holding_the_generator


def _conv_out(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def feature_map_size(image_size: int) -> int:
    """Side of the last feature map for a square input of `image_size` pixels."""
    s = _conv_out(image_size, 5, 2, 2)  # stem conv
    s = _conv_out(s, 3, 2, 0)  # max-pool
    for _ in range(3):  # three stride-2 residual blocks
        s = _conv_out(s, 3, 2, 1)
    if s < 1:
        raise ValueError(f"image size {image_size} is too small for ResNet-8 (need >= 5)")
    return s


class ResBlock(nn.Module):
    @builds_holding_the_generator
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1)
        self.shortcut = nn.Conv2d(cin, cout, 1, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv1(torch.relu(self.bn1(x)))
        y = self.conv2(torch.relu(self.bn2(y)))
        return y + self.shortcut(x)


class ResNet8(nn.Module):
    """Steering regressor: `features(x)` gives the flattened feature vector, `forward` the angle."""

    @builds_holding_the_generator
    def __init__(self, image_size: int = 200, channels: int = 1, dropout: float = 0.5):
        super().__init__()
        self.image_size = image_size
        self.stem = nn.Conv2d(channels, 32, 5, stride=2, padding=2)
        self.pool = nn.MaxPool2d(3, stride=2)
        self.blocks = nn.Sequential(ResBlock(32, 32), ResBlock(32, 64), ResBlock(64, 128))
        self.dropout = nn.Dropout(dropout)
        self.feature_dim = 128 * feature_map_size(image_size) ** 2
        self.head = nn.Linear(self.feature_dim, 1)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.pool(self.stem(x)))
        return torch.relu(torch.flatten(x, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.dropout(self.features(x))).squeeze(-1)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters (BatchNorm running statistics are buffers, not counted)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="ResNet-8's parameter count at input sizes")
    ap.add_argument("--sizes", type=int, nargs="+", default=[200, 64], help="input side (px)")
    for size in ap.parse_args(argv).sizes:
        print(f"ResNet-8 at 1x{size}x{size}: {count_parameters(ResNet8(size)):,} parameters")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
