"""The Program's ExportedProgram -> a float LiteRT flatbuffer, through litert-torch's own pipeline
below `litert_torch.convert()` (no second torch.export of the user's module): its pre-convert
decomposition table (which keeps GELU, LayerNorm, SDPA whole for its fusion passes), optional
channels-last inputs, its FX passes, then `exported_programs_to_flatbuffer`.

Lowering is mostly torch re-traces, so each is avoided where it changes nothing: `check` and the
build share one decomposition, decompositions apply in place (edge/litert/decompose_in_place.py),
the canonicalize re-trace runs only where needed (`convert_passes`), and the commonest plain ops
skip the jax bridge (edge/litert/direct_lowerings.py), all giving the same bytes.
"""

from __future__ import annotations

import copy
import os
import threading
import weakref
from dataclasses import dataclass

from tpuedge.edge.litert.decompose_in_place import decompositions_in_place
from tpuedge.edge.litert.litert_session import litert_session
from tpuedge.shared_ir.torch_compat import cia_ops_walked_once, op_schema

__all__ = [
    "convert_passes",
    "decompose_for_litert",
    "litert_ir_passes",
    "lower_to_float_flatbuffer",
    "lower_signatures_to_float_flatbuffer",
    "lowered_fingerprint",
    "SIGNATURE_KEY",
]

SIGNATURE_KEY = "serving_default"

# input ExportedProgram -> its decomposition, until a lowering takes it (weak: dies with the Program)
_DECOMPOSED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_DECOMPOSED_LOCK = threading.Lock()
# input ExportedProgram -> it after litert_ir_passes (weak: dies with the Program)
_PASSED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_PASSED_LOCK = threading.Lock()
_UNCHANGED = object()


def _quiet() -> None:
    # litert-torch prints a progress line per stage unless told otherwise; our CLI reports itself.
    os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")


def _private_copy(exported_program):
    """Same weights (shared, not copied), own graph: litert-torch may rewrite this one."""
    from tpuedge.shared_ir.passes import keep_node_names

    from torch.export import ExportedProgram

    graph_module = copy.deepcopy(exported_program.graph_module)
    keep_node_names(exported_program.graph, graph_module.graph)
    ep = exported_program
    return ExportedProgram(
        root=graph_module,
        graph=graph_module.graph,
        graph_signature=copy.deepcopy(ep.graph_signature),
        state_dict=ep.state_dict,
        range_constraints=copy.deepcopy(ep.range_constraints),
        module_call_graph=copy.deepcopy(ep.module_call_graph),
        example_inputs=ep.example_inputs,
        constants=ep.constants,
        verifiers=ep.verifiers,
    )


def litert_ir_passes(exported_program):
    """The IR passes every LiteRT lowering applies first (android and mcu alike), as a new
    program (the input itself when none changes anything; remembered per input program, so a
    check, a lowering and its cache key pass it once). Each rewrites what litert-torch, its
    converter or LiteRT's interpreter refuses or does badly, into what they take:
      - forms they fail on: a convolution's named padding ("same") as numbers, a padded transposed
        convolution as an unpadded one and a crop (the converter takes VALID and SAME crops only),
        an adaptive max pool with even windows as a max pool (no lowering), 3-D pools as 2-D pools
        over frames and over time (the quantizer stopped at the REDUCE_WINDOW they lowered to: S3D), LocalResponseNorm's
        average over a window of channels as a 1x1 convolution (the quantizer stopped at the
        REDUCE_WINDOW it lowered to), sorts and values-only
        top-k as TOPK_V2 (LiteRT loads no STABLEHLO_SORT), one_hot as a comparison (its
        decomposition asserts), an STFT as a convolution with a DFT basis (no complex tensors),
        add/sub's alpha as a MUL, Tensor.unfold as a gather (the converter's own form is a PAD
        above 5-D: HaloNet), F.fold as sums of placed taps or, where its patches tile the image, a
        rearrangement (LiteRT refused the SCATTER litert-torch lowered it to: HF MobileViTV2),
        clamps and transposes above 5-D at a lower rank, an expand a matrix product reads as a
        gather (the converter dropped the transpose after a BROADCAST_TO: HF Qwen3's keys), no
        expand before a broadcasting op (MobileViTv2), a constant minus a computed tensor as -y + c
        (the converter writes c - y as y - c after its NHWC ops);
      - what costs size or accuracy: eval-mode identities (dropout, clone) removed, inference
        BatchNorms folded into the layer before them (MobileNetV2's float build in about half the
        time), what depends on no input folded into constants (EdgeNeXt's positional encoding, an
        int8 DIV by 10000**k that LiteRT refused), PReLU as one form, attention-mask constants
        bounded, L2 normalizations without a division by the norm (an int8 DIV stops at a divisor
        on its zero point), a softmax over one element as ones, one over another axis than the last
        between transposes and a convolution's over its last axis at 3-D (the converter writes
        them out in ops the quantizer leaves float: NHWC moves W off the last axis), and a
        flatten into a Linear read
        in NHWC order (no TRANSPOSE before it).
      - first, `canonical_forms()` (shared_ir/passes/canonical_forms.py), the list mcu's passes
        begin with too: autocast and no_grad regions inlined, no-op casts removed and casts as
        `_to_copy`, in-place ops on private values out of place (torchvision's
        `ReLU(inplace=True)`), ATen aliases as the ops they name, `F.pad` as the op for its mode,
        SiLU as x * sigmoid(x). litert-torch's own decomposition reaches the same graph, so the
        float files are unchanged (byte-identical on the 23 zoo models, both layouts); run here
        too, they let a model mcu rewrites in nothing else reach one program on both targets.
    mcu's own passes run these too, so a CNN that needs nothing mcu-specific reaches the same
    program on both targets and shares one float model (`lowered_fingerprint`): an mcu build
    after an android build of ResNet-18 or MobileNetV2 reads the float model the android build
    made. Per-layer verify takes its reference from the same program, so a bounded mask is not
    reported as an error."""
    with _PASSED_LOCK:
        done = _PASSED.get(exported_program)
    if done is None:
        done = _run_litert_ir_passes(exported_program)
        with _PASSED_LOCK:
            # the program itself is not stored as its own value: the entry would keep it alive
            _PASSED[exported_program] = _UNCHANGED if done is exported_program else done
    return exported_program if done is _UNCHANGED else done


