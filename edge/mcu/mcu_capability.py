"""The `mcu` capability: what TFLite-Micro can run, from data, before any conversion.

A captured ATen op is supported when every TFLite builtin litert-torch lowers it to can run in a
strict-int8 TFLM model: TFLM has an int8 kernel for it AND ai-edge-quantizer quantizes it to
int8 (`mcu_int8_problem`, from edge/mcu/data/tflm_ops.json, checked against the real interpreter,
quantizer and converter). The build checks the converted model's builtins with the same rule.
Before that the mcu pipeline rewrites the IR (`mcu_passes`): autocast regions are inlined, no-op casts, eval-mode dropout and
input-independent ops vanish, a gather by constant aranges becomes a view, reflect/replicate padding becomes slices + concatenation, GELU (no
kernel) an approximation, ATen's aliases (torch.multiply, ...) the op each names, SiLU and GLU products with a sigmoid, hardsigmoid relu6(x + 3) / 6, leaky_relu max(x, a*x), powers, square roots and 2-norms products
and RSQRT, and the ops TFLite-Micro has no kernel for (assignments into slices, F.unfold / F.fold,
bicubic resizes, maxima over a dim, addcmul) forms it runs; docs/mcu.md lists every pass. The check
applies the same passes the build applies, so `tpuedge check --target mcu` and `tpuedge build
--target mcu` never disagree.
"""

from __future__ import annotations

from tpuedge.shared_ir.op_registry import OpRegistry
from tpuedge.shared_ir.passes.alias_ops import ALIASES as _ALIAS_NAMES
from tpuedge.shared_ir.targets import Capability

__all__ = ["mcu_capability", "mcu_passes", "unsupported_builtins", "check_converted_model"]


