"""The `mcu` target (light module: no litert/tflite_micro import at module level).

    tpuedge build MODEL --target mcu --calibration DATA --out DIR [--board NAME | --flash-kb N --ram-kb N]
    tpuedge build LM --target mcu --cache-length 128 --board NAME      # a decoder LM: its decode step

Always static and integer only (int8, int16 activations where the search measures them needed;
never hybrid or weight-only), integer I/O by default: int8, int16 where every op runs at 16 bits
(`--io-dtype int8` keeps int8 ends, `float32` quantizes inside the model). The pipeline:
check the IR against TFLite-Micro's op data -> IR passes (GELU rewrite, its accuracy cost
measured) -> the shared edge conversion (`program_to_tflite`, strict int8) -> every buffer
inside the flatbuffer -> ops checked against TFLM again -> arena measured in the
real TFLM interpreter -> TFLM vs LiteRT vs float -> board budget -> files, all at once.
A decoder language model builds its decode step alone, its KV cache in the arena
(edge/generative/mcu_decoder.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.targets import BuildOption, Capability, Target

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.shared_ir.program import Program

__all__ = ["McuTarget", "BOARD_NAMES"]

BOARD_NAMES = ("nrf52840", "stm32f746", "esp32s3", "rp2040", "cortex-m0plus")
# options of one kind of model only (a language model's; a single-entry model's), at their
# defaults for the other kind: one given for the wrong kind is an error, not ignored
_LM_BUDGET = ("max_perplexity_increase",)
_SINGLE_ONLY = (
    "calibration",
    "io_dtype",
    "channels_last",
    "gelu",
    "strict_int8",
    "min_cosine",
    "max_drop",
    "budget_outputs",
    "rollout",
)


def _capture_options() -> tuple[str, ...]:
    """How a model is captured (a decoder's cache length, ...): options of the capture, not the build."""
    from tpuedge.shared_ir.generative.capture import capture_build_options

    return tuple(o.name for o in capture_build_options())


class McuTarget(Target):
    name = "mcu"
    summary = "fully integer LiteRT flatbuffer + C array for microcontrollers (TFLite-Micro)"
    runtime = "TFLite-Micro interpreter (tflite_micro)"
    implemented = True

    def capability(self) -> Capability:
        from tpuedge.edge.mcu.mcu_capability import mcu_capability

        return mcu_capability()

    def build_options(self) -> list[BuildOption]:
        from tpuedge.quantize.budget_options import budget_build_options
        from tpuedge.quantize.lm_budget import perplexity_build_option
        from tpuedge.quantize.config import IO_DTYPE_HELP, IO_DTYPES
        from tpuedge.shared_ir.generative.capture import capture_build_options

        return [
            BuildOption(
                "calibration",
                "Calibration data for int8: .npz (arrays keyed by input name), .npy, a folder, or module:function.",
            ),
            BuildOption(
                "eval",
                "Labelled evaluation data, `file.py:function` returning (inputs, labels) or an .npz of inputs keyed by "
                "input name plus an optional `labels` array, on which TFLM accuracy is "
                "measured; without it (or with `none`) accuracy is measured on a held-out tail of the calibration data. "
                "A language model's: a UTF-8 .txt whose passages are separated by lines of --- (default: tpuedge's corpus).",
            ),
            BuildOption("board", "Board whose flash/RAM budget the model must fit.", BOARD_NAMES),
            BuildOption("flash_kb", "Custom flash budget in KB (with --ram-kb, or overriding --board's).", int),
            BuildOption("ram_kb", "Custom RAM budget in KB (with --flash-kb, or overriding --board's).", int),
            BuildOption("io_dtype", IO_DTYPE_HELP, tuple(IO_DTYPES), "integer"),
            BuildOption(
                "channels_last",
                "NHWC image inputs, no TRANSPOSE (the mcu default; --no-channels-last keeps NCHW)",
                bool,
                True,
            ),
            BuildOption("symbol", "C array name in model_data.cc (default g_<model>_model_data)."),
            BuildOption(
                "gelu",
                "How GELU is rewritten for TFLite-Micro (it has no GELU kernel).",
                ("sigmoid", "tanh"),
                "sigmoid",
            ),
            # the same words as android's option: `tpuedge build --help` lists one text per option
            BuildOption(
                "strict_int8",
                "every activation int8 (no int16 where the search would choose it); reports the accuracy cost",
                bool,
                False,
            ),
            *budget_build_options(),
            *capture_build_options(),
            perplexity_build_option(),
        ]

    def lower(self, program: "Program", **options: Any):
        from tpuedge.edge.mcu.mcu_build import McuLowered

        return McuLowered(
            program, **self.options_except(options, (*_capture_options(), *_LM_BUDGET), "a single-entry model")
        )

    def lower_bundle(self, program_bundle, /, **options: Any):
        if program_bundle.kind != "decoder":
            return super().lower_bundle(program_bundle, **options)
        from tpuedge.edge.generative.mcu_decoder import McuDecoderLowered

        given = self.options_except(
            options, _SINGLE_ONLY, "a language model (its mcu build is always int8, integer I/O)"
        )
        captured = sorted(k for k in _capture_options() if given.pop(k, None) is not None)
        if captured:
            raise UserError(
                f"{', '.join('--' + k.replace('_', '-') for k in captured)} set(s) how a decoder is captured, and "
                f"{program_bundle.name} is captured already; give it with the model, not to its build."
            )
        return McuDecoderLowered.create(program_bundle, **given)

    def load_artifact(self, path: Any):
        from tpuedge.shared_ir.artifact import read_manifest

        manifest = read_manifest(Path(path))
        if "decoder" in manifest:  # a language model's decode step
            from tpuedge.edge.generative.mcu_decoder_artifact import McuDecoderArtifact

            return McuDecoderArtifact(Path(path), manifest)
        from tpuedge.edge.mcu.mcu_artifact import McuArtifact

        return McuArtifact(Path(path), manifest)
