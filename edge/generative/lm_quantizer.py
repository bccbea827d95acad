"""An LM scheme (quantize/lm_schemes.py) on a decoder's float .tflite, by ai-edge-quantizer.

    quantizer = DecoderQuantizer(bundle, float_tflite)
    data = quantizer.quantize(LM_SCHEMES["int4-block32"])

The scheme's per-parameter overrides are keyed by IR parameter (state-dict name). They reach
the ops that read that weight: each parameter is found in the float model by its bytes (a
Linear's weight and an embedding table are written as they are), and the quantizer is given
those ops' scopes. A tied table (the embedding lookup and the LM head read one buffer) gets one
precision for both readers, so it stays one buffer.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict

import numpy as np

from tpuedge.edge.tool_output import held_tool_output
from tpuedge.quantize.lm_schemes import LMScheme
from tpuedge.shared_ir.generative.decoder import DECODE
from tpuedge.shared_ir.errors import InternalError, UserError

__all__ = ["DecoderQuantizer"]

_FC, _EMBEDDING = "FULLY_CONNECTED", "EMBEDDING_LOOKUP"


class DecoderQuantizer:
    def __init__(self, bundle, float_tflite: bytes):
        self.float_tflite = float_tflite
        self.readers = _parameter_readers(bundle, float_tflite)  # parameter -> [(op name, op kind)]
        state = bundle.entries[DECODE].exported_program.state_dict
        self.widths = {p: (int(state[p].shape[1]), int(state[p].shape[0])) for p in self.readers}  # (in, out)
        self.tied = {p for p, ops in self.readers.items() if {kind for _, kind in ops} == {_FC, _EMBEDDING}}

    def quantize(self, scheme: LMScheme) -> bytes:
        """The scheme's model; NotACandidate where the model's shapes don't take it."""
        if not scheme.quantized:
            return self.float_tflite
        refusal = self.refusal(scheme)
        if refusal:
            from tpuedge.quantize.lm_search import NotACandidate

            raise NotACandidate(refusal)
        from ai_edge_quantizer import quantizer

        from tpuedge.edge.flatbuffer.tflite_file import compact_model

        with held_tool_output("ai-edge-quantizer"):
            q = quantizer.Quantizer(bytearray(self.float_tflite), self._recipe(scheme))
            data = bytes(q.quantize(enable_progress_bar=False, enable_progress_report=False).quantized_model)
        # the quantizer writes each signature's copy of a weight's scales (12 bytes an output
        # channel: 5 MB over SmolLM2's three signatures); equal tables are written once
        return compact_model(data)

    def refusal(self, scheme: LMScheme) -> str | None:
        """Why `scheme` can't quantize this model, or None: an int4 block must divide the input
        width of every matrix it quantizes (ai-edge-quantizer stops on the first that it does not)."""
        if scheme.block_size is None:
            return None
        widths = sorted({width for width, _ in self.widths.values() if width % scheme.block_size})
        if widths:
            return (
                f"its matrices' input widths {', '.join(map(str, widths))} are not multiples of the int4 block "
                f"size {scheme.block_size}; use a block size that divides them (int4-block32)"
            )
        return None

    def _recipe(self, scheme: LMScheme):
        from ai_edge_quantizer.qtyping import TFLOperationName
        from ai_edge_quantizer.recipe_manager import RecipeManager

        manager = RecipeManager()
        ops = {_FC: TFLOperationName.FULLY_CONNECTED, _EMBEDDING: TFLOperationName.EMBEDDING_LOOKUP}
        embedding_bits = scheme.embedding_bits or scheme.weight_bits

        def add(regex: str, kind: str, bits: int, blockwise: bool) -> None:
            granularity = _granularity(scheme.block_size if blockwise and bits == 4 else None)
            # int4 blocks need the dynamic kernels: ai-edge-quantizer has no weight-only blockwise recipe
            dynamic = scheme.activations == "dynamic" or granularity.name.startswith("BLOCKWISE")
            (manager.add_dynamic_config if dynamic else manager.add_weight_only_config)(
                regex, ops[kind], num_bits=bits, granularity=granularity
            )

        # later entries win: every matrix, then the embedding table, then tied tables and overrides by op
        add(".*", _FC, scheme.weight_bits, True)
        add(".*", _EMBEDDING, embedding_bits, embedding_bits == scheme.weight_bits)
        by_op: dict[tuple[str, str], int] = {}  # a tied table's two names reach the same ops: one entry each
        for parameter, bits in self._per_parameter_bits(scheme, embedding_bits).items():
            for reader in self.readers[parameter]:
                by_op[reader] = max(bits, by_op.get(reader, 0))
        for (op_name, kind), bits in sorted(by_op.items()):
            add(_scope_regex(op_name), kind, bits, bits == scheme.weight_bits)
        return manager.get_quantization_recipe()

    def _per_parameter_bits(self, scheme: LMScheme, embedding_bits: int) -> dict[str, int]:
        bits = {p: embedding_bits for p in self.tied}  # the LM head reads the table at the table's precision
        for parameter, override in scheme.overrides.items():
            if parameter not in self.readers:
                continue  # not a weight of the lowered model in its captured layout: keeps the scheme's
            bits[parameter] = max(override, bits.get(parameter, 0)) if parameter in self.tied else override
        return bits

    def recipe_notes(self, scheme: LMScheme) -> dict:
        if not scheme.quantized:
            return {}
        unreached = sorted(p for p in scheme.overrides if p not in self.readers)
        return {"tied_tables": sorted(self.tied), **({"overrides_not_found": unreached} if unreached else {})}