def mcu_passes(gelu_form: str = "sigmoid", *, training: bool = False):
    """The IR passes every mcu build runs, in order. `training=True` gives them for a graph that
    trains (quantization-aware training): without the one that only reorders data for NHWC (it
    permutes a Linear's weight), and keeping `detach`, which stops gradients there (a
    straight-through estimator's `z + (q - z).detach()`, an inlined no_grad region's outputs)."""
    from tpuedge.shared_ir.passes import PassManager
    from tpuedge.shared_ir.passes.clamp_bounds import OneSidedClamps
    from tpuedge.shared_ir.passes.constant_fold import FoldConstants
    from tpuedge.shared_ir.passes.adaptive_max_pool import AdaptiveMaxPoolAsPool
    from tpuedge.shared_ir.passes.addcmul import AddcmulAsMulAdd
    from tpuedge.shared_ir.passes.bicubic_matmul import BicubicAsMatmuls
    from tpuedge.shared_ir.passes.canonical_forms import canonical_forms
    from tpuedge.shared_ir.passes.col2im_sums import Col2imAsSums
    from tpuedge.shared_ir.passes.cumsum_steps import CumsumAsShiftedSums
    from tpuedge.shared_ir.passes.erf_tanh import ErfAsTanh
    from tpuedge.shared_ir.passes.flatten_nhwc import FlattenAsNHWC
    from tpuedge.shared_ir.passes.gelu_rewrite import GeluRewrite, TanhGeluArrangement
    from tpuedge.shared_ir.passes.glu_form import GluAsSigmoidMul
    from tpuedge.shared_ir.passes.hardsigmoid import HardSigmoidAsRelu6
    from tpuedge.shared_ir.passes.instance_norm_groups import InstanceNormAsGroupNorm
    from tpuedge.shared_ir.passes.leaky_relu_form import LeakyReluAsMaximum
    from tpuedge.shared_ir.passes.index_as_view import ConstantIndexAsView
    from tpuedge.shared_ir.passes.im2col_conv import Im2colAsConv
    from tpuedge.shared_ir.passes.recurrent_cells import DecomposeRecurrentCells
    from tpuedge.shared_ir.passes.magnitude import MagnitudeAsProjections
    from tpuedge.shared_ir.passes.normalize_rsqrt import NormalizeAsRsqrt
    from tpuedge.edge.mcu.tflm_ops import tflm_ops
    from tpuedge.shared_ir.passes.pad_slices import PadAsSlices
    from tpuedge.shared_ir.passes.pixel_shuffle_views import PixelShuffleAsViews
    from tpuedge.shared_ir.passes.pool1d_as_2d import Pool1dAs2d
    from tpuedge.shared_ir.passes.pool3d_as_2d import Pool3dAs2d
    from tpuedge.shared_ir.passes.powers import PowersAsProducts
    from tpuedge.shared_ir.passes.prelu_form import PReluAsMinimum
    from tpuedge.shared_ir.passes.recurrent_layers import UnrollRecurrentLayers
    from tpuedge.shared_ir.passes.reduce_max import ReduceMaxAsMaximum
    from tpuedge.shared_ir.passes.repeat_interleave_gather import RepeatInterleaveAsGather
    from tpuedge.shared_ir.passes.rms_norm_rsqrt import RmsNormAsRsqrt
    from tpuedge.shared_ir.passes.roll_slices import RollAsSlices
    from tpuedge.shared_ir.passes.select_stacked import SelectFromStack
    from tpuedge.shared_ir.passes.stft_conv import StftAsConvolution
    from tpuedge.shared_ir.passes.unfold_gather import UnfoldAsGather
    from tpuedge.shared_ir.passes.uniform_gather import UniformGather

    return PassManager(
        [
            *canonical_forms(keep_detach=training),  # what android's passes begin with too: one float model for both
            FoldConstants(),
            StftAsConvolution(),  # before magnitude-as-projections: its |X| is a sqrt(re² + im²)
            UniformGather(),
            ConstantIndexAsView(),
            CumsumAsShiftedSums(),
            PadAsSlices(max_concat_inputs=tflm_ops()["CONCATENATION"]["max_inputs"]),
            RollAsSlices(),
            RepeatInterleaveAsGather(),
            UnfoldAsGather(),
            Im2colAsConv(),
            Col2imAsSums(),
            BicubicAsMatmuls(),
            GeluRewrite(gelu_form),
            ErfAsTanh(),
            GluAsSigmoidMul(),
            HardSigmoidAsRelu6(),
            LeakyReluAsMaximum(),
            InstanceNormAsGroupNorm(),
            RmsNormAsRsqrt(),
            PixelShuffleAsViews(),
            AddcmulAsMulAdd(),
            AdaptiveMaxPoolAsPool(),
            Pool1dAs2d(),
            Pool3dAs2d(),  # before reduce-max-as-maximum: they may leave a max over a dim
            ReduceMaxAsMaximum(),
            NormalizeAsRsqrt(),
            MagnitudeAsProjections(),
            PowersAsProducts(),
            TanhGeluArrangement(),
            OneSidedClamps(),
            UnrollRecurrentLayers(),
            SelectFromStack(),
            DecomposeRecurrentCells(),
            *([] if training else [FlattenAsNHWC()]),
            PReluAsMinimum(),
        ]
    )


def unsupported_builtins(names) -> dict[str, str]:
    """Those of `names` (TFLite builtins) a strict-int8 TFLite-Micro model can't run -> why."""
    from tpuedge.edge.mcu.tflm_ops import mcu_int8_problem

    problems = {n: mcu_int8_problem(n) for n in sorted(set(names))}
    return {n: why for n, why in problems.items() if why}


_BUILTIN_FIX = "replace the PyTorch op that lowers to it (see `tpuedge ops --target mcu`), or build for android, which runs float ops"


def check_converted_model(name: str, tflite: bytes) -> None:
    """The mcu build's converted model against the rule `check --target mcu` applies: every builtin
    one TFLite-Micro runs in int8, and no float compute (float tensors may only be model I/O)."""
    from tpuedge.edge.mcu.tflm_candidates import float_compute_ops
    from tpuedge.edge.mcu.tflm_model import ops_used
    from tpuedge.shared_ir.errors import Problem, ProblemsError

    ops = ops_used(tflite)
    lacking = unsupported_builtins(o.name for o in ops)
    if lacking:
        counts = {o.name: o.count for o in ops}
        raise ProblemsError(
            f"{name} converted to TFLite ops an integer TFLite-Micro model can't run; nothing was written:",
            [Problem("op", n, why, _BUILTIN_FIX, counts[n]) for n, why in lacking.items()],
        )
    float_ops = float_compute_ops(tflite)
    if float_ops:
        raise ProblemsError(
            f"{name}: the integer conversion left ops in float, and TFLite-Micro runs only integer "
            "graphs; nothing was written:",
            [
                Problem("op", n, "ai-edge-quantizer has no int8 recipe for it, so it stayed float", _BUILTIN_FIX, c)
                for n, c in sorted(float_ops.items())
            ],
        )


