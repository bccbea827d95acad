"""A real XLA:TPU compile on a machine with no TPU, and the report it gives.

libtpu can describe a TPU slice it is not attached to (`jax.experimental.topologies.
get_topology_desc("v5e:2x2", "tpu")` returns compile-only devices); jitting over a Mesh of
those devices and calling `.compile()` runs the real TPU compiler. From the executable we read
HBM use (`memory_analysis()`), FLOPs and bytes (`cost_analysis()`) and the collectives XLA
inserted for the sharding (counted in the compiled HLO), and estimate a step time from the
chip's published peak (see topologies.py).

Two process-level traps handled here:
- libtpu takes /tmp/libtpu_lockfile; any other process that initialised jax with libtpu
  installed (a training script, a test) holds it, and a second libtpu load then fails with
  "Internal error when accessing libtpu multi-process lockfile". A deviceless compile never
  touches a chip, so we set ALLOW_MULTIPLE_LIBTPU_LOAD=1 (unless the user set it) before the
  first topology call.
- libtpu prints multi-line warnings (no TPU metadata server) on stderr at first load; we hold
  them back and show them only if the topology call fails.

`TPUEDGE_LIBTPU=off` makes tpuedge behave as if libtpu were not installed (used by the tests
to exercise that path without uninstalling it, and by users who want to skip the compile).
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable
from importlib import metadata
from typing import Any

from tpuedge.shared_ir.native_stderr import held_native_stderr
from tpuedge.cloud.topologies import TopologyChoice
from tpuedge.shared_ir.errors import TpuedgeError, UserError
from tpuedge.shared_ir.stage_times import timed

__all__ = [
    "LIBTPU_SWITCH",
    "initialize_jax_quietly",
    "libtpu_unavailable_reason",
    "libtpu_version",
    "topology_devices",
    "devices_per_chip",
    "count_collectives",
    "compile_on_topology",
    "CompileTarget",
]

LIBTPU_SWITCH = "TPUEDGE_LIBTPU"
COLLECTIVE_OPCODES = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
    "collective-broadcast",
)
# An HLO instruction's opcode follows its result shape: "... = f32[4]{0} all-reduce(...)".
_COLLECTIVE_RE = re.compile(r"\s(" + "|".join(COLLECTIVE_OPCODES) + r")(-start)?\(")
_DEVICES: dict[str, list] = {}


def libtpu_unavailable_reason() -> str | None:
    """None when a deviceless TPU compile can run here, else why not (one short clause)."""
    if os.environ.get(LIBTPU_SWITCH, "").strip().lower() in {"0", "off", "no", "false"}:
        return f"libtpu switched off by {LIBTPU_SWITCH}={os.environ[LIBTPU_SWITCH]}"
    if importlib.util.find_spec("libtpu") is None:
        return "libtpu is not installed (pip install 'tpuedge[tpu]' adds the libtpu that matches jax)"
    return None


def libtpu_version() -> str:
    try:
        return metadata.version("libtpu")
    except metadata.PackageNotFoundError:
        return "unknown"


def initialize_jax_quietly() -> None:
    """Initialise jax's backends with libtpu's no-TPU-here warnings held back.

    With libtpu installed, jax's first backend initialisation loads it to look for a TPU; on a
    machine without one that prints a screen of metadata-server warnings and takes the libtpu
    lockfile. We allow a shared load (a deviceless compile never touches a chip) and replay the
    held log only when a TPU backend did come up (then it may matter).
    """
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    import jax

    with held_native_stderr() as log:
        backend = jax.default_backend()
    if backend == "tpu" and log and log[0]:
        os.write(2, log[0].encode())


def topology_devices(choice: TopologyChoice) -> list:
    """The compile-only devices of a TPU slice, from libtpu (cached per topology name)."""
    if choice.name in _DEVICES:
        return _DEVICES[choice.name]
    reason = libtpu_unavailable_reason()
    if reason:
        raise UserError(f"Can't compile for TPU topology {choice.name}: {reason}.")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from jax.experimental import topologies

    with held_native_stderr() as log, timed("TPU: load libtpu, describe the topology"):
        try:
            devices = list(topologies.get_topology_desc(choice.name, "tpu").devices)
            error = None
        except Exception as exc:  # libtpu raises JaxRuntimeError with its own text
            devices, error = [], exc
    if error is not None:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        noise = log[0].strip().splitlines()[-1] if log and log[0].strip() else ""
        raise UserError(
            f"libtpu {libtpu_version()} could not describe TPU topology {choice.name}: {message}"
            + (f" (libtpu said: {noise})" if noise else "")
            + f". Pick a slice shape libtpu knows, e.g. {choice.chip.default_topology}; if the chip name is right "
            "and it still fails, install the libtpu that matches jax with pip install 'jax[tpu]==<your jax version>'."
        ) from error
    _DEVICES[choice.name] = devices
    return devices


def devices_per_chip(devices: list) -> int:
    """Devices libtpu exposes per chip (v4 shows its two TensorCores as two devices)."""
    chips = {tuple(getattr(d, "coords", (d.id,))) for d in devices}
    return max(1, len(devices) // max(1, len(chips)))


def count_collectives(hlo_text: str) -> dict[str, int]:
    """Collective instructions in compiled HLO text, by opcode (an async start/done pair counts once)."""
    counts: dict[str, int] = {}
    for match in _COLLECTIVE_RE.finditer(hlo_text):
        counts[match.group(1)] = counts.get(match.group(1), 0) + 1
    return dict(sorted(counts.items()))


class CompileTarget:
    """A TPU slice to compile for: its compile-only devices and the chip's figures."""

    def __init__(self, choice: TopologyChoice):
        self.choice = choice
        self.devices = topology_devices(choice)
        self.per_chip = devices_per_chip(self.devices)
        kinds = {d.device_kind for d in self.devices}
        if kinds != {choice.chip.device_kind}:
            raise UserError(
                f"libtpu described {choice.name} with devices of kind {sorted(kinds)}, expected "
                f"{choice.chip.device_kind!r}; install the libtpu that matches jax (pip install 'tpuedge[tpu]')."
            )

    @property
    def device_count(self) -> int:
        return len(self.devices)

    def describe(self) -> dict:
        chip = self.choice.chip
        return {
            "topology": self.choice.name,
            "chip": chip.name,
            "device_kind": chip.device_kind,
            "chips": self.device_count // self.per_chip,
            "devices": self.device_count,
            "devices_per_chip": self.per_chip,
            "chip_peak_bf16_flops_per_s": chip.peak_bf16_flops,
            "chip_hbm_bytes": chip.hbm_bytes,
            "chip_hbm_bytes_per_s": chip.hbm_bandwidth,
            "chip_figures_source": chip.source,
            "libtpu": libtpu_version(),
        }