def _run_litert_ir_passes(exported_program):
    from tpuedge.shared_ir.passes.adaptive_max_pool import AdaptiveMaxPoolAsPool
    from tpuedge.shared_ir.passes.alpha_scale import AlphaAsMul
    from tpuedge.shared_ir.passes.batchnorm_fold import FoldBatchNorm
    from tpuedge.shared_ir.passes.broadcast_expand import BroadcastInsteadOfExpand
    from tpuedge.shared_ir.passes.canonical_forms import canonical_forms
    from tpuedge.shared_ir.passes.channel_window_conv import ChannelWindowAsConvolution
    from tpuedge.shared_ir.passes.col2im_sums import Col2imAsSums
    from tpuedge.shared_ir.passes.constant_fold import FoldConstants
    from tpuedge.shared_ir.passes.constant_minus import ConstantMinusAsNegAdd
    from tpuedge.shared_ir.passes.conv_padding import ConvPaddingAsNumbers
    from tpuedge.shared_ir.passes.conv_transpose_crop import TransposedConvAsCrop
    from tpuedge.shared_ir.passes.expand_gather import ExpandAsGather
    from tpuedge.shared_ir.passes.flatten_nhwc import FlattenAsNHWC
    from tpuedge.shared_ir.passes.high_rank import ElementwiseAtMost5D, PermuteAtMost5D
    from tpuedge.shared_ir.passes.mask_bound import FiniteMaskBound
    from tpuedge.shared_ir.passes.normalize_rsqrt import NormalizeAsRsqrt
    from tpuedge.shared_ir.passes.one_hot_compare import OneHotAsCompare
    from tpuedge.shared_ir.passes.pool3d_as_2d import Pool3dAs2d
    from tpuedge.shared_ir.passes.prelu_form import PReluAsMinimum
    from tpuedge.shared_ir.passes.softmax_last_axis import SoftmaxOnTheLastAxis
    from tpuedge.shared_ir.passes.softmax_of_one import SoftmaxOfOne
    from tpuedge.shared_ir.passes.sort_topk import SortAsTopk
    from tpuedge.shared_ir.passes.stft_conv import StftAsConvolution
    from tpuedge.shared_ir.passes.unfold_gather import UnfoldAsGather

    # both edge targets begin with the canonical forms (mcu's list in edge/mcu/mcu_capability.py) and
    # end with this list, so where mcu's own passes found nothing, both give litert-torch one program
    for ir_pass in (
        *canonical_forms(),
        ConvPaddingAsNumbers(),
        TransposedConvAsCrop(),
        AdaptiveMaxPoolAsPool(),
        Pool3dAs2d(),
        ChannelWindowAsConvolution(),
        SortAsTopk(),
        OneHotAsCompare(),
        FoldBatchNorm(),
        SoftmaxOfOne(),
        SoftmaxOnTheLastAxis(),
        FoldConstants(),
        StftAsConvolution(),  # after FoldConstants: a window made in forward is a constant by then
        AlphaAsMul(),
        PReluAsMinimum(),
        FiniteMaskBound(),
        NormalizeAsRsqrt(),
        BroadcastInsteadOfExpand(),
        ExpandAsGather(),
        UnfoldAsGather(),
        Col2imAsSums(),
        ElementwiseAtMost5D(),
        PermuteAtMost5D(),
        ConstantMinusAsNegAdd(),
        FlattenAsNHWC(),
    ):
        exported_program, _ = ir_pass(exported_program)
    return exported_program


