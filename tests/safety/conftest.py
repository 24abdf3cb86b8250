"""Fixtures for the safety tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def good_pt2(tmp_path_factory) -> Path:
    """What torch.export.save writes for an ordinary model: conv, batchnorm, linear, layernorm, gelu,
    attention, with a dynamic batch dim (symbolic sizes in the graph)."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)
            self.proj = torch.nn.Linear(8, 16)
            self.ln = torch.nn.LayerNorm(16)
            self.attn = torch.nn.MultiheadAttention(16, 2, batch_first=True)
            self.head = torch.nn.Linear(16, 5)

        def forward(self, x):
            y = torch.relu(self.bn(self.conv(x)))
            y = y.flatten(2).transpose(1, 2)  # (B, HW, C)
            y = torch.nn.functional.gelu(self.ln(self.proj(y)))
            y, _ = self.attn(y, y, y, need_weights=False)
            y = torch.nn.functional.max_pool1d(y.transpose(1, 2), 2).mean(-1)
            return self.head(torch.cat([y, y], 1)[:, :16]).softmax(-1)

    torch.manual_seed(0)
    net = Net().eval()
    ep = torch.export.export(net, (torch.randn(2, 3, 6, 6),),
                             dynamic_shapes=({0: torch.export.Dim("batch", min=2, max=64)},))
    path = tmp_path_factory.mktemp("pt2") / "good.pt2"
    torch.export.save(ep, path)
    return path
