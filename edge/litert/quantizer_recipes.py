"""QuantConfig -> ai-edge-quantizer recipes on the float .tflite, and the sensitive op groups
of a float .tflite (found from its ops and the module scopes its tensor names hold,
edge/flatbuffer/tensor_names.py: "blocks.0.ln1/LayerNorm;3").
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections import OrderedDict

import numpy as np

from tpuedge.edge.tool_output import held_tool_output, tail
from tpuedge.quantize.config import QuantConfig
from tpuedge.quantize.recipes import SensitiveGroup
from tpuedge.shared_ir.errors import InternalError

__all__ = [
    "find_sensitive_groups",
    "ranked_groups",
    "every_op_types",
    "every_op_group",
    "weight_groups",
    "EVERY_OP",
    "quantizer_recipe",
    "run_quantizer",
    "GroupScopes",
    "QuantizerError",
]

# group key -> the ops' scopes (as ai-edge-quantizer computes them) and their op names
GroupScopes = dict[str, list[tuple[str, str]]]

_NORM_MODULES = re.compile(r"(LayerNorm|RMSNorm|GroupNorm)_?([^/;]*)$")
_RECURRENT_MODULES = re.compile(r"(LSTM|GRU|RNN)_?([^/;]*)$")
# ops with weights: a normalization never lowers to one. The converter can name a layer's
# output after the norm before it (MiniLM's query/key/value projections read
# "embeddings.LayerNorm/LayerNorm;encoder.layer.0.attention.self.query/Linear"): grouped with
# the norm, they went float with it.
_WEIGHTED_OPS = frozenset({"FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "CONV_3D"})


def _module_path(scope: str) -> str:
    """The module an op belongs to: the first module scope of its output's name ("blocks.0.ln1/LayerNorm",
    the module's qualified name and class), up to the ';' before the next."""
    return scope.split(";", 1)[0]


