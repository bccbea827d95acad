"""The int8 precision search's budgets: how many samples it measures on, what a remedy must gain
to be kept, and when a rung is tried (quantize/precision_search.py)."""

from __future__ import annotations

__all__ = [
    "SEARCH_SAMPLES",
    "LARGE_MODEL_PARAMETERS",
    "LARGE_MODEL_SEARCH_SAMPLES",
    "ESTIMATED_RANGES",
    "MIN_RANGE_GAIN",
    "MIN_EQUALIZED_GAIN",
    "HELD_OUT_MARGIN",
    "EVERY_OP_TRIES",
    "MIN_EVERY_OP_GAIN",
    "TABLE_OPS",
    "COMPUTE_HEAVY_OPS",
    "FLOAT_WEIGHTS_BYTES_SHARE",
    "FLOAT_WEIGHTS_BYTES_FLOOR",
    "EVERY_OP_FIRST_GROUPS",
    "SCREENING_SHARE",
    "MIN_SCREENING_SAMPLES",
    "search_samples",
]

# At most this many calibration samples are used to measure candidate recipes; fewer for a
# model of LARGE_MODEL_PARAMETERS or more, where one candidate's LiteRT run costs 0.1-0.2 s per
# sample (a 22M-parameter encoder with int16 and float islands) and the search measures ~100.
SEARCH_SAMPLES = 64
LARGE_MODEL_PARAMETERS = 5_000_000
LARGE_MODEL_SEARCH_SAMPLES = 16
# activation-range estimates measured against min/max when all-int8 misses the target; one
# is kept only if it scores MIN_RANGE_GAIN better (a tie keeps min/max, which clips nothing)
ESTIMATED_RANGES = ("mse", "percentile")
MIN_RANGE_GAIN = 1e-4
# cross-layer equalization is kept only if its all-int8 beats the best ranges' by this much
# (a near tie keeps the user's own weights, which per-layer verify compares one for one)
MIN_EQUALIZED_GAIN = 1e-3
# the float-island last resort aims this far above the budget on the search's own samples: the
# held-out samples the budget reads score lower (ShuffleNetV2-x0.5 by 0.001, MiniLM's old recipe
# passed 8 held-out samples and scored 0.9885 on 32 others)
HELD_OUT_MARGIN = 0.0025
# the whole-model int16 rung: how many times an op type the target refuses at 16 bits is left
# int8 and the rest measured again, and how much it must gain to be kept
EVERY_OP_TRIES = 3
MIN_EVERY_OP_GAIN = 1e-4
# the op types the rung returns to int8 where it has score to spare: table lookups first (an
# embedding table is most of a text model's bytes: MiniLM-L6's every-op-float recipe kept its
# 30522x384 table float, 57.9 MB against 22.7 MB), then the compute-heavy ops (most of its time)
TABLE_OPS = ("GATHER_ND", "GATHER", "EMBEDDING_LOOKUP")
COMPUTE_HEAVY_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "BATCH_MATMUL", "TRANSPOSE_CONV")
# the float32-weights rung's extra bytes (3 an element over int8) stay within this share of the
# parameter count plus this floor: the size goal's slack (int8 size <= 1.1x parameter bytes + 32 KiB)
FLOAT_WEIGHTS_BYTES_SHARE = 0.1
FLOAT_WEIGHTS_BYTES_FLOOR = 32 * 1024
# from this many op groups on (android), the whole-model float rung is measured before them
EVERY_OP_FIRST_GROUPS = 8
# The op-group search's one-group-at-a-time candidates (one per group; two while it measured
# int16 and float on android: 78 of the 117 MiniLM measured) only order the groups, so they
# run on 1/SCREENING_SHARE of the samples (at least
# MIN_SCREENING_SAMPLES); every upgrade kept is measured on all of them.
SCREENING_SHARE = 4
MIN_SCREENING_SAMPLES = 2


def search_samples(program, calibration: list) -> list:
    """The calibration samples a search measures its candidates on: at most SEARCH_SAMPLES, or
    LARGE_MODEL_SEARCH_SAMPLES for a model of LARGE_MODEL_PARAMETERS or more."""
    large = program.parameter_count >= LARGE_MODEL_PARAMETERS
    return calibration[: LARGE_MODEL_SEARCH_SAMPLES if large else SEARCH_SAMPLES]
