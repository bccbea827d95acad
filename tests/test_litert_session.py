"""litert-torch flips JAX's x64 mode on import; edge builds must leave the user's mode as it was,
so the cloud backend gives the same artifacts whether or not an edge build ran first."""

from __future__ import annotations

import jax
import pytest

import tpuedge
from models import build_mlp
from tpuedge.edge.convert import program_to_tflite
from tpuedge.quantize import QuantConfig


@pytest.mark.parametrize("user_mode", [False, True])
def test_edge_lowering_keeps_the_users_x64_mode(user_mode):
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", user_mode)
    try:
        program = tpuedge.export(*build_mlp())
        program.check("android")
        converted = program_to_tflite(program, QuantConfig(scheme="none"), None)
        assert len(converted.tflite) > 1000
        assert jax.config.jax_enable_x64 is user_mode
    finally:
        jax.config.update("jax_enable_x64", before)