def lowered_fingerprint(program) -> str:
    """Fingerprint of the program litert-torch is given for `program` (after `litert_ir_passes`):
    what the float model's cache entry is keyed by, so two targets whose own passes end in the
    same program share it."""
    from tpuedge.shared_ir.fingerprint import fingerprint

    passed = litert_ir_passes(program.exported_program)
    return program.fingerprint if passed is program.exported_program else fingerprint(passed)


def _decompose(exported_program):
    from tpuedge.edge.flatbuffer.tensor_names import stack_as_scope
    from tpuedge.shared_ir.program_snapshot import with_fake_values
    from tpuedge.shared_ir.passes.constant_fold import FoldConstants
    from tpuedge.shared_ir.stage_times import timed

    _quiet()
    with timed("LiteRT IR passes"):
        exported_program = litert_ir_passes(exported_program)
    with_fake_values(exported_program)  # a program read from its cached snapshot: litert-torch re-traces it
    with (
        litert_session(),
        cia_ops_walked_once(),
        decompositions_in_place(),
        timed("litert-torch decomposition (pre-convert table)"),
    ):
        from litert_torch import fx_infra

        fx_infra.silence_torch_logs()
        ep = fx_infra.graph_utils.reset_from_node_meta(_private_copy(exported_program))
        stack_as_scope(ep)  # tensor names come out as module scopes (edge/flatbuffer/tensor_names.py)
        ep = fx_infra.safe_run_decompositions(ep, fx_infra.decomp.pre_convert_decomp(), can_skip=False)
        # The table computes constants at run time: reflection padding's indices are an int64
        # arange, abs and sub. Left in, they ran on device, and the lowering's own int64 -> int32
        # rewrite of that arange (a Python function) cost a further full re-trace of the program
        # (Silero VAD: 0.6 s of a 2 s conversion). Folded, the indices are one int32 constant.
        # Only there: elsewhere what the table leaves constant (a recurrent cell's zero state)
        # the converter already folds, smaller than a stored constant.
        return FoldConstants()(ep)[0] if _has_int64_arange(ep) else ep


def _has_int64_arange(exported_program) -> bool:
    """An int64 `arange.start_step`, the overload litert-torch's lowering rewrites to int32 (the
    pre-convert table has already written `arange.default` and `arange.start` as it)."""
    import torch

    return any(
        n.target == torch.ops.aten.arange.start_step and getattr(n.meta.get("val"), "dtype", None) == torch.int64
        for n in exported_program.graph.nodes
    )


def decompose_for_litert(exported_program):
    """litert-torch's pre-convert decomposition of `exported_program` (left as it was).

    The result is shared (check, as_text and the next lowering of the same program decompose
    once): read it, don't change it.
    """
    with _DECOMPOSED_LOCK:
        done = _DECOMPOSED.get(exported_program)
    if done is None:
        done = _decompose(exported_program)
        with _DECOMPOSED_LOCK:
            _DECOMPOSED[exported_program] = done
    return done


def _take_decomposed(exported_program):
    """The remembered decomposition, handed over for rewriting (forgotten here), or a new one."""
    with _DECOMPOSED_LOCK:
        done = _DECOMPOSED.pop(exported_program, None)
    return done if done is not None else _decompose(exported_program)


@dataclass(frozen=True)
class _Signature:
    """What litert_converter reads from a signature: its name and flat input names."""

    name: str
    flat_arg_names: list[str]


def convert_passes(exported_program):
    """litert-torch's FX passes before its MLIR lowering (`core._run_convert_passes`, in its order),
    its CanonicalizePass run only where it changes what the passes after it see.

    That pass is a full torch re-trace (deit-tiny: 2.0 s of a 14 s build) of the program the
    layout pass left, and the MLIR lowering starts with another (`pre_lower_decomp()`, always run).
    It runs because the layout pass leaves Python functions in the graph, which the lowering's
    re-trace turns into ATen ops just the same. What only it does for the passes in between:
    give back the ops the layout pass wrapped in its NHWC functions (an `avg_pool2d` or an
    `upsample_nearest2d`, which the composite pass then wraps whole; without it they lowered to a
    REDUCE_WINDOW or a gather), and decompose composite-implicit ops (an `avg_pool1d` into the
    `avg_pool2d` the composite pass wraps). So it is skipped only where no node is such an op and
    the only Python functions are the layout pass's transposes, convolutions and max pools
    (`canonical_retrace_needed`); the float flatbuffers of the 23 zoo models and the 36 layer
    patterns compared identical with and without (tests/test_litert_lowering_passes.py compares
    the kinds of graph)."""
    from litert_torch import fx_infra
    from litert_torch.generative import fx_passes as generative_fx_passes

    from tpuedge.edge.litert.litert_torch_compat import fx_passes as litert_fx_passes

    fx_passes = litert_fx_passes()

    ep = generative_fx_passes.run_generative_passes(exported_program)
    ep = fx_infra.run_passes(
        ep, [fx_passes.LowerTorchAOPass(), fx_passes.EliminateDeadCodePass(), fx_passes.OptimizeLayoutTransposesPass()]
    )
    if canonical_retrace_needed(ep):
        ep = fx_infra.run_passes(ep, [fx_passes.CanonicalizePass()])
    return fx_infra.run_passes(
        ep,
        [
            fx_passes.ReduceViewRankPass(),
            fx_passes.BuildAtenCompositePass(),
            fx_passes.RemoveNonUserOutputsPass(),
            fx_passes.CastInputsBf16ToF32Pass(),
        ],
    )


