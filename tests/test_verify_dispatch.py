"""verify names no target: the artifact says how its runtime is labelled and read per layer,
so an artifact of a new target (a plugin) is verified without an edit to tpuedge.verify."""

from __future__ import annotations

import pytest

from tpuedge.shared_ir.errors import UserError
from tpuedge.verify.per_layer import _source_for, runtime_label


class _PluginArtifact:
    target = "toy-npu"
    manifest: dict = {}
    directory = "."


def test_runtime_label_comes_from_the_artifact():
    labelled = type("Labelled", (_PluginArtifact,), {"runtime_name": "ToyRT (toy-npu)"})()
    assert runtime_label(labelled) == "ToyRT (toy-npu)"
    assert runtime_label(_PluginArtifact()) == "toy-npu"


def test_an_artifact_without_layer_numerics_is_a_user_error_naming_it():
    with pytest.raises(UserError, match=r"'toy-npu' artifacts.*LiteRT, TFLite-Micro or XLA.*drop --per-layer"):
        _source_for(_PluginArtifact(), program=None, layers={})


def test_built_in_artifacts_declare_how_they_are_read():
    from tpuedge.cloud.artifact import CloudArtifact
    from tpuedge.edge.android.artifact import LiteRTArtifact
    from tpuedge.edge.mcu.mcu_artifact import McuArtifact

    assert (LiteRTArtifact.layer_runtime, McuArtifact.layer_runtime, CloudArtifact.layer_runtime) == (
        "litert",
        "tflite-micro",
        "xla",
    )