def _overload_keys(key: str) -> list[str]:
    """'aten.pow' -> ['aten.pow.Scalar', 'aten.pow.Tensor_Scalar', ...] ('.default' for plain ops)."""
    import torch

    namespace, _, name = key.partition(".")
    packet = getattr(getattr(torch.ops, namespace), name, None)
    return [f"{key}.{overload}" for overload in packet.overloads()] if packet is not None else [f"{key}.default"]


# ops the mcu passes rewrite before the check (what `tpuedge ops --target mcu` says about them)
_PADDING_NOTE = "rewritten on the IR as slices + concatenation (STRIDED_SLICE, CONCATENATION), exact"
_REWRITTEN_ON_THE_IR = {
    "aten.reflection_pad1d": _PADDING_NOTE,
    "aten.reflection_pad2d": _PADDING_NOTE,
    "aten.replication_pad2d": _PADDING_NOTE,
    "aten.lstm_cell": "rewritten on the IR: FULLY_CONNECTED, STRIDED_SLICE, LOGISTIC, TANH, MUL, ADD",
    "aten.lstm": "unrolled on the IR over time into LSTM cells: FULLY_CONNECTED, STRIDED_SLICE, LOGISTIC, TANH, MUL, ADD, PACK",
    "aten.gru": "unrolled on the IR over time into GRU cells: FULLY_CONNECTED, STRIDED_SLICE, LOGISTIC, TANH, MUL, ADD, SUB, PACK",
    "aten.rnn_tanh": "unrolled on the IR over time into RNN cells: FULLY_CONNECTED, ADD, TANH, PACK",
    "aten.rnn_relu": "unrolled on the IR over time into RNN cells: FULLY_CONNECTED, ADD, RELU, PACK",
    "aten.gru_cell": "rewritten on the IR: FULLY_CONNECTED, STRIDED_SLICE, LOGISTIC, TANH, MUL, ADD, SUB",
    "aten.rnn_tanh_cell": "rewritten on the IR: FULLY_CONNECTED, ADD, TANH",
    "aten.rnn_relu_cell": "rewritten on the IR: FULLY_CONNECTED, ADD, RELU",
    "aten.prelu": "rewritten on the IR as relu(x) + w*(x - relu(x)): RELU, SUB, MUL, ADD (no duplicated layer)",
    "aten.cumsum": "rewritten on the IR as log-step shifted additions: STRIDED_SLICE, PAD, ADD (TFLM's CUMSUM takes float only)",
    "aten.repeat_interleave": "by a constant count along a dim: rewritten on the IR as one gather of constant positions (GATHER_ND)",
    "aten.roll": "rewritten on the IR as slices + concatenation per rolled dim: STRIDED_SLICE, CONCATENATION",
    "aten.dropout": "removed on the IR in eval mode (train=False)",
    "aten.dropout_": "removed on the IR in eval mode (train=False)",
    "aten.hardsigmoid": "rewritten on the IR as relu6(x + 3) / 6: ADD (RELU6 fused), MUL, exact",
    "aten.instance_norm": "over its input's statistics: rewritten on the IR as a group norm with one group per channel (MEAN, SQUARED_DIFFERENCE, RSQRT, MUL, ADD)",
    "aten.pixel_shuffle": "rewritten on the IR as reshape, permute, reshape (RESHAPE, TRANSPOSE), exact",
    "aten.pixel_unshuffle": "rewritten on the IR as reshape, permute, reshape (RESHAPE, TRANSPOSE), exact",
    "aten.stft": "with a constant window: rewritten on the IR as a convolution with a DFT basis (CONV_2D), its magnitude as projections (no complex tensor)",
    "aten.avg_pool1d": "rewritten on the IR as a 2-D pool over a height-1 view (AVERAGE_POOL_2D), exact",
    "aten.max_pool1d": "rewritten on the IR as a 2-D pool over a height-1 view (MAX_POOL_2D), exact",
    "aten.adaptive_avg_pool1d": "with even windows: rewritten on the IR as a mean over each window (MEAN), exact",
    "aten.rms_norm": "rewritten on the IR as x * rsqrt(mean(x^2) + eps) * weight: MUL, MEAN, ADD, RSQRT",
    "aten.erf": "rewritten on the IR as tanh(1.1284*z + 0.1009*z^3), within 3.6e-4 of erf (MUL, ADD, TANH); the build reports what it cost",
    "aten.glu": "rewritten on the IR as a * sigmoid(b) over the two halves: STRIDED_SLICE, LOGISTIC, MUL, exact",
    "aten.leaky_relu": "with a slope in [0, 1]: rewritten on the IR as max(x, a*x): MUL, MAXIMUM, exact",
    "aten.adaptive_max_pool2d": "with even windows: rewritten on the IR as a max pool (MAX_POOL_2D), exact",
    "aten.adaptive_max_pool1d": "with even windows: rewritten on the IR as a max over each window (MAXIMUM of slices), exact",
    "aten.sqrt": "rewritten on the IR as x * rsqrt(max(x, 1e-30)): MAXIMUM, RSQRT, MUL (TFLM's SQRT takes no int8)",
    "aten.linalg_vector_norm": "ord 2 rewritten on the IR as sqrt(sum(x * x)) in MUL, SUM, RSQRT (other orders: no int8 form)",
}
# what to change, where "it lowers to <builtins TFLM can't run>" names no change the user can make:
# a classifier ending in log_softmax (PyTorch's MNIST example) is fixed at the model's last line
_LOG_SOFTMAX_FIX = (
    "TFLite-Micro has no int8 log-softmax (it lowers to EXP and LOG, which take no int8 tensors); a model "
    "that returns log-probabilities can return its logits instead (log_softmax keeps their order: the same "
    "argmax and top-k) and apply log_softmax on the host, or build for android, which runs it in float"
)
_FIXES = {"aten.log_softmax": _LOG_SOFTMAX_FIX, "aten._log_softmax": _LOG_SOFTMAX_FIX}
# ATen's aliases (torch.multiply, torch.divide, torch.clip, ...): the first mcu pass names the op each is
_REWRITTEN_ON_THE_IR.update(
    {f"aten.{alias}": f"an alias of aten.{name}: written as it on the IR" for alias, name in _ALIAS_NAMES.items()}
)


