"""A model whose forward takes `input` (torchvision's LRASPP, many user models): torch.fx renames
such a node when it copies a graph, and every IR pass and the litert lowering copy one. The
copies failed validation ("Input spec name input does not match node name input_1"), so
`check --target android` raised instead of answering."""

from __future__ import annotations

import numpy as np
import torch

import tpuedge
from tpuedge.shared_ir.passes import copy_program


class _TakesInput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, input, type):  # noqa: A002 - both names shadow builtins on purpose
        return torch.nn.functional.hardswish(self.fc(input)) * type


def _program():
    torch.manual_seed(0)
    return tpuedge.export(_TakesInput().eval(), (torch.zeros(1, 4), torch.ones(1, 3)), name="takes_input")


def test_a_copied_program_keeps_its_input_names_and_validates():
    program = _program()
    copied = copy_program(program.exported_program)
    copied.validate()
    names = [n.name for n in copied.graph.nodes if n.op == "placeholder"]
    assert names[-2:] == ["input", "type"]


def test_every_target_takes_it(tmp_path):
    program = _program()
    assert [s.name for s in program.inputs] == ["input", "type"]
    assert program.check("android") == [] and program.check("mcu") == [] and program.check("cloud-tpu") == []
    artifact = tpuedge.build(program, "android", tmp_path / "a", quantize="none")
    sample = [np.ones((1, 4), np.float32), np.full((1, 3), 2.0, np.float32)]
    np.testing.assert_allclose(artifact.run(*sample)[0], program.run(*sample)[0], rtol=1e-5, atol=1e-6)
    assert [i["name"] for i in artifact.manifest["inputs"]] == ["input", "type"]
