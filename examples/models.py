"""Small reference models built from code (no downloads): the shapes real users bring.

Used by the examples, the tests and the benchmarks. Each `build_*` returns
`(module, example_inputs)` — the factory shape `tpuedge` MODEL specs expect.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "MLP",
    "SmallCNN",
    "DepthwiseSeparable",
    "TransformerBlock",
    "LSTMTagger",
    "build_mlp",
    "build_cnn",
    "build_depthwise",
    "build_transformer",
    "build_lstm",
]


class MLP(nn.Module):
    def __init__(self, d_in: int = 32, hidden: int = 64, d_out: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, d_out)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.head(x)


class SmallCNN(nn.Module):
    """conv-BatchNorm-ReLU x2, max pool, global average pool, linear."""

    def __init__(self, channels: int = 3, classes: int = 10, width: int = 16):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


class DepthwiseSeparable(nn.Module):
    """A MobileNet-style block: 3x3 depthwise + 1x1 pointwise, BatchNorm, ReLU6, then a head."""

    def __init__(self, channels: int = 16, out_channels: int = 32, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, stride=2, padding=1)
        self.dw = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)
        self.bn_dw = nn.BatchNorm2d(channels)
        self.pw = nn.Conv2d(channels, out_channels, 1, bias=False)
        self.bn_pw = nn.BatchNorm2d(out_channels)
        self.fc = nn.Linear(out_channels, classes)

    def forward(self, x):
        x = F.relu6(self.stem(x))
        x = F.relu6(self.bn_dw(self.dw(x)))
        x = F.relu6(self.bn_pw(self.pw(x)))
        return self.fc(x.mean(dim=(2, 3)))


class TransformerBlock(nn.Module):
    """Pre-norm encoder block: LayerNorm, multi-head SDPA, GELU MLP, residuals."""

    def __init__(self, d_model: int = 64, heads: int = 4, ff: int = 128):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, ff)
        self.ff2 = nn.Linear(ff, d_model)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class LSTMTagger(nn.Module):
    def __init__(self, d_in: int = 16, hidden: int = 32, classes: int = 5):
        super().__init__()
        self.lstm = nn.LSTM(d_in, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out)


def _seeded(model: nn.Module) -> nn.Module:
    return model.eval()


def build_mlp():
    torch.manual_seed(0)
    return _seeded(MLP()), (torch.randn(4, 32),)


def build_cnn():
    torch.manual_seed(0)
    return _seeded(SmallCNN()), (torch.randn(1, 3, 32, 32),)


def build_depthwise():
    torch.manual_seed(0)
    return _seeded(DepthwiseSeparable()), (torch.randn(1, 3, 32, 32),)


def build_transformer():
    torch.manual_seed(0)
    return _seeded(TransformerBlock()), (torch.randn(1, 16, 64),)


def build_lstm():
    torch.manual_seed(0)
    return _seeded(LSTMTagger()), (torch.randn(1, 12, 16),)
