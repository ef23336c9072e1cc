"""Networks of the FedRL Grid-World experiments (paper Sec. 5 and the reference code).

- `QNet`: a party's basic Q-network: 3x3 convolution (32 filters, ReLU) over the H stacked
  observation windows, a 256-unit ReLU layer, one output per action (the reference's layout; the
  paper says "kernel of size 3x3 in CNN").
- `SharedMLP`: theta_g, the federated module over [Q_alpha | Q_beta]. The paper gives "two fully
  connected layers with the size of 32x4": we read 32 hidden units and 4 outputs per head. The
  paper indexes Q_f^alpha by alpha's actions and Q_f^beta by beta's (Eq. 4-7, distinct action
  sets A_alpha, A_beta), so in `paper` mode the MLP has one 4-output head per party over one shared
  hidden layer; in `joint-action` mode (the reference code) one head over the 16 joint actions.
- `FullQNet`: DQN-full / FCN-full, one network over both parties' observations (two conv
  branches, concatenated, then 256 units), as the reference's `build_nn_full`.
"""

from __future__ import annotations

import torch
from torch import nn

from models.rng import builds_holding_the_generator

N_ACTIONS = 4


class QNet(nn.Module):
    @builds_holding_the_generator
    def __init__(self, history: int, window: int, n_actions: int, hidden: int = 256):
        super().__init__()
        self.conv = nn.Conv2d(history, 32, 3, padding=1)
        self.fc = nn.Linear(32 * window * window, hidden)
        self.out = nn.Linear(hidden, n_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(obs.float()))
        return self.out(torch.relu(self.fc(x.flatten(1))))


class SharedMLP(nn.Module):
    @builds_holding_the_generator
    def __init__(self, n_in: int, heads: int, n_out: int, hidden: int = 32):
        super().__init__()
        self.hidden = nn.Linear(n_in, hidden)
        self.heads = nn.ModuleList(nn.Linear(hidden, n_out) for _ in range(heads))

    def forward(self, q_alpha: torch.Tensor, q_beta: torch.Tensor, head: int) -> torch.Tensor:
        h = torch.relu(self.hidden(torch.cat([q_alpha, q_beta], 1)))
        return self.heads[head](h)


class FullQNet(nn.Module):
    @builds_holding_the_generator
    def __init__(self, history: int, w_alpha: int, w_beta: int, n_actions: int, hidden: int = 256):
        super().__init__()
        self.conv_a = nn.Conv2d(history, 32, 3, padding=1)
        self.conv_b = nn.Conv2d(history, 32, 3, padding=1)
        self.fc = nn.Linear(32 * (w_alpha**2 + w_beta**2), hidden)
        self.out = nn.Linear(hidden, n_actions)

    def forward(self, obs_a: torch.Tensor, obs_b: torch.Tensor) -> torch.Tensor:
        xa = torch.relu(self.conv_a(obs_a.float())).flatten(1)
        xb = torch.relu(self.conv_b(obs_b.float())).flatten(1)
        return self.out(torch.relu(self.fc(torch.cat([xa, xb], 1))))