_CACHE_WRITE = "tpuedge.cache_write.default"


def mcu_capability() -> Capability:
    from tpuedge.edge.mcu.tflm_ops import aten_to_tflm

    registry = OpRegistry("mcu")
    notes: dict[str, str] = {}
    suggestions: dict[str, str] = {}
    for key, builtins in aten_to_tflm().items():
        lacking = unsupported_builtins(builtins)
        if not lacking:
            registry.add(key, tuple(builtins))
            notes[key] = " / ".join(builtins) if builtins else "no op (folded away)"
            continue
        why = "; ".join(f"{b}: {reason}" for b, reason in lacking.items())
        notes[key] = f"lowers to {', '.join(lacking)}, which a strict-int8 TFLite-Micro model can't run"
        # the check looks suggestions up by the node's full key ("aten.pow.Tensor_Scalar")
        for full_key in (key, *_overload_keys(key)):
            suggestions[full_key] = _FIXES.get(key, f"it lowers to {why}")
    notes["aten.gelu"] = (
        "no GELU kernel: the mcu build rewrites it to x*sigmoid(1.702x) on the IR (--gelu tanh: tanh form)"
    )
    # a decoder's KV-cache write (shared_ir/generative/cache_ops.py): the int8 DYNAMIC_UPDATE_SLICE
    # of the decode step an mcu decoder build runs (edge/generative/mcu_decoder.py)
    registry.add(_CACHE_WRITE, ("DYNAMIC_UPDATE_SLICE",))
    notes[_CACHE_WRITE] = "DYNAMIC_UPDATE_SLICE (a decoder's KV-cache write, int8 with the cache's own scale)"
    notes.update(_REWRITTEN_ON_THE_IR)
    return Capability(
        target="mcu",
        ops=registry,
        decompose=_check_view,
        notes=notes,
        suggestions=suggestions,
        rewrite_notes=_rewrite_notes,
        rewrite=lambda exported_program: mcu_passes(training=True).run(exported_program)[0],
        # a transpose of two axes always reduces to at most 5 (before, one, between, other, after)
        max_rank={"aten.permute.default": (5, "TFLite-Micro's TRANSPOSE kernel fails to prepare above 5-D")},
        max_inputs=_concatenation_limits(),
        rewritten={**_REWRITTEN_ON_THE_IR, "aten.gelu": notes["aten.gelu"]},
        random_ops=False,
    )


