"""The cloud-tpu build folder and the artifact that runs it on XLA:CPU.

    model.stablehlo.mlir   StableHLO text of the forward (single device, weights as arguments)
    model.jaxexport        jax.export blob for platforms cpu and tpu: forward(params, buffers, *inputs)
    model.safetensors      the weights those arguments take (torch state-dict names)
    model.layers.jaxexport layers(params, buffers, *inputs) -> {IR node: value}: the intermediates
                           per-layer verify compares (see layer_export.py)
    manifest.json          fingerprint, shapes, dtypes, calling convention, versions (deterministic)
    tpu_compile.json       the deviceless XLA:TPU compile report (only with libtpu); it holds
                           compile wall times, so it is the one file that differs between rebuilds

The safetensors file is written by `write_safetensors` below (the format is an 8-byte header
length, a JSON header, raw little-endian data): sorted names, no timestamps, byte-identical for
the same weights, readable by the `safetensors` package.
"""

from __future__ import annotations

import json
import struct
import sys
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from tpuedge.cloud.layer_export import LAYERS_FILE
from tpuedge.cloud.stablehlo_export import argument_names, max_abs_error
from tpuedge.shared_ir.artifact import Artifact, file_entry, tool_versions, write_manifest
from tpuedge.shared_ir.errors import InternalError, UserError
from tpuedge.shared_ir.tensors import TensorSpec, to_numpy, validate_inputs

__all__ = [
    "CloudArtifact",
    "write_cloud_artifact",
    "write_safetensors",
    "read_safetensors",
    "STABLEHLO_FILE",
    "EXPORT_FILE",
    "WEIGHTS_FILE",
    "TPU_REPORT_FILE",
    "LAYERS_FILE",
]

STABLEHLO_FILE = "model.stablehlo.mlir"
EXPORT_FILE = "model.jaxexport"
WEIGHTS_FILE = "model.safetensors"
TPU_REPORT_FILE = "tpu_compile.json"
VERIFY_TOLERANCE = 1e-4  # max |XLA:CPU - Program.run| relative to the output scale
_CALLING_CONVENTION = (
    "exported.call(params, buffers, *inputs) -> tuple(outputs); params and buffers are dicts of the "
    "model.safetensors tensors listed under weights.params / weights.buffers"
)

# ---- safetensors -----------------------------------------------------------------------------

_ST_DTYPES = {
    "float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64", "int64": "I64", "int32": "I32",
    "int16": "I16", "int8": "I8", "uint8": "U8", "uint32": "U32", "bool": "BOOL",
}
_ST_NUMPY = {v: k for k, v in _ST_DTYPES.items()}


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    header: dict[str, Any] = {}
    offset, blobs = 0, []
    for name in sorted(tensors):
        array = np.asarray(tensors[name], order="C")  # (ascontiguousarray would make a 0-d tensor 1-d)
        kind = _ST_DTYPES.get(array.dtype.name)
        if kind is None:
            raise InternalError(f"weight {name!r} has dtype {array.dtype}, which the weights file can't hold")
        data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": kind, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)  # the reference writer pads the header to 8 bytes
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    raw = Path(path).read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    body = memoryview(raw)[8 + size :]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype_name = _ST_NUMPY[entry["dtype"]]
        if dtype_name == "bfloat16":
            import ml_dtypes

            dtype = np.dtype(ml_dtypes.bfloat16)
        else:
            dtype = np.dtype(dtype_name).newbyteorder("<")
        start, end = entry["data_offsets"]
        tensors[name] = np.frombuffer(body[start:end], dtype=dtype).reshape(entry["shape"])
    return tensors


# ---- the artifact ----------------------------------------------------------------------------