def _granularity(block_size: int | None):
    from ai_edge_quantizer.qtyping import QuantGranularity

    if block_size is None:
        return QuantGranularity.CHANNELWISE
    try:
        return getattr(QuantGranularity, f"BLOCKWISE_{block_size}")
    except AttributeError:
        raise UserError(f"ai-edge-quantizer has no int4 block size {block_size}; use 32 or 128.") from None


def _scope_regex(op_name: str) -> str:
    """ai-edge-quantizer's scope of a one-output op is its output tensor's name and a ';'."""
    return "^" + re.escape(op_name) + ";$"


def _parameter_readers(bundle, float_tflite: bytes) -> dict[str, list[tuple[str, str]]]:
    """IR parameter (state-dict name) -> the FULLY_CONNECTED / EMBEDDING_LOOKUP ops reading its
    buffer, in any signature, as (output tensor name, op kind): matched by the buffer's bytes."""
    from tpuedge.edge.flatbuffer import tflite_file

    model = tflite_file.read_model(float_tflite)
    kinds = dict(enumerate(tflite_file.operator_names(model)))
    by_digest: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for subgraph in model.subgraphs:
        for op in subgraph.operators:
            kind = kinds[op.opcodeIndex]
            if kind not in (_FC, _EMBEDDING):
                continue
            weight = subgraph.tensors[op.inputs[1]]  # FULLY_CONNECTED (x, weights, ...), EMBEDDING_LOOKUP (ids, table)
            data = tflite_file.constant_array(float_tflite, model, weight)
            if data is None or data.dtype != np.float32:
                continue
            name = tflite_file.text(subgraph.tensors[op.outputs[0]].name)
            entry = (name, kind)
            digest = _digest(data)
            if entry not in by_digest[digest]:
                by_digest[digest].append(entry)
    state = bundle.entries[DECODE].exported_program.state_dict
    readers = {}
    for parameter, tensor in state.items():
        if tensor.dim() != 2 or not tensor.is_floating_point():
            continue
        found = by_digest.get(_digest(tensor.detach().contiguous().numpy()))
        if found:
            readers[parameter] = found
    if not readers:
        raise InternalError(f"no weight of {bundle.name} was found in its float .tflite by its bytes")
    return readers


def _digest(array: np.ndarray) -> str:
    """By value, flat (the file's constants are read flat)."""
    array = np.ascontiguousarray(array, np.float32).reshape(-1)
    return hashlib.sha256(f"{array.size};".encode() + memoryview(array).cast("B")).hexdigest()
