"""Layer patterns users write, each checked and built for every target: where a layer fails.

    python bench/layer_patterns.py                          # all 36 patterns, android int8 + mcu + cloud-tpu (~12 min)
    python bench/layer_patterns.py stft leaky_relu --targets mcu

Each pattern is a small random-init module around one construct users bring (a transformer
encoder with a padding mask, a bidirectional GRU, a CRNN's bidirectional LSTM, padding="same", a transposed-convolution
upsampler, LeakyReLU, torch.stft, one_hot, sort/top-k, ...). For each target: `check`, then a
build (android: the default int8 search; mcu: esp32s3; both on 16 random calibration samples,
written even below their accuracy budget: random weights, so the cosine says whether it runs,
not what a trained model scores), then the artifact run against the float IR on a new sample.
A check that passes and a build that fails is the finding; a check's refusal names the ops.
Writes bench/results/layer_patterns.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the checkout's tpuedge wins over an installed copy

TARGETS = ("android", "mcu", "cloud-tpu")


def _patterns() -> dict:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def module(forward, **layers):
        """A Module with `layers` as children whose forward is forward(self, *inputs)."""
        m = nn.Module()
        for name, layer in layers.items():
            setattr(m, name, layer)
        m.forward = forward.__get__(m)
        return m

    image = lambda side=16: (torch.randn(1, 3, side, side),)  # noqa: E731
    seq = lambda: (torch.randn(1, 12, 32),)  # noqa: E731
    ids = lambda: (torch.randint(0, 100, (1, 12)),)  # noqa: E731
    encoder = lambda **kw: nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, **kw), 2)  # noqa: E731
    window = torch.hann_window(64)
    return {
        "transformer_encoder": (
            lambda: module(
                lambda s, i: s.head(s.enc(s.emb(i)).mean(1)),
                emb=nn.Embedding(100, 32),
                enc=encoder(),
                head=nn.Linear(32, 5),
            ),
            ids,
        ),
        "transformer_norm_first_gelu": (
            lambda: module(lambda s, x: s.enc(x), enc=encoder(norm_first=True, activation="gelu")),
            seq,
        ),
        "transformer_padding_mask": (
            lambda: module(lambda s, x, pad: s.enc(x, src_key_padding_mask=pad), enc=encoder()),
            lambda: (torch.randn(1, 12, 32), torch.tensor([[False] * 9 + [True] * 3])),
        ),
        "causal_sdpa": (
            lambda: module(
                lambda s, x: (
                    F.scaled_dot_product_attention(
                        *(t.view(1, 12, 4, 8).transpose(1, 2) for t in s.qkv(x).chunk(3, -1)), is_causal=True
                    )
                    .transpose(1, 2)
                    .reshape(1, 12, 32)
                ),
                qkv=nn.Linear(32, 96),
            ),
            seq,
        ),
        "bigru_2layer": (
            lambda: module(
                lambda s, x: s.fc(s.rnn(x)[0][:, -1]),
                rnn=nn.GRU(16, 24, 2, batch_first=True, bidirectional=True),
                fc=nn.Linear(48, 3),
            ),
            lambda: (torch.randn(1, 20, 16),),
        ),
        "crnn_bilstm_ctc": (
            lambda: module(
                lambda s, x: s.fc(s.rnn(s.c(x).mean(2).transpose(1, 2))[0]).log_softmax(-1),
                c=nn.Conv2d(1, 32, 3, stride=(4, 2), padding=1),
                rnn=nn.LSTM(32, 24, 2, batch_first=True, bidirectional=True),
                fc=nn.Linear(48, 11),
            ),
            lambda: (torch.randn(1, 1, 16, 48),),
        ),
        "lstm_streaming_state": (
            lambda: module(lambda s, x, h, c: s.rnn(x, (h, c)), rnn=nn.LSTM(8, 16, batch_first=True)),
            lambda: (torch.randn(1, 5, 8), torch.randn(1, 1, 16), torch.randn(1, 1, 16)),
        ),
        "rnn_tanh": (
            lambda: module(
                lambda s, x: s.fc(s.rnn(x)[0][:, -1]), rnn=nn.RNN(8, 16, batch_first=True), fc=nn.Linear(16, 3)
            ),
            lambda: (torch.randn(1, 10, 8),),
        ),
        "gru_cell_step": (
            lambda: module(lambda s, x, h: s.cell(x, h), cell=nn.GRUCell(8, 16)),
            lambda: (torch.randn(1, 8), torch.randn(1, 16)),
        ),
        "conv1d_same_padding": (
            lambda: module(
                lambda s, x: s.b(F.gelu(s.a(x))).amax(-1),
                a=nn.Conv1d(1, 16, 9, stride=4),
                b=nn.Conv1d(16, 8, 5, dilation=2, padding="same"),
            ),
            lambda: (torch.randn(1, 1, 400),),
        ),
        "conv_transpose_upsampler": (
            lambda: module(
                lambda s, x: torch.sigmoid(s.up(torch.relu(s.down(x)))),
                down=nn.Conv2d(3, 8, 3, stride=2, padding=1),
                up=nn.ConvTranspose2d(8, 3, 3, stride=2, padding=1, output_padding=1),
            ),
            image,
        ),
        "pixel_shuffle": (
            lambda: module(lambda s, x: s.ps(s.c(x)), c=nn.Conv2d(3, 12, 3, padding=1), ps=nn.PixelShuffle(2)),
            image,
        ),
        "leaky_relu": (
            lambda: module(
                lambda s, x: s.fc(F.leaky_relu(s.c(x), 0.1).mean((2, 3))), c=nn.Conv2d(3, 8, 3), fc=nn.Linear(8, 4)
            ),
            image,
        ),
        "adaptive_max_pool": (
            lambda: module(
                lambda s, x: s.fc(F.adaptive_max_pool2d(s.c(x), 1).flatten(1)), c=nn.Conv2d(3, 8, 3), fc=nn.Linear(8, 4)
            ),
            image,
        ),
        "instance_norm": (
            lambda: module(lambda s, x: F.relu(s.i(s.c(x))), c=nn.Conv2d(3, 8, 3), i=nn.InstanceNorm2d(8, affine=True)),
            image,
        ),
        "pool1d": (
            lambda: module(
                lambda s, x: F.adaptive_avg_pool1d(F.max_pool1d(F.avg_pool1d(s.c(x), 3, 2, 1), 2), 1).flatten(1),
                c=nn.Conv1d(2, 8, 5, padding=2),
            ),
            lambda: (torch.randn(1, 2, 96),),
        ),
        "stft_magnitude": (
            lambda: module(
                lambda s, x: s.fc(torch.stft(x, 64, 16, window=window, return_complex=True).abs().mean(-1)),
                fc=nn.Linear(33, 4),
            ),
            lambda: (torch.randn(1, 400),),
        ),
        "one_hot": (
            lambda: module(lambda s, i: s.fc(F.one_hot(i, 10).float().mean(1)), fc=nn.Linear(10, 2)),
            lambda: (torch.randint(0, 10, (1, 5)),),
        ),
        "sort_topk": (
            lambda: module(lambda s, x: (s.fc(x).topk(3).values, s.fc(x).sort(-1).values), fc=nn.Linear(16, 10)),
            lambda: (torch.randn(1, 16),),
        ),
        "weight_norm_audio": (
            lambda: module(
                lambda s, x: s.b(F.leaky_relu(s.a(x), 0.1)),
                a=nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 8, 3, padding=1)),
                b=nn.utils.weight_norm(nn.Conv1d(8, 4, 3, padding=1)),
            ),
            lambda: (torch.randn(1, 4, 32),),
        ),
        "unet_upsample_concat": (
            lambda: module(
                lambda s, x: s.o(torch.cat([s.u(F.relu(s.d(x))), x], 1)),
                d=nn.Conv2d(3, 8, 3, stride=2, padding=1),
                u=nn.Upsample(scale_factor=2),
                o=nn.Conv2d(11, 2, 1),
            ),
            image,
        ),
        "masked_fill_attention": (
            lambda: module(
                lambda s, x, mask: (
                    (s.q(x) @ x.transpose(1, 2)).masked_fill(mask[:, None] == 0, float("-inf")).softmax(-1) @ x
                ),
                q=nn.Linear(8, 8),
            ),
            lambda: (torch.randn(1, 6, 8), torch.tensor([[1, 1, 1, 1, 0, 0]])),
        ),
        "grid_sample": (
            lambda: module(
                lambda s, x: F.grid_sample(
                    x,
                    F.affine_grid(s.loc(x.flatten(1)).view(-1, 2, 3), list(x.shape), align_corners=False),
                    align_corners=False,
                ),
                loc=nn.Linear(3 * 16 * 16, 6),
            ),
            image,
        ),
        "rms_norm_block": (
            lambda: module(
                lambda s, x: s.down(F.silu(s.up(s.norm(x)))),
                norm=nn.RMSNorm(32),
                up=nn.Linear(32, 64),
                down=nn.Linear(64, 32),
            ),
            seq,
        ),
        "transformer_decoder": (
            lambda: module(
                lambda s, t, m: s.dec(
                    t, m, tgt_mask=nn.Transformer.generate_square_subsequent_mask(5), tgt_is_causal=True
                ),
                dec=nn.TransformerDecoder(nn.TransformerDecoderLayer(16, 2, 32, batch_first=True), 1),
            ),
            lambda: (torch.randn(1, 5, 16), torch.randn(1, 7, 16)),
        ),
        "mha_float_and_padding_masks": (
            lambda: module(
                lambda s, x, pad: s.a(
                    x,
                    x,
                    x,
                    key_padding_mask=pad,
                    need_weights=False,
                    attn_mask=torch.triu(torch.full((6, 6), float("-inf")), 1),
                )[0],
                a=nn.MultiheadAttention(16, 2, batch_first=True),
            ),
            lambda: (torch.randn(1, 6, 16), torch.tensor([[False] * 5 + [True]])),
        ),
        "avg_pool_ceil_no_pad_count": (
            lambda: module(
                lambda s, x: F.avg_pool2d(s.c(x), 3, 2, 1, ceil_mode=True, count_include_pad=False),
                c=nn.Conv2d(3, 4, 1),
            ),
            lambda: (torch.randn(1, 3, 15, 15),),
        ),
        "max_unpool_segnet": (
            lambda: module(
                lambda s, x: s.unpool(*s.pool(s.c(x))),
                c=nn.Conv2d(3, 4, 3, padding=1),
                pool=nn.MaxPool2d(2, return_indices=True),
                unpool=nn.MaxUnpool2d(2),
            ),
            image,
        ),
        "local_response_norm": (
            lambda: module(lambda s, x: s.n(s.c(x)), c=nn.Conv2d(3, 8, 3), n=nn.LocalResponseNorm(3)),
            image,
        ),
        "conv3d_video": (
            lambda: module(
                lambda s, x: s.fc(F.adaptive_avg_pool3d(F.relu(s.c(x)), 1).flatten(1)),
                c=nn.Conv3d(3, 8, 3, padding=1),
                fc=nn.Linear(8, 4),
            ),
            lambda: (torch.randn(1, 3, 4, 16, 16),),
        ),
        # constructs found in HF models (ConvBERT, Speech2Text, ESM, Funnel, FNet) and FNOs
        "glu_gated_conv": (
            lambda: module(
                lambda s, x: s.fc(F.glu(s.c(x), dim=1).mean(-1)), c=nn.Conv1d(8, 32, 3, padding=1), fc=nn.Linear(16, 4)
            ),
            lambda: (torch.randn(1, 8, 40),),
        ),
        "erf_gelu_by_hand": (
            lambda: module(
                lambda s, x: s.down((lambda h: h * 0.5 * (1.0 + torch.erf(h / 1.4142135)))(s.up(x))),
                up=nn.Linear(32, 64),
                down=nn.Linear(64, 32),
            ),
            seq,
        ),
        "torch_aliases": (
            lambda: module(
                lambda s, x: torch.concat(
                    [torch.multiply(s.a(x), torch.sigmoid(x)), torch.subtract(torch.divide(s.b(x), 2.0), x)], -1
                ),
                a=nn.Linear(32, 32),
                b=nn.Linear(32, 32),
            ),
            seq,
        ),
        "inplace_into_view": (
            lambda: module(
                lambda s, x, m: (lambda v: (v.mul_(m), v)[1])((s.a(x) * 2.0)[:, 1:]).sum(-1), a=nn.Linear(32, 32)
            ),
            lambda: (torch.randn(1, 12, 32), torch.ones(1, 11, 32)),
        ),
        "fnet_fourier_mixing": (
            lambda: module(
                lambda s, x: s.fc(torch.fft.fft(torch.fft.fft(x, dim=-1), dim=-2).real), fc=nn.Linear(32, 32)
            ),
            seq,
        ),
        "spectral_conv_fno": (
            lambda: module(
                lambda s, x: (
                    torch.fft.irfft2(
                        F.pad(
                            torch.einsum(
                                "bixy,ioxy->boxy", torch.fft.rfft2(x)[:, :, :4, :4], torch.view_as_complex(s.w)
                            ),
                            (0, 5, 0, 12),
                        ),
                        s=(16, 16),
                    )
                    + x
                ),
                w=nn.Parameter(torch.randn(3, 3, 4, 4, 2) * 0.1),
            ),
            image,
        ),
    }


def _sample(example, seed: int) -> list:
    import torch

    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(t.shape, generator=g).numpy() if t.dtype.is_floating_point else t.numpy().copy() for t in example
    ]


def run(name: str, factory, inputs, targets) -> dict:
    import torch

    import tpuedge
    from tpuedge.quantize import metrics  # the one metrics module

    torch.manual_seed(0)
    row, example = {"pattern": name}, inputs()
    try:
        program = tpuedge.export(factory().eval(), example, name=name)
    except Exception as exc:  # noqa: BLE001 - a capture that fails is the finding
        row["capture"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        return row
    calibration = [_sample(example, seed) for seed in range(16)]
    probe = _sample(example, 100)
    for target in targets:
        started = time.perf_counter()
        try:
            problems = program.check(target)
        except Exception as exc:  # noqa: BLE001 - a check that raises is a finding too
            row[target] = f"check raised {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            continue
        if problems:
            row[target] = "refused: " + ", ".join(p.subject for p in problems)
            continue
        options = {"cloud-tpu": {}, "android": {"quantize": "int8"}, "mcu": {"board": "esp32s3", "eval": "none"}}[
            target
        ]
        if target != "cloud-tpu":
            options.update(calibration=calibration, allow_below_budget=True)
        with tempfile.TemporaryDirectory() as tmp:
            try:
                artifact = tpuedge.build(program, target, f"{tmp}/out", **options)
                # mcu takes image inputs NHWC by default (its outputs keep their layout)
                feed = [
                    x.transpose(0, 2, 3, 1)
                    if x.ndim == 4
                    and list(x.transpose(0, 2, 3, 1).shape) == list(spec.shape)
                    and list(x.shape) != list(spec.shape)
                    else x
                    for x, spec in zip(probe, artifact.inputs)
                ]
                cosine = min(metrics.cosine(ours, want) for ours, want in zip(artifact.run(*feed), program.run(*probe)))
                row[target] = f"ok {cosine:.4f} ({time.perf_counter() - started:.0f} s)"
            except Exception as exc:  # noqa: BLE001 - a build that fails is the finding
                row[target] = f"build failed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("patterns", nargs="*")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--out", type=Path, default=HERE / "results" / "layer_patterns.json")
    opts = parser.parse_args()
    patterns = _patterns()
    unknown = sorted(set(opts.patterns) - set(patterns))
    if unknown:
        parser.error(f"unknown pattern(s) {', '.join(unknown)}; known: {', '.join(patterns)}")
    targets = [t for t in opts.targets.split(",") if t]
    rows = []
    for name in opts.patterns or list(patterns):
        row = run(name, *patterns[name], targets)
        rows.append(row)
        cells = [row.get("capture", "")] if "capture" in row else [f"{t}: {row[t]}" for t in targets]
        print(f"{name:<28} " + " | ".join(cells), flush=True)
    built = {t: sum(1 for r in rows if str(r.get(t, "")).startswith("ok")) for t in targets}
    print("\nbuilt and ran: " + ", ".join(f"{t} {n}/{len(rows)}" for t, n in built.items()))
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps({"rows": rows, "built": built}, indent=1))
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
