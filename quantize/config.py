"""`QuantConfig`: how a model is quantized, as one frozen value every backend reads.

STABLE INTERNAL API (the android and mcu targets both build from it):

    QuantConfig(scheme="int8", io_dtype="int8", strict_int8=True, per_channel=False)

It says *what* is wanted (scheme, granularity, I/O dtype, calibration needs, accuracy goal);
each backend maps it onto its own converter and quantizer. Nothing here imports a backend.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from tpuedge.shared_ir.errors import UserError

__all__ = ["QuantConfig", "SCHEMES", "IO_DTYPES", "IO_DTYPE_HELP", "DEFAULT_SCHEME"]

SCHEMES = ("none", "fp16", "dynamic-int8", "int8", "auto")
# "integer": int8 ends, int16 where the int8 search runs every op at 16 bits (mcu's default)
IO_DTYPES = ("float32", "int8", "integer")
# one text for android's and mcu's option (`tpuedge build --help` lists one per option name)
IO_DTYPE_HELP = (
    "I/O tensors of an integer model: float32 (quantized inside the model; android's default), int8, "
    "or integer (int8, int16 where the int8 search runs every op at 16 bits; mcu's default)"
)
# android's default: the smallest, then fastest, scheme that meets the accuracy budget (quantize/auto.py)
DEFAULT_SCHEME = "auto"


@dataclass(frozen=True)
class QuantConfig:
    """A quantization request.

    scheme: "none" (float32), "fp16" (float16 weights, float compute), "dynamic-int8"
        (int8 weights, activations quantized on the fly), "int8" (static: int8 weights and
        activations from calibration data), "auto" (the target builds each of those it can and
        keeps the smallest, then fastest, that meets the accuracy budget; see quantize/auto.py).
    io_dtype: "float32" (quantize/dequantize inside the model), "int8" (the caller feeds and
        reads int8 with the tensors' scale/zero point, whatever the search chose inside) or
        "integer" (int8, or int16 where the search runs every op at 16 bits: an input read by
        16-bit ops only loses its low bits at an int8 door). Integer I/O needs scheme "int8" (or
        "auto", which then tries only static int8).
    strict_int8: every op int8, no int16 or float island; scheme "int8" or "auto".
    float_islands: whether the int8 search may leave ops float where int8 costs too much
        (android: its upgrade is then a float island, `upgrade_precision`). False keeps every op
        integer, int8 or int16 activations (16x8), which is what TFLite-Micro runs (mcu).
    per_channel: per-output-channel weight scales (False: one scale per tensor).
    channels_last: image inputs (rank 4) taken as NHWC instead of NCHW.
    min_calibration_samples: fewer samples than this is an error for scheme "int8".
    target_cosine: the accuracy goal the int8 per-op search tries to reach (cosine similarity
        of the quantized vs the float outputs on the calibration samples).
    rank_points: when all-int8 misses target_cosine, rank every IR point by its own int8 cost
        (quantize/sensitivity.py) and give the costliest int16 activations first. `--quantize
        auto` turns it off for its int8 candidate: on MiniLM it tripled auto's build (90 s ->
        270 s), and its int16 islands made that candidate larger and 18x slower in LiteRT than
        the dynamic-int8 one auto then picked.
    target_top1: the top-1 agreement with the float model the int8 search also aims at, where the
        build's budget holds class-score outputs to it (None: the cosine alone): a recipe whose
        top-1 on the search's samples falls short scores its cosine times the share reached, so
        a classifier's search goes on past a cosine its argmax does not follow.
    group_by_kind: the per-op search gives all groups of one kind (every LayerNorm, every
        softmax, ...) one precision together: about ten measured recipes instead of three per
        group. `--quantize auto` sets it for its int8 candidate: on a random-init DeiT-tiny (73
        groups) auto took 479 s, nearly all of it measuring that candidate's recipes.
    """

    scheme: str = DEFAULT_SCHEME
    io_dtype: str = "float32"
    strict_int8: bool = False
    float_islands: bool = True
    per_channel: bool = True
    channels_last: bool = False
    min_calibration_samples: int = 8
    target_cosine: float = 0.995
    rank_points: bool = True
    group_by_kind: bool = False
    target_top1: float | None = None

    @property
    def upgrade_precision(self) -> str:
        """What the int8 search gives an op whose int8 costs too much: a float island where they
        are allowed (LiteRT runs it on XNNPACK's float kernels, its int8 weights dequantized once;
        16-bit activations run LiteRT's reference kernels: MiniLM-L6's int8 build took 77 ms per
        invoke with int16 islands, 5.1 ms with float ones, as fast as its float model), else 16-bit
        activations (TFLite-Micro runs only integer graphs)."""
        return "float" if self.float_islands else "int16"

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise UserError(f"Unknown quantization scheme {self.scheme!r}; choose one of: {', '.join(SCHEMES)}.")
        if self.io_dtype not in IO_DTYPES:
            raise UserError(f"Unknown I/O dtype {self.io_dtype!r}; choose one of: {', '.join(IO_DTYPES)}.")
        if self.io_dtype != "float32" and self.scheme not in ("int8", "auto"):
            raise UserError(
                f"--io-dtype {self.io_dtype} needs integer activations, but the scheme is {self.scheme!r}; "
                "use --quantize int8 with --calibration, or keep --io-dtype float32."
            )
        if self.strict_int8 and self.scheme not in ("int8", "auto"):
            raise UserError(
                f"--strict-int8 forces a fully integer graph, which needs --quantize int8 (got {self.scheme!r}); "
                "add --quantize int8 --calibration DATA or drop --strict-int8."
            )
        if self.min_calibration_samples < 1:
            raise UserError("min_calibration_samples must be at least 1.")
        if not 0.0 < self.target_cosine <= 1.0:
            raise UserError(f"target_cosine must be in (0, 1], got {self.target_cosine}.")

    @property
    def integer_only(self) -> bool:
        """int8 I/O or a strict int8 graph: only static int8 can give it (auto then tries only that)."""
        return self.strict_int8 or self.io_dtype != "float32"

    @property
    def needs_calibration(self) -> bool:
        return self.scheme == "int8" or (self.scheme == "auto" and self.integer_only)

    @property
    def uses_calibration(self) -> bool:
        """Calibration data, when given, sets ranges (so accuracy is measured on samples held out from it)."""
        return self.scheme in ("int8", "auto")

    @property
    def reads_calibration(self) -> bool:
        """The conversion reads calibration data when given: its ranges, or dynamic-int8's search
        (the float32-weights rung). Accuracy is then measured on samples held out from it."""
        return self.uses_calibration or self.scheme == "dynamic-int8"

    @property
    def granularity(self) -> str:
        return "per-channel" if self.per_channel else "per-tensor"

    def replace(self, **changes: Any) -> "QuantConfig":
        return replace(self, **changes)

    def to_json(self) -> dict:
        return asdict(self)