class CloudArtifact(Artifact):
    """A cloud-tpu build folder; `run` executes model.jaxexport with XLA on the host CPU."""

    @cached_property
    def exported(self):
        from tpuedge.cloud.tpu_compile import initialize_jax_quietly

        initialize_jax_quietly()
        import jax

        return jax.export.deserialize(bytearray((self.directory / EXPORT_FILE).read_bytes()))

    @cached_property
    def weights(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(params, buffers) as jax arrays on the CPU, named as in the torch state dict."""
        import jax

        tensors = read_safetensors(self.directory / WEIGHTS_FILE)
        cpu = jax.devices("cpu")[0]
        groups = self.manifest["weights"]
        missing = sorted((set(groups["params"]) | set(groups["buffers"])) - set(tensors))
        if missing:
            raise UserError(
                f"{self.directory / WEIGHTS_FILE} lacks {', '.join(missing[:5])}: the folder was modified after "
                "the build; rebuild it with `tpuedge build --target cloud-tpu`."
            )
        params = {n: jax.device_put(tensors[n], cpu) for n in groups["params"]}
        buffers = {n: jax.device_put(tensors[n], cpu) for n in groups["buffers"]}
        return params, buffers

    @cached_property
    def _call(self):
        import jax

        return jax.jit(self.exported.call)

    @property
    def tpu_compile(self) -> dict | None:
        """The deviceless TPU compile report, or None if the build had no libtpu."""
        path = self.directory / TPU_REPORT_FILE
        return json.loads(path.read_text()) if path.is_file() else None

    def _arguments(self, inputs: tuple) -> list:
        import jax

        arrays = validate_inputs(self.inputs, inputs, f"cloud-tpu artifact {self.directory}")
        cpu = jax.devices("cpu")[0]
        avals = self.exported.in_avals[-len(arrays) :] if arrays else ()
        return [jax.device_put(np.asarray(a, dtype=aval.dtype), cpu) for a, aval in zip(arrays, avals)]

    def run(self, *inputs: Any) -> list[np.ndarray]:
        """Float in, float out: the exported forward on XLA:CPU with the folder's weights."""
        import jax

        args = self._arguments(inputs)
        params, buffers = self.weights
        with jax.default_device(jax.devices("cpu")[0]):
            outputs = self._call(params, buffers, *args)
        return [
            to_numpy(np.asarray(o)).astype(spec.dtype, copy=False) for o, spec in zip(outputs, self.outputs)
        ]

    @cached_property
    def _layers_call(self):
        import jax

        path = self.directory / LAYERS_FILE
        if not path.is_file():
            raise UserError(
                f"{self.directory} has no {LAYERS_FILE} (built by an older tpuedge), so its layers can't be read "
                "from the artifact; rebuild it with `tpuedge build --target cloud-tpu` for --per-layer."
            )
        self.exported  # jax initialised quietly first
        return jax.jit(jax.export.deserialize(bytearray(path.read_bytes())).call)

    def layer_values(self, *inputs: Any) -> dict[str, np.ndarray]:
        """{IR node name: value} of every layer, from model.layers.jaxexport on XLA:CPU with the
        folder's weights (model.safetensors): the intermediates of what ships."""
        import jax

        args = self._arguments(inputs)
        params, buffers = self.weights
        with jax.default_device(jax.devices("cpu")[0]):
            values = self._layers_call(params, buffers, *args)
        return {name: to_numpy(np.asarray(v)) for name, v in values.items()}

    def report(self) -> str:
        m = self.manifest
        lines = [f"cloud-tpu artifact {self.directory} ({m['model_name']}, IR {self.fingerprint[:12]})"]
        for name, entry in sorted(m["files"].items()):
            lines.append(f"  {name:<24} {entry['bytes']:>12,} bytes")
        lines.append("  inputs:  " + ", ".join(s.describe() for s in self.inputs))
        lines.append("  outputs: " + ", ".join(s.describe() for s in self.outputs))
        v = m["verification"]
        lines.append(
            f"  XLA:CPU vs Program.run: max |error| {v['max_abs_error']} over {v['input_batches']} input batches"
            f"; weights are {m['weights']['storage']}"
        )
        tpu = self.tpu_compile
        if tpu is None:
            lines.append(f"  TPU compile: {m['tpu_compile']['status']}")
            return "\n".join(lines)
        lines.append(
            f"  TPU compile for {tpu['topology']} ({tpu['chips']} x {tpu['device_kind']}, libtpu {tpu['libtpu']}):"
        )
        for name, r in tpu["programs"].items():
            hbm = r["hbm_per_device"]
            ways = next(iter(r["mesh"].values()))
            lines.append(
                f"    {name:<10} on {ways} device(s): compile {r['compile_seconds']:.2f} s, HBM {hbm['total_bytes'] / 2**20:.2f} MiB/device "
                f"({100 * hbm['fraction_of_device_hbm']:.3f}%), {r['flops_per_device']:.3g} FLOP/device, "
                f"{r['collectives']['total']} collective(s), est. step {r['estimated_step_seconds'] * 1e6:.2f} us "
                f"({r['estimate_bound']}-bound at published peak)"
            )
            if r.get("note"):
                lines.append(f"      note: {r['note']}")
        return "\n".join(lines)


def _specs_json(specs: list[TensorSpec]) -> list[dict]:
    return [s.to_json() for s in specs]


def _arguments_json(export, program, exported) -> list[dict]:
    names = argument_names(export, program.input_names)
    if len(names) != len(exported.in_avals):
        raise InternalError(f"exported forward takes {len(exported.in_avals)} arguments, expected {len(names)}")
    return [{"name": n, "shape": list(a.shape), "dtype": str(a.dtype)} for n, a in zip(names, exported.in_avals)]


def _verify(lowered, export, exported) -> dict:
    """Run the exported blob on XLA:CPU against Program.run of the program the user gave, sample by
    sample (for a rebound batch: the leading samples both batches share). Torch never runs the
    rebound graph: see stablehlo_export._run_in_jax for why."""
    import jax

    from tpuedge.cloud.stablehlo_export import per_sample_inputs

    source, program = lowered.source_program, lowered.program
    cpu = jax.devices("cpu")[0]
    call = jax.jit(exported.call)
    worst, seeds = 0.0, (0, 1)
    for seed in seeds:
        source_inputs, inputs, shared = per_sample_inputs(source, program, seed)
        expected = source.run(*source_inputs)
        args = [jax.device_put(np.asarray(a, dtype=aval.dtype), cpu) for a, aval in zip(inputs, export.input_avals)]
        with jax.default_device(cpu):
            got = call(export.params, export.buffers, *args)
        for name, e, g, spec in zip(program.output_names, expected, got, program.outputs):
            g = np.asarray(g)
            if list(g.shape) != list(spec.shape):
                raise InternalError(f"output {name!r}: XLA gave shape {g.shape}, the Program says {spec.shape}")
            rows = slice(None) if program is source else slice(0, shared)
            err = max_abs_error(e[rows], g[rows])
            scale = max(1.0, float(np.max(np.abs(e[rows]), initial=0.0)))
            if not err <= VERIFY_TOLERANCE * scale:
                raise InternalError(
                    f"the exported forward of {program.name!r} differs from Program.run on output {name!r} "
                    f"(max |error| {err:.3g}); the ATen->JAX lowering of one of its ops is wrong"
                )
            worst = max(worst, err)
    # two significant digits: the value is a measurement, not a bit pattern to pin
    return {"runtime": "XLA:CPU (jax.export)", "input_batches": len(seeds), "max_abs_error": f"{worst:.1e}"}


def write_cloud_artifact(lowered, out_dir: Path) -> CloudArtifact:
    """Export, verify, compile for TPU (when libtpu is here) and write the folder atomically."""
    from tpuedge.cloud import cached_stages
    from tpuedge.cloud.layer_export import layers_blob
    from tpuedge.shared_ir.atomic import atomic_output_dir

    program = lowered.program
    export = lowered.forward_export
    text = lowered.as_text()
    blob, exported = cached_stages.export_blob(program, export)
    layers, layer_names = layers_blob(program, export)
    verification = _verify(lowered, export, exported)
    report, status = cached_stages.tpu_report(lowered, lambda: _tpu_report(lowered, export))
    weights = {**{n: np.asarray(a) for n, a in export.params.items()}, **{n: np.asarray(a) for n, a in export.buffers.items()}}

    out_dir = Path(out_dir)
    with atomic_output_dir(out_dir) as staging:
        (staging / STABLEHLO_FILE).write_text(text)
        (staging / EXPORT_FILE).write_bytes(blob)
        (staging / LAYERS_FILE).write_bytes(layers)
        write_safetensors(staging / WEIGHTS_FILE, weights, {"format": "pt", "producer": "tpuedge cloud-tpu"})
        files = {name: file_entry(staging / name) for name in (STABLEHLO_FILE, EXPORT_FILE, LAYERS_FILE, WEIGHTS_FILE)}
        manifest = {
            "target": "cloud-tpu",
            "ir_fingerprint": program.fingerprint,
            "model_name": program.name,
            "inputs": _specs_json(program.inputs),
            "outputs": _specs_json(program.outputs),
            "files": files,
            "tool_versions": tool_versions("jax", "jaxlib", "libtpu", "optax"),
            "batch": lowered.batch_info,
            "jax_export": {
                "platforms": list(exported.platforms),
                "calling_convention_version": exported.calling_convention_version,
                "calling_convention": _CALLING_CONVENTION,
                "arguments": _arguments_json(export, program, exported),
                "results": [
                    {"name": s.name, "shape": list(a.shape), "dtype": str(a.dtype)}
                    for s, a in zip(program.outputs, exported.out_avals)
                ],
            },
            "weights": {
                "storage": "arguments (not embedded): model.safetensors",
                "params": sorted(export.params),
                "buffers": sorted(export.buffers),
                "parameter_count": int(sum(np.asarray(a).size for a in export.params.values())),
            },
            "layers": {
                "file": LAYERS_FILE,
                "calling_convention": "exported.call(params, buffers, *inputs) -> {node: value}, as model.jaxexport",
                "nodes": layer_names,
            },
            "verification": verification,
            "tpu_compile": status,
        }
        if report is not None:
            (staging / TPU_REPORT_FILE).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        write_manifest(staging, manifest)
    from tpuedge.shared_ir.artifact import read_manifest

    return CloudArtifact(out_dir, read_manifest(out_dir))


def _tpu_report(lowered, export) -> tuple[dict | None, dict]:
    """(tpu_compile.json content or None, the deterministic summary for the manifest)."""
    from tpuedge.cloud import tpu_compile

    choice = lowered.topology
    status = {"topology": choice.name, "train_step": lowered.train_step}
    if lowered.train_step:
        status.update(loss=lowered.loss, sharding=lowered.sharding)
    reason = tpu_compile.libtpu_unavailable_reason()
    if reason:
        print(f"tpuedge: no TPU compile for {choice.name} ({reason}); the portable artifacts are still written.", file=sys.stderr)
        return None, {**status, "status": f"skipped: {reason}"}
    target = tpu_compile.CompileTarget(choice)
    batch = lowered.batch_info["size"]
    programs = {"forward": tpu_compile.compile_forward(target, export, batch)}
    if lowered.train_step:
        programs["train_step"] = tpu_compile.compile_train_step(
            target, lowered.program, batch, lowered.loss, lowered.sharding
        )
    report = {
        **target.describe(),
        "programs": programs,
        "notes": (
            "Per-device figures of the SPMD-partitioned executables, from the real XLA:TPU compiler run "
            "without a TPU. estimated_step_seconds = max(FLOPs / per-device share of the chip's published "
            "bf16 peak, bytes accessed / its HBM bandwidth): a lower bound that assumes peak utilisation "
            "(float32 matmuls run on the MXU in bf16 passes at default precision). lower_seconds and "
            "compile_seconds are wall times of this build: this file is the one in the folder that "
            "changes between rebuilds."
        ),
    }
    return report, {**status, "status": "compiled", "report": TPU_REPORT_FILE}