# The layout pass's functions that hide no op the composite pass wraps: its transposes and its
# NHWC convolution ...
_PLAIN_LAYOUT_FUNCTIONS = ("tensor_to_nhwc", "tensor_to_nchw", "_aten_convolution_rewriter.<locals>.conv_nhwc")
# ... and its NHWC wrapper (`nhwc_op`) around a max pool, which has no composite. Around an
# average pool or a resize (composites) it keeps the re-trace.
_NHWC_WRAPPER = "transpose_first_arg_rewriter.<locals>.nhwc_op"
_MAX_POOLS = ("aten::max_pool2d", "aten::max_pool2d_with_indices")


def canonical_retrace_needed(exported_program) -> bool:
    """Whether litert-torch's canonicalizing re-trace would give the passes after it another graph
    than the one they get without it: a composite-implicit ATen op (the re-trace decomposes it), or
    a Python function other than the layout pass's transposes, NHWC convolution and NHWC max pool."""
    import operator

    from tpuedge.shared_ir.torch_compat import has_composite_implicit_kernel, is_op_overload

    for node in exported_program.graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        if is_op_overload(target):
            if has_composite_implicit_kernel(target):
                return True
        elif target is not operator.getitem and not _plain_layout_function(target):
            return True
    return False


def _plain_layout_function(target) -> bool:
    import inspect

    from tpuedge.edge.litert.litert_torch_compat import from_layout_pass

    if not from_layout_pass(target):
        return False
    name = getattr(target, "__qualname__", "")
    if name == _NHWC_WRAPPER:  # the op it wraps is its closure's `op`
        wrapped = inspect.getclosurevars(target).nonlocals.get("op")
        schema = op_schema(wrapped)
        return schema is not None and schema.name in _MAX_POOLS
    return name in _PLAIN_LAYOUT_FUNCTIONS


def lower_to_float_flatbuffer(program, *, channels_last: bool = False) -> bytes:
    """Float32 .tflite bytes for `program`, inputs named as the Program's inputs."""
    return lower_signatures_to_float_flatbuffer([(SIGNATURE_KEY, program)], channels_last=channels_last)


def lower_signatures_to_float_flatbuffer(
    signatures, *, channels_last: bool = False, weights_in_place: bool = False
) -> bytes:
    """One float32 .tflite with a signature per (name, Program) of `signatures`, inputs named as
    each Program's. Programs that share parameter tensors (a bundle's entry points) share their
    buffers: litert-torch keys the constants it writes by the tensor's storage.

    weights_in_place: litert-torch's lighter constant form, which wraps each weight's memory
    instead of copying it into MLIR (a decoder's weights are most of its conversion's memory)."""
    _quiet()
    from tpuedge.edge.litert.channels_last import channels_last_inputs
    from tpuedge.edge.generative.cache_write_lowering import register_cache_write_lowering
    from tpuedge.shared_ir.stage_times import timed

    with cia_ops_walked_once(), decompositions_in_place():
        programs = []
        for _, program in signatures:
            ep = _take_decomposed(program.exported_program)
            programs.append(channels_last_inputs(ep) if channels_last else ep)
        with litert_session():
            from tpuedge.edge.litert.direct_lowerings import direct_lowerings
            from tpuedge.edge.litert.litert_torch_compat import converter

            register_cache_write_lowering()
            with timed("litert-torch FX passes"):
                programs = [convert_passes(ep) for ep in programs]
            with timed("litert-torch MLIR lowering + flatbuffer"), direct_lowerings():
                exporter = converter().exported_programs_to_flatbuffer(
                    programs,
                    [_Signature(name, list(program.input_names)) for name, program in signatures],
                    lightweight_conversion=weights_in_place,
                )
                return bytes(exporter.to_bytes())
