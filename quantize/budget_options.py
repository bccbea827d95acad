"""The accuracy budget's `tpuedge build` options (quantize/budget.py), one definition for every
target that takes them."""

from __future__ import annotations

from tpuedge.quantize.budget import DEFAULT_MIN_COSINE, DEFAULT_MIN_TOP1

__all__ = ["budget_build_options"]


def budget_build_options() -> list:
    """The budget's `tpuedge build` options, one definition for every target that takes them."""
    from tpuedge.shared_ir.targets import BuildOption

    return [
        BuildOption(
            "min_cosine",
            "accuracy budget: every output's mean per-sample cosine vs the float IR, on samples "
            "calibration did not use; a build below it exits 1 and writes nothing",
            float,
            DEFAULT_MIN_COSINE,
        ),
        # no default here: an explicit value also holds every other (samples, classes) output
        BuildOption(
            "min_top1",
            f"accuracy budget: top-1 agreement with the float IR (0-1) of every output that looks like "
            f"class scores (a softmax, or a Linear head of 16+ classes; default {DEFAULT_MIN_TOP1})",
            float,
            None,
        ),
        BuildOption(
            "max_drop",
            "accuracy budget: task-accuracy drop in points vs the float IR (needs --eval with labels)",
            float,
            None,
        ),
        BuildOption(
            "budget_outputs",
            "the outputs the accuracy budget holds, NAME[,NAME] (others are reported, not held); "
            "NAME:top1 holds only its argmax (class scores, token ids: every position), NAME:decision only a probability's "
            "side of 0.5 (agreement >= --min-top1), NAME:cosine only its cosine",
            str,
            None,
        ),
        BuildOption(
            "rollout",
            "judge a stateful model as it runs: STATE_OUT=STATE_IN[,...]:STEPS feeds each state output "
            "back to its input for STEPS steps over the --eval samples (read in order, STEPS to a sequence) "
            "and measures the budget's outputs at every step",
            str,
            None,
        ),
        BuildOption(
            "allow_below_budget",
            "write the model even below its accuracy budget (marked so in the manifest)",
            bool,
            False,
        ),
    ]
