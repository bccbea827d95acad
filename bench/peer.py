"""The peer every bench compares against: `litert_torch.convert` straight from the module, then
ai-edge-quantizer's own recipes (dynamic-range, or static int8 with float I/O calibrated on the
same samples tpuedge gets). One copy, used by bench/edge_vs_peer.py and bench/zoo.py."""

from __future__ import annotations

import numpy as np

__all__ = ["peer_convert"]


def peer_convert(module, example, scheme: str, calibration) -> bytes:
    """litert_torch.convert straight from the module, then ai-edge-quantizer's own recipes."""
    import litert_torch
    from ai_edge_quantizer import quantizer, recipe

    float_bytes = bytes(litert_torch.convert(module.eval(), example).model_content())
    if scheme == "none":
        return float_bytes
    if scheme == "dynamic-int8":  # (for "auto" the peer has no search: its static int8 below)
        q = quantizer.Quantizer(bytearray(float_bytes), recipe.dynamic_wi8_afp32())
        return bytes(q.quantize(enable_progress_bar=False, enable_progress_report=False).quantized_model)
    from ai_edge_litert.interpreter import Interpreter
    from ai_edge_quantizer import recipe_manager
    from ai_edge_quantizer.algorithm_manager import AlgorithmName

    rm = recipe_manager.RecipeManager()
    rm.add_static_config(".*", "*", activation_num_bits=8, weight_num_bits=8)
    rm.add_quantization_config(".*", "INPUT", algorithm_key=AlgorithmName.NO_QUANTIZE)
    rm.add_quantization_config(".*", "OUTPUT", algorithm_key=AlgorithmName.NO_QUANTIZE)
    q = quantizer.Quantizer(bytearray(float_bytes), rm.get_quantization_recipe())
    sig = Interpreter(model_content=float_bytes).get_signature_list()
    key = next(iter(sig))
    names = sig[key]["inputs"]
    feed = [dict(zip(names, [np.asarray(a, np.int32) if a.dtype == np.int64 else a for a in s])) for s in calibration]
    stats = q.calibrate({key: feed}, num_threads=1)
    return bytes(q.quantize(stats, enable_progress_bar=False, enable_progress_report=False).quantized_model)
