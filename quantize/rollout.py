"""A stateful model judged as it runs: its state fed back for N steps, every step measured.

    rollout = parse_rollout("h_out=h,c_out=c:16", program)     # UserError on a bad spec
    outputs = rollout_runs(rollout, samples, run)              # run(sample) -> that model's outputs
    reference = rollout_or_samples(program.run, samples, rollout)    # rollout None: one run a sample

A streaming model (a voice detector fed its LSTM state every 32 ms) is used one step after
another, its own state carried from step to step. Judged one step at a time on a state the
float model produced, its quantization error never compounds; and a state output whose cosine
is 0.93 may still give the same answers step after step. So the build runs each model, float
and converted alike, on sequences: the evaluation samples are read in order, `steps` at a time,
each group one sequence; the first sample's state inputs start it, and every later step reads
the state that the same model wrote the step before (the converted model its own, error and
all). The outputs of every step are what the budget measures (the named ones, with
--budget-outputs). Backend-neutral: `run` is the runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tpuedge.shared_ir.errors import UserError

__all__ = ["Rollout", "parse_rollout", "rollout_runs", "rollout_or_samples", "budget_inputs"]


@dataclass(frozen=True)
class Rollout:
    pairs: tuple[tuple[int, int], ...]  # (state output index, state input index)
    steps: int
    spec: str  # as given, for the report

    def sequences(self, samples: int) -> int:
        return samples // self.steps

    def describe(self, samples: int) -> str:
        return f"{self.sequences(samples)} sequence(s) of {self.steps} steps, state fed back ({self.spec})"

    def to_json(self, samples: int) -> dict:
        return {"spec": self.spec, "steps": self.steps, "sequences": self.sequences(samples)}


def _usage(spec: str, why: str) -> UserError:
    return UserError(
        f"--rollout {spec!r}: {why}. Give STATE_OUT=STATE_IN[,STATE_OUT=STATE_IN...]:STEPS with the model's output and "
        "input names (e.g. --rollout h_out=h,c_out=c:16): each output is fed to that input for STEPS steps."
    )


def parse_rollout(spec: str, program, samples: int | None = None) -> Rollout:
    """The rollout `spec` names on `program`; samples: how many evaluation samples there are
    (at least one sequence's worth is needed)."""
    text = str(spec).strip()
    pairs_text, sep, steps_text = text.rpartition(":")
    if not sep or not pairs_text:
        raise _usage(text, "no ':STEPS' at its end")
    try:
        steps = int(steps_text)
    except ValueError:
        raise _usage(text, f"{steps_text!r} is not a whole number of steps") from None
    if steps < 1:
        raise _usage(text, "the steps must be 1 or more")
    outputs, inputs = program.output_names, program.input_names
    pairs = []
    for pair in pairs_text.split(","):
        out_name, eq, in_name = (p.strip() for p in pair.partition("="))
        if not eq or not out_name or not in_name:
            raise _usage(text, f"{pair!r} is not STATE_OUT=STATE_IN")
        if out_name not in outputs:
            raise _usage(text, f"{program.name} has no output {out_name!r} (its outputs: {', '.join(outputs)})")
        if in_name not in inputs:
            raise _usage(text, f"{program.name} has no input {in_name!r} (its inputs: {', '.join(inputs)})")
        o, i = outputs.index(out_name), inputs.index(in_name)
        if tuple(program.outputs[o].shape) != tuple(program.inputs[i].shape):
            raise _usage(
                text,
                f"output {out_name} has shape {list(program.outputs[o].shape)} and input {in_name} "
                f"{list(program.inputs[i].shape)}: a state fed back must keep its shape",
            )
        pairs.append((o, i))
    if len({i for _, i in pairs}) != len(pairs):
        raise _usage(text, "an input is fed twice")
    if samples is not None and samples < steps:
        raise _usage(text, f"the evaluation data has {samples} sample(s), fewer than one sequence of {steps} steps")
    return Rollout(tuple(pairs), steps, text)


def rollout_runs(rollout: Rollout, samples: Sequence[Sequence[np.ndarray]], run: Callable) -> list[list[np.ndarray]]:
    """The outputs of every step of every whole sequence in `samples` (in order), the state
    inputs of each step after a sequence's first replaced by what `run` wrote the step before."""
    outputs: list[list[np.ndarray]] = []
    for start in range(0, rollout.sequences(len(samples)) * rollout.steps, rollout.steps):
        state: dict[int, np.ndarray] = {}
        for sample in samples[start : start + rollout.steps]:
            inputs = [state.get(i, np.asarray(a)) for i, a in enumerate(sample)]
            step = [np.asarray(o) for o in run(inputs)]
            state = {
                i: step[o].reshape(np.shape(sample[i])).astype(np.asarray(sample[i]).dtype) for o, i in rollout.pairs
            }
            outputs.append(step)
    return outputs


def rollout_or_samples(run: Callable, samples, rollout: Rollout | None) -> list:
    """`run(*sample)`'s outputs: one per sample, or every step of each rollout sequence."""
    if rollout is None:
        return [run(*s) for s in samples]
    return rollout_runs(rollout, samples, lambda s: run(*s))


def budget_inputs(kind: str, rollout: Rollout | None, samples: int) -> str:
    """The budget's samples in words: `kind`, and the rollout's sequences when there is one."""
    return kind if rollout is None else f"{kind}: {rollout.describe(samples)}"
