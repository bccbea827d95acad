"""`check --target mcu` says exactly what the mcu build does, for every ATen op in the data.

One probe per entry of edge/mcu/data/tflm_ops.json's "aten" map (tests/fixtures/mcu_op_probes.py).
All probes go into ONE model (one branch, input and output each), which runs through the real
mcu conversion once (IR passes, litert-torch, strict int8 ai-edge-quantizer). Each branch is
then cut out of the converted flatbuffer and run alone in the real TFLite-Micro interpreter.
A branch builds when its ops are all integer (the build refuses float ops) and TFLM runs it;
`check` must accept exactly the probes whose branch builds.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from mcu_op_probes import INPUT_SHAPES, PROBES
from tpuedge.edge.mcu.arena import classify_tflm_error
from tpuedge.edge.mcu.tflm_ops import aten_to_tflm
from tpuedge.edge.mcu.tflm_runtime import TflmError, TflmRunner
from tpuedge.shared_ir.op_registry import op_key


class _AllProbes(torch.nn.Module):
    """Probe i applied to input i: no two branches share a tensor, so the converter can't merge
    them (it did: a softmax next to a log_softmax lost its SOFTMAX fusion to a shared max/exp)."""

    def __init__(self, names):
        super().__init__()
        self.names = names

    def forward(self, *inputs):
        return tuple(PROBES[n][1](x) for n, x in zip(self.names, inputs))


def _sample(rng, names):
    return [
        rng.integers(0, 10, (1, 6)).astype(np.int64)
        if PROBES[n][0] == "idx"
        else rng.standard_normal(INPUT_SHAPES[PROBES[n][0]]).astype(np.float32)
        for n in names
    ]


def _branch_op_keys(exported_program) -> list[set[str]]:
    """For each graph output, the op keys of every node it depends on."""
    graph = exported_program.graph
    output = next(n for n in graph.nodes if n.op == "output")
    keys = []
    for arg in output.args[0]:
        seen, stack, ops = set(), [arg], set()
        while stack:
            node = stack.pop()
            if node in seen or not isinstance(node, torch.fx.Node):
                continue
            seen.add(node)
            if node.op == "call_function":
                ops.add(op_key(node.target))
            stack.extend(node.all_input_nodes)
        keys.append(ops)
    return keys


def _branches(tflite: bytes) -> list[tuple[list[str], list[str], bytes]]:
    """Per output: (its builtins, those left computing in float, a model of just that branch)."""
    from tpuedge.edge.flatbuffer import tflite_file

    model = tflite_file.read_model(tflite)
    graph = model.subgraphs[0]
    names = tflite_file.operator_names(model)
    producer = {int(t): i for i, op in enumerate(graph.operators) for t in op.outputs}

    def name(op):
        return names[op.opcodeIndex]

    def is_float(t) -> bool:
        return tflite_file.dtype_name(graph.tensors[t].type) in ("float32", "float16")

    all_ops = list(graph.operators)
    # the signature names each output ("output_<i>", i = position in the torch outputs)
    signature = {tflite_file.text(o.name): o.tensorIndex for o in model.signatureDefs[0].outputs}
    all_outputs = [signature[f"output_{i}"] for i in range(len(signature))]
    out = []
    for tensor in all_outputs:
        needed, stack = set(), [tensor]
        while stack:
            t = stack.pop()
            if t in producer and producer[t] not in needed:
                needed.add(producer[t])
                stack.extend(int(i) for i in all_ops[producer[t]].inputs if i >= 0)
        ops = [all_ops[i] for i in sorted(needed)]
        # as the build: any float tensor that is not model I/O (a DEQUANTIZE feeding a float kernel too)
        floats = [name(op) for op in ops if any(int(o) != tensor and is_float(int(o)) for o in op.outputs)]
        graph.operators, graph.outputs = ops, [tensor]  # packed as this branch alone
        out.append(([name(op) for op in ops], floats, tflite_file.write_model(model)))
    return out


def _runs_in_tflm(branch: bytes) -> tuple[bool, str]:
    try:
        runner = TflmRunner(branch, 1 << 20)
        rng = np.random.default_rng(0)
        runner.run_raw(
            [
                rng.integers(-100, 100, d["shape"]).astype(d["dtype"])
                if d["dtype"] != np.int32
                else rng.integers(0, 10, d["shape"]).astype(np.int32)
                for d in runner.input_details
            ]
        )
        return True, ""
    except TflmError as exc:
        failure = classify_tflm_error(exc)
        assert failure.kind in ("missing-kernel", "kernel"), exc  # 1 MiB is plenty: no other failure is expected
        return False, f"{failure.op}: {failure.detail}"


@pytest.fixture(scope="module")
def probe_results():
    from tpuedge.edge.mcu.mcu_build import integer_tflite
    from tpuedge.edge.mcu.mcu_capability import mcu_capability, mcu_passes
    from tpuedge.quantize.config import QuantConfig
    from tpuedge.shared_ir.program import Program

    names = sorted(PROBES)
    rng = np.random.default_rng(0)
    program = tpuedge.export(_AllProbes(names), tuple(torch.from_numpy(x) for x in _sample(rng, names)), name="probes")
    problems = {p.subject for p in program.check("mcu")}
    checked_graph = mcu_capability().decompose(program.exported_program)
    keys = _branch_op_keys(checked_graph)
    captured = _branch_op_keys(program.exported_program)
    ep, _ = mcu_passes().run(program.exported_program)
    from tpuedge.shared_ir.passes.explicit_pad import ExplicitPad  # its keys are rewritten again later

    captured = [a | b for a, b in zip(captured, _branch_op_keys(ExplicitPad()(program.exported_program)[0]))]
    config = QuantConfig(  # the mcu build's own settings (NHWC image inputs), strict: each op's own int8 form
        scheme="int8",
        io_dtype="int8",
        strict_int8=True,
        float_islands=False,
        per_channel=True,
        channels_last=True,
        min_calibration_samples=16,
    )
    _, tflite, _ = integer_tflite(Program(ep, name="probes"), config, [_sample(rng, names) for _ in range(16)])
    branches = _branches(tflite)
    assert len(branches) == len(names) == len(keys) == len(captured)
    results = {}
    for name, branch_keys, captured_keys, (builtins, floats, model) in zip(names, keys, captured, branches):
        runs, why = _runs_in_tflm(model) if not floats else (False, f"left in float: {floats}")
        results[name] = {
            "keys": branch_keys,
            "captured": {k.rsplit(".", 1)[0] for k in captured_keys},
            "captured_overloads": set(captured_keys),
            "check_ok": not (branch_keys & problems),
            "build_ok": runs,
            "why": why,
            "builtins": builtins,
        }
    return results


def test_every_aten_op_in_the_data_has_a_probe_that_captures_it(probe_results):
    assert set(aten_to_tflm()) <= set(PROBES)
    for key in aten_to_tflm():
        seen = probe_results[key]["captured"] | {k.rsplit(".", 1)[0] for k in probe_results[key]["keys"]}
        seen |= probe_results[key]["captured_overloads"]
        assert key in seen, key


@pytest.mark.slow  # one litert-torch conversion of ~90 branches: about 80 s on 2 busy cores
def test_check_verdict_equals_the_real_build_for_every_op(probe_results):
    disagree = {
        name: (r["check_ok"], r["build_ok"], r["why"], r["builtins"])
        for name, r in probe_results.items()
        if r["check_ok"] != r["build_ok"]
    }
    assert disagree == {}, "\n".join(
        f"{n}: check {c}, build {b} ({why}; {ops})" for n, (c, b, why, ops) in disagree.items()
    )
    # Both verdicts occur: the probes exercise the rule, they don't all pass or all fail.
    verdicts = {r["build_ok"] for r in probe_results.values()}
    assert verdicts == {True, False}


@pytest.mark.slow  # shares the conversion above
def test_the_builds_builtin_rule_accepts_every_branch_tflm_ran(probe_results):
    """The mcu build refuses a converted model by its builtins (edge/mcu/data/tflm_ops.json). A builtin
    that ran in TFLite-Micro on int8 tensors must pass that rule, or `check` passes a model the
    build then refuses: STRIDED_SLICE (a stepped slice) and PADV2 (a padded max-pool) were."""
    from tpuedge.edge.mcu.mcu_capability import unsupported_builtins

    refused = {name: unsupported_builtins(r["builtins"]) for name, r in probe_results.items() if r["build_ok"]}
    assert {name: why for name, why in refused.items() if why} == {}
