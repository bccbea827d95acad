"""`LiteRTBucketsArtifact`: an android build in buckets, one signature per size of its variable axis.

`run(*inputs)` takes the model's inputs at one of the bucket sizes and runs that signature in
the LiteRT interpreter; inputs at another size are refused with the sizes there are (padding
means something different in every model, so it is the caller's to do)."""

from __future__ import annotations

from functools import cached_property

import numpy as np

from tpuedge.shared_ir.artifact import Artifact
from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.tensors import TensorSpec, validate_inputs

__all__ = ["LiteRTBucketsArtifact"]


class LiteRTBucketsArtifact(Artifact):
    runtime_name = "LiteRT (android, buckets)"
    layer_runtime = None

    @property
    def buckets(self) -> dict:
        return self.manifest["buckets"]

    @cached_property
    def _interpreter(self):
        from ai_edge_litert.interpreter import Interpreter

        from tpuedge.edge.flatbuffer.tflite_file import read_model
        from tpuedge.edge.tool_output import held_tool_output

        path = self.directory / "model.tflite"
        self._tflite = path.read_bytes()
        read_model(self._tflite, path)
        with held_tool_output("LiteRT"):
            return Interpreter(model_content=self._tflite, num_threads=1)

    def entry_for(self, inputs) -> str:
        spec = self.buckets
        names = [s["name"] for s in self.manifest["inputs"]]
        size = np.shape(inputs[names.index(spec["input"])])[spec["axis"]]
        if size not in spec["sizes"]:
            raise UserError(
                f"input {spec['input']!r} has {size} along axis {spec['axis']}, and this model was built for "
                f"{', '.join(map(str, spec['sizes']))}: pad or cut it to one of those."
            )
        return f"{spec['input']}_{size}"

    def run(self, *inputs) -> list[np.ndarray]:
        entry = self.entry_for(inputs)
        interface = self.buckets["entries"][entry]
        arrays = validate_inputs(
            [TensorSpec.from_json(d) for d in interface["inputs"]], inputs, f"{self.directory} ({entry})"
        )
        runner = self._interpreter.get_signature_runner(entry)
        details = runner.get_input_details()
        order = sorted(details, key=lambda k: details[k]["index"])
        out = runner(**{name: a.astype(details[name]["dtype"]) for name, a in zip(order, arrays)})
        names = [s["name"] for s in interface["outputs"]]
        return (
            [np.asarray(out[n]) for n in names]
            if all(n in out for n in names)
            else [np.asarray(v) for v in out.values()]
        )

    def report(self) -> str:
        spec, recipe = self.buckets, self.manifest["recipe"]
        lines = [
            f"{self.manifest['model_name']} -> {self.directory}  (target android, buckets)",
            f"  {spec['input']} axis {spec['axis']}: one signature per size {', '.join(map(str, spec['sizes']))} "
            f"(resized with it: {', '.join(spec['inputs_resized'])})",
            f"  quantize {recipe['scheme']}; size {self.manifest['sizes']['tflite_bytes'] / 2**20:.2f} MiB "
            f"(float {self.manifest['sizes']['float_tflite_bytes'] / 2**20:.2f} MiB)",
        ]
        for row in recipe["tried"]:
            cosines = ", ".join(f"{e} {min(c):.5f}" for e, c in row["cosine_by_entry"].items())
            lines.append(
                f"    {row['scheme']:<13} {'meets' if row['passed'] else 'misses'} the budget: cosine {cosines}"
            )
        return "\n".join(lines)