def compile_on_topology(target: "CompileTarget", lower: Callable[[], Any], jax_program: Any = None) -> dict[str, Any]:
    """Run `lower()` (-> a jax.stages.Lowered over arguments sharded on a mesh of `target`'s
    devices), compile it with the TPU compiler and return the analysis (per device).
    `jax_program`: the interpreter's JaxProgram being compiled, so a compiler error can name the
    IR node (and the user's line) of the op it stopped at. The analysis holds no wall times (the
    build's stage times do), so the same program gives the same report."""
    try:
        with timed("TPU: trace and lower over the slice's mesh"):
            lowered = lower()
        with timed("TPU: XLA:TPU compile (libtpu, deviceless)"):
            compiled = lowered.compile()
    except TpuedgeError:  # the interpreter's own errors (unsupported op, our bug) pass as they are
        raise
    except Exception as exc:  # XLA reports TPU-unsupported programs as runtime errors
        raise compiler_error(target.choice.name, str(exc) or type(exc).__name__, jax_program) from exc
    return _analysis(target, compiled)


# XLA's op metadata: op_name="jit(net_forward)/softmax_3/reduce_max" (the interpreter's named scopes)
_OP_NAME = re.compile(r'op_name="([^"]+)"')


def compiler_error(topology: str, text: str, jax_program: Any = None) -> UserError:
    """The one-paragraph error for an XLA:TPU compile failure: the compiler's first line, the IR
    node and source line of the op it names (when `jax_program` knows the node), and what to do.
    INTERNAL is the compiler failing in its own passes, which no model change is known to need."""
    first = text.strip().splitlines()[0][:400]
    scopes = (
        [scope for op_name in _OP_NAME.findall(text) for scope in op_name.split("/")] if jax_program is not None else []
    )
    where = next(filter(None, map(jax_program.describe_node, scopes)), None) if scopes else None
    at = f" The op it stopped at comes from IR node {where}." if where else ""
    if first.startswith("INTERNAL"):
        return UserError(
            f"The XLA:TPU compiler failed inside its own passes for {topology} ({first}): a compiler bug this program "
            f"triggers, not an op or dtype TPUs lack.{at} Try writing that "
            "line another way (the same math with other ops), another --topology, or another libtpu version; report it to XLA."
        )
    return UserError(
        f"The XLA:TPU compiler rejected the program for {topology}: {first}.{at} "
        "Check the model's dtypes (TPUs have no float64) and ops with `tpuedge check --target cloud-tpu`."
    )


def _analysis(target: CompileTarget, compiled) -> dict[str, Any]:
    chip = target.choice.chip
    memory = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    if isinstance(cost, list):  # older jax returned one dict per partition
        cost = cost[0] if cost else {}
    cost = cost or {}
    flops = float(cost.get("flops", 0.0))
    bytes_accessed = float(cost.get("bytes accessed", 0.0))
    hbm = {
        "argument_bytes": int(memory.argument_size_in_bytes),
        "output_bytes": int(memory.output_size_in_bytes),
        "alias_bytes": int(memory.alias_size_in_bytes),
        "temp_bytes": int(memory.temp_size_in_bytes),
        "generated_code_bytes": int(memory.generated_code_size_in_bytes),
    }
    hbm["total_bytes"] = (
        hbm["argument_bytes"]
        + hbm["output_bytes"]
        - hbm["alias_bytes"]
        + hbm["temp_bytes"]
        + hbm["generated_code_bytes"]
    )
    device_hbm = chip.hbm_bytes / target.per_chip
    hbm["fraction_of_device_hbm"] = hbm["total_bytes"] / device_hbm
    device_peak = chip.peak_bf16_flops / target.per_chip
    device_bandwidth = chip.hbm_bandwidth / target.per_chip
    compute_s = flops / device_peak
    memory_s = bytes_accessed / device_bandwidth
    collectives = count_collectives(compiled.as_text())
    report = {
        "hbm_per_device": hbm,
        "flops_per_device": flops,
        "flops_all_devices": flops * target.device_count,
        "bytes_accessed_per_device": bytes_accessed,
        "collectives": {"total": sum(collectives.values()), "by_opcode": collectives},
        "estimated_step_seconds": max(compute_s, memory_s),
        "estimate_bound": "compute" if compute_s >= memory_s else "memory",
        "compute_bound_seconds": compute_s,
        "memory_bound_seconds": memory_s,
    }
    if "optimal_seconds" in cost:
        report["xla_cost_model_seconds"] = float(cost["optimal_seconds"])
    return report