def find_sensitive_groups(float_tflite: bytes) -> tuple[list[SensitiveGroup], GroupScopes]:
    """Sensitive groups (LayerNorm, softmax, GELU, attention matmul, recurrent state, a fused
    sequence LSTM, division by a computed tensor) in graph order."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as tfl  # its scopes are what its recipes match

    from tpuedge.edge.flatbuffer import tflite_file

    model = tflite_file.read_model(float_tflite)
    subgraph = model.subgraphs[0]
    op_names = tflite_file.operator_names(model)
    constant = {i for i, t in enumerate(subgraph.tensors) if tflite_file.is_constant(model, t)}
    groups: "OrderedDict[str, tuple[str, list[tuple[str, str]]]]" = OrderedDict()

    def add(key: str, kind: str, scope: str, op: str) -> None:
        groups.setdefault(key, (kind, []))[1].append((scope, op))

    # the module paths of fused sequence LSTMs (edge/litert/sequence_lstm.py): they and the ops around
    # them (the clearing step's PAD and CONCATENATION, the SLICE after) compute in float
    fused = {
        _module_path(tfl.get_op_scope(op, subgraph.tensors))
        for op in subgraph.operators or []
        if op_names[op.opcodeIndex] == "UNIDIRECTIONAL_SEQUENCE_LSTM"
    }
    for index, op in enumerate(subgraph.operators or []):
        name = op_names[op.opcodeIndex]
        scope = tfl.get_op_scope(op, subgraph.tensors)
        path = _module_path(scope)
        module = path.rsplit("/", 1)[-1]
        norm, recurrent = _NORM_MODULES.search(module), _RECURRENT_MODULES.search(module)
        if path in fused:
            add(f"fused_recurrent:{path}", "fused_recurrent", scope, name)
        elif recurrent and "/" in path:
            add(f"recurrent_state:{path}", "recurrent_state", scope, name)
        elif norm and "/" in path and name not in _WEIGHTED_OPS:
            add(f"layer_norm:{path}", "layer_norm", scope, name)
        elif name == "RSQRT":
            add(f"layer_norm:op{index}", "layer_norm", scope, name)
        elif name == "SOFTMAX":
            add(f"softmax:op{index}", "softmax", scope, name)
        elif name == "GELU":
            add(f"gelu:op{index}", "gelu", scope, name)
        elif name == "BATCH_MATMUL" and not any(i in constant for i in op.inputs):
            add(f"attention_matmul:op{index}", "attention_matmul", scope, name)
        elif name == "DIV" and op.inputs[1] not in constant:  # int8 stops at a divisor on its zero point
            add(f"division:op{index}", "division", scope, name)
    result = [
        SensitiveGroup(key, kind, tuple(f"{op} {_module_path(s)}" for s, op in members))
        for key, (kind, members) in groups.items()
    ]
    return result, {key: members for key, (_, members) in groups.items()}


def ranked_groups(float_tflite: bytes, ranking, *, limit: int = 24, floor: float = 2e-4):
    """Groups for the IR points `ranking` (quantize/sensitivity.py, most sensitive first) puts
    above `floor` loss (and 1% of the first's). A point's group is the flatbuffer ops of its own
    module scope (litert-torch writes the module path into tensor names) and the ops that read
    their outputs: a 16-bit tensor only helps if the ops reading it take 16 bits too (an int8
    op requantizes its input to int8). An op already in a higher-ranked group is not repeated
    (upgrades go in rank order); one in a kind-based group may be (its later recipe entry wins)."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as tfl

    from tpuedge.edge.flatbuffer import tflite_file

    model = tflite_file.read_model(float_tflite)
    subgraph = model.subgraphs[0]
    op_names = tflite_file.operator_names(model)
    ops = [(tfl.get_op_scope(op, subgraph.tensors), op_names[op.opcodeIndex], op) for op in subgraph.operators or []]
    readers: dict[int, list[int]] = {}
    for i, (_, _, op) in enumerate(ops):
        for t in op.inputs if op.inputs is not None else ():
            readers.setdefault(int(t), []).append(i)
    by_module: dict[str, list[int]] = {}
    for i, (scope, _, _) in enumerate(ops):
        by_module.setdefault(_module_path(scope), []).append(i)
    # an op that writes a model output and reads a ranked point's value becomes a float island
    # instead (kind "ranked_output"): 16-bit there would leave the model's output 16-bit, since
    # ai-edge-quantizer keeps float I/O for 8-bit tensors only, and 8-bit would undo the upgrade
    outputs = {int(t) for t in subgraph.outputs}
    writes_output = {i for i, (_, _, op) in enumerate(ops) if outputs & {int(t) for t in op.outputs}}

    def value_readers(i: int) -> list[int]:
        """The ops reading op i's outputs, and through a reshape the ops reading that: the converter
        puts a RESHAPE in front of a decomposed LayerNorm, and an int16 RESHAPE alone hands an int8
        MEAN a requantized copy (the upgrade then changed nothing: an outlier-channel Linear's
        int16 scored as all-int8 did)."""
        found = []
        for t in ops[i][2].outputs:
            for r in readers.get(int(t), []):
                found += [r, *value_readers(r)] if ops[r][1] in _SHAPE_OPS else [r]
        return found

    taken: set[str] = set()
    worst = ranking[0].loss if ranking else 0.0
    groups, scopes = [], {}
    for point in ranking:
        if sum(g.kind == "ranked" for g in groups) >= limit or point.loss < max(floor, 0.01 * worst):
            break
        producers = by_module.get(point.scope, []) if point.scope else []
        members: dict[bool, list[tuple[str, str]]] = {False: [], True: []}
        for i in producers + [r for p in producers for r in value_readers(p)]:
            scope, name, _ = ops[i]
            if scope not in taken:
                taken.add(scope)
                members[i in writes_output].append((scope, name))
        for at_output, kind, key in (
            (False, "ranked", f"ranked:{point.node}"),
            (True, "ranked_output", f"ranked:{point.node}:output"),
        ):
            if members[at_output]:
                groups.append(
                    SensitiveGroup(key, kind, tuple(f"{op} {_module_path(s)}" for s, op in members[at_output]))
                )
                scopes[key] = members[at_output]
    return groups, scopes


def weight_groups(float_tflite: bytes, ranking, elements_cap: int) -> tuple[list[SensitiveGroup], GroupScopes]:
    """Groups for the IR weight tensors `ranking` (quantize/weight_sensitivity.py, costliest
    first): each the flatbuffer ops reading that tensor, found by value (the float converter
    copies a weight's values, in its own layout: the same sorted values), else among its
    module's ops one reading a constant of as many elements (the converter stores some weights
    changed: 27 of MiniLM-L6's 40 2-D tensors, its query/key/value and FFN-up weights among
    them; an op writing a model output is named for the output, so only its value finds it).
    Groups are added while their weights' elements stay within `elements_cap` (float32 costs 3
    bytes an element more than int8); a weight whose ops are taken or not found is skipped."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as tfl

    from tpuedge.edge.flatbuffer import tflite_file

    model = tflite_file.read_model(float_tflite)
    subgraph = model.subgraphs[0]
    op_names = tflite_file.operator_names(model)
    ops = [(tfl.get_op_scope(op, subgraph.tensors), op_names[op.opcodeIndex], op) for op in subgraph.operators or []]
    readers_by_size: dict[int, dict[int, list[int]]] = {}  # elements -> float constant tensor -> ops reading it
    for i, (_, _, op) in enumerate(ops):
        for t in op.inputs if op.inputs is not None else ():
            tensor = subgraph.tensors[int(t)] if int(t) >= 0 else None
            if tensor is not None and tensor.type == 0 and tflite_file.is_constant(model, tensor):  # FLOAT32
                size = int(np.prod(tensor.shape, dtype=np.int64)) if tensor.shape is not None else 0
                readers_by_size.setdefault(size, {}).setdefault(int(t), []).append(i)

    @functools.lru_cache(maxsize=None)
    def values_key(t: int) -> bytes:
        values = tflite_file.constant_array(float_tflite, model, subgraph.tensors[t])
        return hashlib.sha256(np.sort(values.astype(np.float32))).digest()

    taken: set[int] = set()
    groups, scopes, elements = [], {}, 0
    for weight in ranking:
        if elements + weight.elements > elements_cap:
            continue
        candidates = readers_by_size.get(weight.elements, {})
        key = hashlib.sha256(np.sort(weight.values.astype(np.float32).ravel())).digest()
        found = [i for t, readers in candidates.items() if values_key(t) == key for i in readers]
        if not found and weight.scope:
            found = [i for readers in candidates.values() for i in readers if _module_path(ops[i][0]) == weight.scope]
        found = [i for i in dict.fromkeys(found) if i not in taken]
        if not found:
            continue
        taken.update(found)
        elements += weight.elements
        key_name = f"weights:{weight.name}"
        members = [(ops[i][0], ops[i][1]) for i in found]
        groups.append(SensitiveGroup(key_name, "ranked_weights", tuple(f"{op} {_module_path(s)}" for s, op in members)))
        scopes[key_name] = members
    return groups, scopes


# The group of every op (the int8 search's whole-model int16 rung). Its GroupScopes entry lists
# (".*", ai-edge-quantizer op name) per op type: quantizer_recipe gives each type its own entry,
# so a type the target can't run at 16 bits is left out by name, wherever its scope is.
EVERY_OP = "every_op"


def every_op_types(float_tflite: bytes) -> list[tuple[str, str, int]]:
    """(flatbuffer builtin name, ai-edge-quantizer op name, count) of each op type in
    `float_tflite` that ai-edge-quantizer has a 16x8 recipe for, in graph order: read once per
    model, the rung's groups are made from it."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as tfl

    from tpuedge.edge.flatbuffer import tflite_file

    model = tflite_file.read_model(float_tflite)
    names = tflite_file.operator_names(model)
    counts: "OrderedDict[tuple[str, str], int]" = OrderedDict()
    for op in model.subgraphs[0].operators or []:
        quantizer_name = tfl.TFL_OP_CODE_TO_NAME.get(model.operatorCodes[op.opcodeIndex].builtinCode)
        if quantizer_name is not None and _takes_16x8(quantizer_name):
            pair = (names[op.opcodeIndex], quantizer_name)
            counts[pair] = counts.get(pair, 0) + 1
    return [(name, quantizer_name, count) for (name, quantizer_name), count in counts.items()]


def every_op_group(
    types: list[tuple[str, str, int]], excluded: frozenset[str] = frozenset()
) -> tuple[SensitiveGroup, list[tuple[str, str]]]:
    """(the group of every op type in `types` (every_op_types) but those named in `excluded`
    (flatbuffer builtin names), its GroupScopes entry). The key names what is left out, so each
    exclusion is its own recipe."""
    kept = [(name, quantizer_name, count) for name, quantizer_name, count in types if name not in excluded]
    key = EVERY_OP + (f" but {'+'.join(sorted(excluded))}" if excluded else "")
    group = SensitiveGroup(key, "every_op", tuple(f"{name} x{count}" for name, _, count in kept))
    return group, [(".*", quantizer_name) for _, quantizer_name, _ in kept]


@functools.lru_cache(maxsize=None)
def _takes_16x8(quantizer_op: str) -> bool:
    """Whether ai-edge-quantizer's policy has 16-bit activations with int8 weights for the op (it
    refuses a recipe that names an op without them, SQUARED_DIFFERENCE; "*" skips such ops)."""
    from ai_edge_quantizer import recipe_manager

    try:
        recipe_manager.RecipeManager().add_static_config(".*", quantizer_op, activation_num_bits=16, weight_num_bits=8)
    except ValueError:
        return False
    return True


def is_every_op(key: str) -> bool:
    return key == EVERY_OP or key.startswith(EVERY_OP + " but ")


# ops that move values without computing (a value read through them is read by their readers)
_SHAPE_OPS = frozenset({"RESHAPE", "SQUEEZE", "EXPAND_DIMS"})


def _scope_regex(scopes: list[tuple[str, str]]) -> str:
    return "^(?:" + "|".join(re.escape(scope) for scope, _ in scopes) + ")$"


_PRECEDENCE = {"int8": 0, "int16": 1, "float": 2, "float32": 3}  # quantizer_recipe: the later entry wins an op
# the ops ai-edge-quantizer can give int8 weights with float compute (weight-only, explicit DEQUANTIZE)
_WEIGHT_ONLY_OPS = (
    "FULLY_CONNECTED",
    "BATCH_MATMUL",
    "CONV_2D",
    "DEPTHWISE_CONV_2D",
    "CONV_2D_TRANSPOSE",
    "EMBEDDING_LOOKUP",
)


def quantizer_recipe(
    config: QuantConfig, assignment: dict[str, str] | None = None, scopes: GroupScopes | None = None
) -> list[dict]:
    """The ai-edge-quantizer recipe (JSON-able list) for `config`; None-equivalent for "none".

    assignment: sensitive group -> "int8" | "int16" | "float" | "float32" (int8; dynamic-int8 reads float32 only).
    """
    from ai_edge_quantizer import qtyping, recipe_manager
    from ai_edge_quantizer.algorithm_manager import AlgorithmName

    gran = qtyping.QuantGranularity.CHANNELWISE if config.per_channel else qtyping.QuantGranularity.TENSORWISE
    rm = recipe_manager.RecipeManager()
    if config.scheme == "fp16":
        rm.add_weight_only_config(".*", "*", num_bits=16, algorithm_key=AlgorithmName.FLOAT_CASTING)
    elif config.scheme == "dynamic-int8":
        rm.add_dynamic_config(".*", "*", num_bits=8, granularity=gran)
        for key, precision in sorted((assignment or {}).items()):  # the float32-weights rung's ops: unquantized
            if precision == "float32":
                rm.add_quantization_config(
                    _scope_regex((scopes or {})[key]), "*", algorithm_key=AlgorithmName.NO_QUANTIZE
                )
    elif config.scheme == "int8":
        rm.add_static_config(".*", "*", activation_num_bits=8, weight_num_bits=8, weight_granularity=gran)
        # an op in two groups takes the more precise choice (ai-edge-quantizer: a later entry wins);
        # in key order, a ranked group's int16 overrode the float island a later search put on the
        # same ops, and Resemblyzer's float LSTM island scored as its int16 one (0.843 both)
        for key, precision in sorted((assignment or {}).items(), key=lambda kp: (_PRECEDENCE[kp[1]], kp[0])):
            if precision == "int8":
                continue
            if is_every_op(key) and precision == "int16" and config.io_dtype == "integer":
                # the model's inputs and outputs too (an integer input read by 16-bit ops only
                # loses its low bits at the door: silero-vad's audio in 8 bits cost 0.91 cosine on
                # its own); "int8" I/O asked for int8 ends, which the quantizer then requantizes
                for end in ("INPUT", "OUTPUT"):
                    rm.add_static_config(".*", end, activation_num_bits=16, weight_num_bits=8, weight_granularity=gran)
            if is_every_op(key):  # one entry per op type: 16-bit activations, or float compute with int8 weights
                for _, op in (scopes or {})[key]:
                    if precision == "int16":
                        rm.add_static_config(
                            ".*", op, activation_num_bits=16, weight_num_bits=8, weight_granularity=gran
                        )
                        continue
                    if op in _WEIGHT_ONLY_OPS:  # float compute with int8 weights: its one entry
                        rm.add_weight_only_config(".*", op, num_bits=8, granularity=gran)
                    else:
                        rm.add_quantization_config(".*", op, algorithm_key=AlgorithmName.NO_QUANTIZE)
                continue
            regex = _scope_regex((scopes or {})[key])
            if precision == "float32":  # last of all: no entry after it gives these ops int8 weights
                rm.add_quantization_config(regex, "*", algorithm_key=AlgorithmName.NO_QUANTIZE)
            elif precision == "int16":
                rm.add_static_config(regex, "*", activation_num_bits=16, weight_num_bits=8, weight_granularity=gran)
            else:  # a float island: float compute, but its weights stay int8 (dequantized once, at load);
                # int8 weights keep islands small (MiniLM-L6 int8: 1.03x its parameter bytes, 1.26x with float32 ones)
                rm.add_quantization_config(regex, "*", algorithm_key=AlgorithmName.NO_QUANTIZE)
                for op in _WEIGHT_ONLY_OPS:  # a later entry wins for its op; the island's other ops stay float
                    rm.add_weight_only_config(regex, op, num_bits=8, granularity=gran)
        if config.io_dtype == "float32":  # last: a later entry wins, and a group may hold the op at an output
            rm.add_quantization_config(".*", "INPUT", algorithm_key=AlgorithmName.NO_QUANTIZE)
            rm.add_quantization_config(".*", "OUTPUT", algorithm_key=AlgorithmName.NO_QUANTIZE)
    else:
        return []
    return rm.get_quantization_recipe()


class QuantizerError(InternalError):
    """ai-edge-quantizer failed on a float model our converter wrote; `log` is what it printed."""

    def __init__(self, step: str, error: BaseException, log: str):
        shown = tail(log)
        super().__init__(
            f"ai-edge-quantizer failed while {step} ({type(error).__name__}: {error})"
            + (f". It printed:\n{shown}" if shown else "; it printed nothing.")
        )
        self.step = step
        self.error = error
        self.log = log


def _quantizer_step(log: list[str], step: str, fn, *args, **kwargs):
    """Run one ai-edge-quantizer call with its stderr held (progress bars, the interpreter's
    native log lines): shown with TPUEDGE_VERBOSE=1, appended to `log`, and carried by the
    error, with what the earlier steps printed, if it fails."""
    from tpuedge.edge.litert.quantizer_compat import large_weights_sliced

    try:
        # per-channel weights over 32 MiB (edge/litert/large_weights.py), only while the quantizer runs
        with held_tool_output("ai-edge-quantizer") as printed, large_weights_sliced():
            result = fn(*args, **kwargs)
    except Exception as exc:
        log.append(getattr(exc, "tool_output", ""))
        raise QuantizerError(step, exc, "".join(log)) from exc
    log.append(printed[0])
    return result


class run_quantizer:  # noqa: N801 - a small stateful helper, used like a function
    """Quantize one float model with several recipes, calibrating once."""

    def __init__(self, float_tflite: bytes):
        from ai_edge_quantizer import quantizer

        self._float = bytes(float_tflite)
        self._quantizer = quantizer.Quantizer(bytearray(float_tflite))
        self._calibration = None
        self._estimated: dict[str, dict] = {}
        self.capped_ranges: dict[str, tuple[float, float]] = {}  # edge/litert/singular_ranges.py, set by calibrate
        self.log: list[str] = []  # what ai-edge-quantizer printed, step by step
        self.fused_lstm = None  # edge/fused_lstm_weights.FusedLSTMWeights, set by the conversion

    def calibrate(self, recipe: list[dict], samples: list[dict]) -> None:
        """Activation ranges over ALL samples (global min/max).

        ai-edge-quantizer's default is a moving average of per-sample ranges, which
        under-estimates the extremes and clips inputs the calibration data itself contains.
        """
        from ai_edge_quantizer import calibrator, recipe_manager
        from ai_edge_quantizer.utils import qsv_utils

        from tpuedge.edge.litert.litert_lowering import SIGNATURE_KEY
        from tpuedge.edge.litert.singular_ranges import cap_singular_ranges
        from tpuedge.shared_ir.cache_keys import cached_stage, data_digest, decode_array_tree, encode_array_tree

        def statistics() -> dict:
            manager = recipe_manager.RecipeManager()
            manager.load_quantization_recipe(recipe)
            calib = _quantizer_step(
                self.log,
                "loading the float model for calibration",
                calibrator.Calibrator,
                self._float,
                num_threads=1,
                qsv_update_func=qsv_utils.min_max_update,
            )
            _quantizer_step(
                self.log, f"calibrating on {len(samples)} sample(s)", calib.calibrate, {SIGNATURE_KEY: samples}, manager
            )
            return calib.get_model_qsvs()

        parts = {"float": hashlib.sha256(self._float).hexdigest(), "recipe": recipe, "samples": data_digest(samples)}
        calibration = cached_stage(  # per-tensor ranges, shared by every recipe of this float model
            "calibration", parts, statistics, encode=encode_array_tree, decode=decode_array_tree
        )
        self._calibration, self.capped_ranges = cap_singular_ranges(self._float, calibration)

    def estimate_ranges(self, samples: list[dict], methods: tuple[str, ...]) -> None:
        """Also calibrate each activation by `methods` (quantize/range_estimation.py), on the
        samples `calibrate` used; the model's outputs keep min/max (clipping a classifier's
        largest logit would clip the answer). After `calibrate`."""
        from tpuedge.edge.flatbuffer import tflite_file
        from tpuedge.edge.litert.activation_histograms import estimated_calibrations
        from tpuedge.shared_ir.cache_keys import cached_stage, data_digest, decode_array_tree, encode_array_tree

        def estimates() -> dict:
            graph = tflite_file.read_model(self._float).subgraphs[0]
            keep = {tflite_file.text(graph.tensors[i].name) for i in graph.outputs}
            return estimated_calibrations(self._float, samples, self._calibration, methods, keep)

        parts = {
            "float": hashlib.sha256(self._float).hexdigest(),
            "methods": list(methods),
            "samples": data_digest(samples),
        }
        self._estimated = cached_stage(
            "range_estimates", parts, estimates, encode=encode_array_tree, decode=decode_array_tree
        )

    def override_ranges(self, ranges: dict[str, tuple[float, float]]) -> None:
        """Replace calibrated [min, max] of the named tensors (trained ranges; after `calibrate`)."""
        import numpy as np

        qsvs = dict(self._calibration)
        for name, (lo, hi) in ranges.items():
            shape = np.shape(qsvs[name]["min"]) if name in qsvs else (1,)
            qsvs[name] = {
                **qsvs.get(name, {}),
                "min": np.full(shape, lo, np.float32),
                "max": np.full(shape, hi, np.float32),
            }
        self._calibration = qsvs

    def __call__(self, recipe: list[dict], ranges: str = "min-max") -> bytes:
        """The model quantized by `recipe`, with activation ranges by `ranges` (min/max, or a
        method `estimate_ranges` was given)."""
        calibration = self._calibration if ranges == "min-max" else self._estimated[ranges]
        self._quantizer.load_quantization_recipe(recipe)
        # enable_progress_bar does not reach its transformation step, which draws a bar on
        # stderr for models over 100 tensors: held like the rest of its output
        result = _quantizer_step(
            self.log,
            "quantizing with the recipe",
            self._quantizer.quantize,
            calibration,
            enable_progress_bar=False,
            enable_progress_report=False,
        )
        data = bytes(result.quantized_model)
        # the fused LSTMs, which ai-edge-quantizer leaves float: their planned int8 weights
        return self.fused_lstm.apply(data, recipe) if self.fused_lstm is not None else data
