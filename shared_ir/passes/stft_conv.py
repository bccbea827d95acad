"""`torch.stft` as a strided convolution with a constant DFT basis, its complex result as two
real tensors.

    X[k, t] = sum_n w[n] x[t·hop + n] e^{-2πi kn/N}
      re = conv1d(x, w·cos(2πkn/N), stride=hop),  im = conv1d(x, -w·sin(2πkn/N), stride=hop)

An audio model that computes its spectrogram in `forward` (torch.stft, or torchaudio's
Spectrogram / MelSpectrogram, which call it) carries a complex64 tensor, which no LiteRT or
TFLite-Micro kernel takes: android and mcu refused it at `check` (tests/test_passes_stft.py).
The convolution computes the same sums (one CONV_2D, its 2·(N/2+1) output channels the real and
the imaginary parts), and the complex tensor's readers become real ops: |X| = sqrt(re² + im²)
(on mcu `magnitude-as-projections` then drops the power tensor), view_as_real = stack(re, im),
real / imag = re / im. Center padding is already explicit in the captured graph (a reflect pad).
Left for the check: a window that is not a constant, a reader of the complex tensor other than
those, a two-sided STFT of a real signal. Float rounding (the sums' order).
"""

from __future__ import annotations

import math
from typing import Any

from tpuedge.shared_ir.passes import PassResult, copy_program
from tpuedge.shared_ir.passes.constant_fold import constant_values, lift_constant
from tpuedge.shared_ir.passes.graph_edit import (
    built_in_place_of,
    call_arguments,
    call_with_val,
    finish,
    replace_node,
    static_shapes,
)

__all__ = ["StftAsConvolution"]


def _readers():
    import torch

    aten = torch.ops.aten
    return {
        aten.abs.default: "abs",
        aten.view_as_real.default: "view_as_real",
        aten.real.default: "real",
        aten.imag.default: "imag",
    }


def _basis(n_fft: int, window, normalized: bool):
    """(2F, 1, N) float32: the windowed cosines, then the negated windowed sines (F = N/2 + 1)."""
    import torch

    n = torch.arange(n_fft, dtype=torch.float64)
    k = torch.arange(n_fft // 2 + 1, dtype=torch.float64)[:, None]
    angle = 2 * math.pi * k * n / n_fft
    basis = torch.cat([torch.cos(angle), -torch.sin(angle)]) * window.to(torch.float64)[None, :]
    if normalized:
        basis = basis / math.sqrt(n_fft)
    return basis[:, None, :].to(torch.float32)


class StftAsConvolution:
    name = "stft-as-convolution"

    def __call__(self, exported_program: Any) -> tuple[Any, PassResult]:
        import torch

        aten = torch.ops.aten
        readers = _readers()
        stfts = [n for n in exported_program.graph.nodes if n.op == "call_function" and n.target == aten.stft.default]
        if not stfts:
            return exported_program, PassResult(self.name, 0, "no STFT in the program")
        ep = copy_program(exported_program)
        values = constant_values(ep)
        names = {n.name for n in stfts}
        count = 0
        for node in [n for n in ep.graph.nodes if n.name in names]:
            x, n_fft = node.args[0], int(node.args[1])
            given = call_arguments(node)
            hop = int(given["hop_length"] or n_fft // 4)
            win_length = int(given["win_length"] or n_fft)
            window = given["window"]
            if window is None:
                window = torch.ones(win_length)
            elif isinstance(window, torch.fx.Node) and window.name in values:
                window = values[window.name]
            else:
                continue  # a window computed from the input
            if given["onesided"] is False or not static_shapes(x) or x.meta["val"].dim() not in (1, 2):
                continue
            if not all(user.target in readers for user in node.users):
                continue
            left = (n_fft - win_length) // 2  # a shorter window sits in the middle of the frame
            window = torch.nn.functional.pad(window.detach().to(torch.float32), (left, n_fft - win_length - left))
            bins = n_fft // 2 + 1
            with built_in_place_of(node):
                weight = lift_constant(
                    ep, f"_{node.name}_dft_basis", _basis(n_fft, window, bool(given["normalized"])), x
                )
                batched = x.meta["val"].dim() == 2
                signal = call_with_val(
                    ep.graph,
                    aten.unsqueeze.default,
                    x if batched else call_with_val(ep.graph, aten.unsqueeze.default, x, 0),
                    1,
                )
                both = call_with_val(ep.graph, aten.conv1d.default, signal, weight, None, [hop])
                re = call_with_val(ep.graph, aten.slice.Tensor, both, 1, 0, bins)
                im = call_with_val(ep.graph, aten.slice.Tensor, both, 1, bins, 2 * bins)
                if not batched:
                    re, im = (call_with_val(ep.graph, aten.squeeze.dim, t, 0) for t in (re, im))
            for user in list(node.users):
                kind = readers[user.target]
                with built_in_place_of(user):
                    if kind == "abs":
                        power = call_with_val(
                            ep.graph,
                            aten.add.Tensor,
                            call_with_val(ep.graph, aten.mul.Tensor, re, re),
                            call_with_val(ep.graph, aten.mul.Tensor, im, im),
                        )
                        new = call_with_val(ep.graph, aten.sqrt.default, power)
                    elif kind == "view_as_real":
                        new = call_with_val(ep.graph, aten.stack.default, [re, im], -1)
                    else:
                        new = re if kind == "real" else im
                replace_node(ep, user, new)
            ep.graph.erase_node(node)
            count += 1
        if not count:
            return exported_program, PassResult(self.name, 0, "no STFT it can write as a convolution")
        return finish(ep), PassResult(self.name, count, f"wrote {count} STFT(s) as a convolution with a DFT basis")