_WIDE_CONCATENATION_FIX = (
    "join at most {limit} at a time, each group followed by an op such as a ReLU (the converter merges directly "
    "nested concatenations). An nn.LSTM/GRU/RNN whose whole output sequence is read is, unrolled, a stack of one "
    "input per step: read only its last state, or run the model as a streaming step with its state as inputs and "
    "outputs, looped by the host (docs/mcu.md, long sequences)"
)


def _concatenation_limits() -> dict[str, tuple[int, str, str]]:
    """torch.cat and torch.stack (CONCATENATION, from the op data): the most inputs TFLite-Micro takes."""
    from tpuedge.edge.mcu.tflm_ops import tflm_ops

    limit = tflm_ops()["CONCATENATION"]["max_inputs"]
    why = ("TFLite-Micro's CONCATENATION kernel (kMaxInputNum)", _WIDE_CONCATENATION_FIX.format(limit=limit))
    return {"aten.cat.default": (limit, *why), "aten.stack.default": (limit, *why)}


def _check_view(exported_program):
    """What the check judges: the build's IR passes (mcu's, then every LiteRT lowering's), then
    what the converter folds and fuses away."""
    from tpuedge.edge.litert.litert_lowering import litert_ir_passes
    from tpuedge.edge.mcu.mcu_fusion import converter_view

    return converter_view(litert_ir_passes(mcu_passes()(exported_program)))


def _rewrite_notes(exported_program) -> list[str]:
    _, results = mcu_passes().run(exported_program)
    return [r.description for r in results if r.changed] + _long_recurrences(exported_program)


# from this many time steps on, check says what unrolling a recurrent layer costs the build
LONG_RECURRENCE_STEPS = 64
_RECURRENT_LAYERS = {
    "aten.lstm.input": "LSTM",
    "aten.gru.input": "GRU",
    "aten.rnn_tanh.input": "RNN",
    "aten.rnn_relu.input": "RNN",
}


def _long_recurrences(exported_program) -> list[str]:
    """A note for each recurrent layer over LONG_RECURRENCE_STEPS steps or more: unrolled, its graph
    holds one cell per step and layer, which the build converts, quantizes and measures whole."""
    from tpuedge.shared_ir.op_registry import op_key
    from tpuedge.shared_ir.passes.recurrent_layers import layer_args

    notes = []
    for node in exported_program.graph.nodes:
        kind = _RECURRENT_LAYERS.get(op_key(node.target)) if node.op == "call_function" else None
        if kind is None:
            continue
        x, *_, layers, _train, bidirectional, batch_first = layer_args(node, kind == "LSTM")
        shape = x.meta["val"].shape if "val" in x.meta else ()
        steps = int(shape[1 if batch_first else 0]) if len(shape) == 3 else 0
        if steps >= LONG_RECURRENCE_STEPS:
            cells = steps * layers * (2 if bidirectional else 1)
            notes.append(
                f"nn.{kind} over {steps} steps becomes {cells:,} cells (one per step and layer), which the build "
                "converts, quantizes and runs as one graph: minutes, and flash for every cell's ops. A streaming "
                "model (one step, its state as inputs and outputs, looped by the host; `--rollout` measures it so) "
                "is one step's graph whatever the length (docs/mcu.md, long sequences)"
            )
    return notes
