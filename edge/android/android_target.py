"""The `android` target: its build options, and which lowering each kind of program gets (a
single-entry model: edge/android/android_lowered.py; a decoder or a model in buckets:
edge/generative). A light module: nothing from litert is imported here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.targets import BuildOption, Capability, Target

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.edge.android.android_lowered import AndroidLowered
    from tpuedge.shared_ir.program import Program

__all__ = ["AndroidTarget"]

# options of one kind of model only: a language model's (capture, budget, bundle), a single-entry model's
_CAPTURE = ("prefill_lengths", "cache_length", "buckets")
_LM_BUILD = ("max_perplexity_increase", "embedding_bits", "bundle")
_LM_ONLY = (*_CAPTURE, *_LM_BUILD)
_SINGLE_ONLY = (
    "calibration",
    "strict_int8",
    "io_dtype",
    "channels_last",
    "per_channel",
    "min_cosine",
    "max_drop",
    "budget_outputs",
    "rollout",
)
# a bucket build quantizes without calibration (fp16, dynamic-int8): the static int8 options don't apply
_BUCKETS_REFUSE = ("calibration", "strict_int8", "io_dtype", "channels_last", "max_drop", "budget_outputs", "rollout")


class AndroidTarget(Target):
    name = "android"
    summary = "quantized LiteRT flatbuffer for phones (LiteRT interpreter)"
    runtime = "LiteRT interpreter (ai_edge_litert)"
    implemented = True
    opens_files = (".tflite",)  # a bare .tflite runs in LiteRT, whoever made it

    def capability(self) -> Capability:
        from tpuedge.edge.android.capability import android_capability

        return android_capability()

    def build_options(self) -> list[BuildOption]:
        from tpuedge.quantize.budget_options import budget_build_options
        from tpuedge.quantize.lm_budget import perplexity_build_option
        from tpuedge.quantize.config import DEFAULT_SCHEME, IO_DTYPE_HELP, IO_DTYPES, SCHEMES
        from tpuedge.quantize.lm_schemes import LM_SCHEMES
        from tpuedge.shared_ir.generative.capture import capture_build_options

        return [
            BuildOption(
                "quantize",
                "quantization scheme (a language model's: none, weight-only-int8, dynamic-int8, "
                "int4-block128, int4-block32, auto)",
                tuple(dict.fromkeys((*SCHEMES, *LM_SCHEMES))),
                DEFAULT_SCHEME,
            ),
            BuildOption(
                "calibration",
                "calibration data: .npz keyed by input name, .npy, a folder of those, or module:function",
                str,
                None,
            ),
            BuildOption(
                "strict_int8", "every op int8 (no int16/float islands); reports the accuracy cost", bool, False
            ),
            BuildOption("io_dtype", IO_DTYPE_HELP, tuple(IO_DTYPES), "float32"),
            BuildOption("channels_last", "NHWC image inputs (no TRANSPOSE in the model)", bool, False),
            BuildOption("per_channel", "per-channel int8 weight scales (else per-tensor)", bool, True),
            BuildOption(
                "eval",
                "evaluation data for the build's accuracy check and its budget, `file.py:function` returning "
                "(inputs, labels) or an .npz of inputs keyed by input name plus an optional `labels` array; without it: a held-out tail of the calibration data, else random inputs (a smoke check)",
                str,
                None,
            ),
            *budget_build_options(),
            *capture_build_options(),
            perplexity_build_option(),
            BuildOption(
                "embedding_bits", "a quantized language model's token embedding table at 8 or 4 bits", int, None
            ),
            BuildOption(
                "bundle",
                "also write a language model as this bundle: litertlm (model, tokenizer, BOS/EOS, chat "
                "template, for the LiteRT-LM runtime)",
                ("none", "litertlm"),
                "none",
            ),
        ]

    def lower(self, program: "Program", **options: Any) -> "AndroidLowered":
        from tpuedge.edge.android.android_lowered import AndroidLowered

        return AndroidLowered.create(program, **self.options_except(options, _LM_ONLY, "a single-entry model"))

    def lower_bundle(self, program_bundle, /, **options: Any):
        if program_bundle.kind != "decoder":
            from tpuedge.edge.generative.android_buckets import AndroidBucketsLowered

            given = self.options_except(options, (*_LM_BUILD, *_BUCKETS_REFUSE), "a model built in buckets")
            for key in _CAPTURE:
                given.pop(key, None)
            return AndroidBucketsLowered.create(program_bundle, **given)
        from tpuedge.edge.generative.android_decoder import AndroidDecoderLowered

        given = self.options_except(options, _SINGLE_ONLY, "a language model")
        captured = sorted(k for k in _CAPTURE if given.pop(k, None) is not None)
        if captured:
            raise UserError(
                f"{', '.join('--' + k.replace('_', '-') for k in captured)} set(s) how a decoder is captured, and "
                f"{program_bundle.name} is captured already; give it with the model, not to its build."
            )
        return AndroidDecoderLowered.create(program_bundle, **given)

    def load_artifact(self, path: Any):
        from tpuedge.edge.android.artifact import open_litert_artifact

        return open_litert_artifact(Path(path))

    def load_file(self, path: Any):
        from tpuedge.edge.android.artifact import open_litert_artifact

        return open_litert_artifact(Path(path))
