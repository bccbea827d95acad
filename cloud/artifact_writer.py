"""Writing a cloud-tpu build folder: export, check the export against the Program, compile for
TPU when libtpu is here, and write the files and manifest.json atomically (see artifact.py for
what each file holds)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tpuedge.cloud.artifact import EXPORT_FILE, STABLEHLO_FILE, WEIGHTS_FILE, CloudArtifact
from tpuedge.cloud.layer_export import LAYERS_FILE
from tpuedge.cloud.safetensors_file import write_safetensors
from tpuedge.cloud.stablehlo_export import argument_names
from tpuedge.cloud.tpu_report import TPU_REPORT_FILE, tpu_report
from tpuedge.quantize.metrics import max_abs_error
from tpuedge.shared_ir.errors import InternalError
from tpuedge.shared_ir.manifest import build_manifest, write_build_manifest
from tpuedge.shared_ir.stage_times import timed

__all__ = ["write_cloud_artifact", "verify_export", "VERIFY_TOLERANCE"]

VERIFY_TOLERANCE = 1e-4  # max |XLA:CPU - Program.run| relative to the output scale
_CALLING_CONVENTION = (
    "exported.call(params, buffers, *inputs) -> tuple(outputs); params and buffers are dicts of the "
    "model.safetensors tensors listed under weights.params / weights.buffers"
)


def _arguments_json(export, program, exported) -> list[dict]:
    names = argument_names(export, program.input_names)
    if len(names) != len(exported.in_avals):
        raise InternalError(f"exported forward takes {len(exported.in_avals)} arguments, expected {len(names)}")
    return [{"name": n, "shape": list(a.shape), "dtype": str(a.dtype)} for n, a in zip(names, exported.in_avals)]


def verify_export(lowered, export, exported) -> dict:
    """Run the exported blob on XLA:CPU against Program.run of the program the user gave, sample by
    sample (for a rebound batch: the leading samples both batches share). Torch never runs the
    rebound graph: see stablehlo_export._run_in_jax for why."""
    import jax

    from tpuedge.cloud.batch_rebind import per_sample_inputs
    from tpuedge.cloud.divergence import ROUNDING_MARGIN, rounding_sensitivity, value_scale

    source, program = lowered.source_program, lowered.program
    cpu = jax.devices("cpu")[0]
    call = jax.jit(exported.call)
    worst, seeds, sensitivity = 0.0, (0, 1), 0.0
    for seed in seeds:
        source_inputs, inputs, shared = per_sample_inputs(source, program, seed)
        expected = source.run(*source_inputs)
        args = [jax.device_put(np.asarray(a, dtype=aval.dtype), cpu) for a, aval in zip(inputs, export.input_avals)]
        with jax.default_device(cpu):
            got = call(export.params, export.buffers, *args)
        moves = None  # torch's own outputs under 1-ulp input changes, measured only where needed
        for index, (name, e, g, spec) in enumerate(zip(program.output_names, expected, got, program.outputs)):
            g = np.asarray(g)
            if list(g.shape) != list(spec.shape):
                raise InternalError(f"output {name!r}: XLA gave shape {g.shape}, the Program says {spec.shape}")
            rows = slice(None) if program is source else slice(0, shared)
            err = max_abs_error(e[rows], g[rows])
            scale = value_scale(e[rows])
            if not err <= VERIFY_TOLERANCE * scale:
                # a model that amplifies float rounding (a deep random-init net) is allowed what
                # rounding does to torch's own outputs: no lowering can be closer than that
                moves = moves or rounding_sensitivity(source, source_inputs, expected)
                sensitivity = max(sensitivity, moves[index])
                if not err <= ROUNDING_MARGIN * moves[index] * scale:
                    raise InternalError(
                        f"the exported forward of {program.name!r} differs from Program.run on output {name!r} "
                        f"(max |error| {err:.3g}, over {VERIFY_TOLERANCE:g} of its scale {scale:.3g} and over "
                        f"{ROUNDING_MARGIN} times the {moves[index]:.2g} of it that a 1-ulp change of the inputs moves "
                        f"torch's own output); {_where_it_parts(source, program, export, source_inputs)}"
                    )
            worst = max(worst, err)
    # two significant digits: the value is a measurement, not a bit pattern to pin
    report = {"runtime": "XLA:CPU (jax.export)", "input_batches": len(seeds), "max_abs_error": f"{worst:.1e}"}
    if sensitivity:
        report["float_rounding"] = {
            "input_ulp_sensitivity": f"{sensitivity:.1e}",
            "why": f"over {VERIFY_TOLERANCE:g} of an output's scale, within {ROUNDING_MARGIN} times what a 1-ulp change "
            "of the inputs does to torch's own output: the model amplifies float32 rounding, which XLA and "
            "torch do differently at every op",
        }
    return report


def _where_it_parts(source, program, export, inputs) -> str:
    """Which op the difference starts at, and whether it jumped there (cloud/divergence.py)."""
    from tpuedge.cloud.divergence import where_it_parts

    suspect = "the ATen->JAX lowering of one of its ops is wrong"
    if program is not source:  # a rebound batch: its nodes hold other shapes than torch's
        return suspect
    return where_it_parts(program, export.jax_program, inputs, VERIFY_TOLERANCE) or (
        f"every op is within {VERIFY_TOLERANCE:g} of its scale, so the difference builds up at the outputs"
    )


def write_cloud_artifact(lowered, out_dir: Path) -> CloudArtifact:
    """Export, verify, compile for TPU (when libtpu is here) and write the folder atomically."""
    from tpuedge.cloud import cached_stages
    from tpuedge.cloud.layer_export import layers_blob
    from tpuedge.shared_ir.atomic import atomic_output_dir

    program = lowered.program
    export = lowered.forward_export
    text = lowered.as_text()
    blob, exported = cached_stages.export_blob(program, export)
    with timed("per-layer export (model.layers.jaxexport)"):
        layers, layer_names = layers_blob(program, export)
    with timed("check on XLA:CPU against Program.run"):
        verification = verify_export(lowered, export, exported)
    report, status = cached_stages.tpu_report(lowered, lambda: tpu_report(lowered, export))
    weights = {
        **{n: np.asarray(a) for n, a in export.params.items()},
        **{n: np.asarray(a) for n, a in export.buffers.items()},
    }

    out_dir = Path(out_dir)
    with timed("write the folder"), atomic_output_dir(out_dir) as staging:
        (staging / STABLEHLO_FILE).write_text(text)
        (staging / EXPORT_FILE).write_bytes(blob)
        (staging / LAYERS_FILE).write_bytes(layers)
        write_safetensors(staging / WEIGHTS_FILE, weights, {"format": "pt", "producer": "tpuedge cloud-tpu"})
        manifest = build_manifest(
            "cloud-tpu",
            program,
            staging,
            files=(STABLEHLO_FILE, EXPORT_FILE, LAYERS_FILE, WEIGHTS_FILE),
            tools=("jax", "jaxlib", "libtpu", "optax"),
            batch=lowered.batch_info,
            jax_export={
                "platforms": list(exported.platforms),
                "calling_convention_version": exported.calling_convention_version,
                "calling_convention": _CALLING_CONVENTION,
                "arguments": _arguments_json(export, program, exported),
                "results": [
                    {"name": s.name, "shape": list(a.shape), "dtype": str(a.dtype)}
                    for s, a in zip(program.outputs, exported.out_avals)
                ],
            },
            weights={
                "storage": "arguments (not embedded): model.safetensors",
                "params": sorted(export.params),
                "buffers": sorted(export.buffers),
                "parameter_count": int(sum(np.asarray(a).size for a in export.params.values())),
            },
            layers={
                "file": LAYERS_FILE,
                "calling_convention": "exported.call(params, buffers, *inputs) -> {node: value}, as model.jaxexport",
                "nodes": layer_names,
            },
            verification=verification,
            tpu_compile=status,
        )
        if report is not None:
            (staging / TPU_REPORT_FILE).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        write_build_manifest(staging, manifest)
    from tpuedge.shared_ir.artifact import read_manifest

    return CloudArtifact(out_dir, read_manifest(out_dir))
