"""The TPU part of a cloud-tpu build: the deviceless XLA:TPU compile report (tpu_compile.json)
for the forward and, when asked, the train step, and how the report reads on the console."""

from __future__ import annotations

import sys

from tpuedge.shared_ir.stage_times import timed

__all__ = ["TPU_REPORT_FILE", "tpu_report", "describe_tpu_report"]

TPU_REPORT_FILE = "tpu_compile.json"


def tpu_report(lowered, export) -> tuple[dict | None, dict]:
    """(tpu_compile.json content or None, the deterministic summary for the manifest)."""
    from tpuedge.cloud import tpu_compile, tpu_programs

    choice = lowered.topology
    status = {"topology": choice.name, "train_step": lowered.train_step}
    if lowered.train_step:
        status.update(loss=lowered.loss, sharding=lowered.sharding)
    reason = tpu_compile.libtpu_unavailable_reason()
    if reason:
        print(
            f"tpuedge: no TPU compile for {choice.name} ({reason}); the portable artifacts are still written.",
            file=sys.stderr,
        )
        return None, {**status, "status": f"skipped: {reason}"}
    target = tpu_compile.CompileTarget(choice)
    batch = lowered.batch_info["size"]
    with timed("TPU: forward, other"):
        programs = {"forward": tpu_programs.compile_forward(target, export, batch)}
    if lowered.train_step:
        with timed("TPU: train step, other (train-mode capture, optax)"):
            programs["train_step"] = tpu_programs.compile_train_step(
                target, lowered.program, batch, lowered.loss, lowered.sharding
            )
    report = {
        **target.describe(),
        "programs": programs,
        "notes": (
            "Per-device figures of the SPMD-partitioned executables, from the real XLA:TPU compiler run "
            "without a TPU. estimated_step_seconds = max(FLOPs / per-device share of the chip's published "
            "bf16 peak, bytes accessed / its HBM bandwidth): a lower bound that assumes peak utilisation "
            "(float32 matmuls run on the MXU in bf16 passes at default precision). The compile's seconds "
            "are in the build's stage times (TPUEDGE_STAGE_TIMES), not here: the same program gives this "
            "file byte for byte."
        ),
    }
    return report, {**status, "status": "compiled", "report": TPU_REPORT_FILE}


def describe_tpu_report(tpu: dict | None, status: dict) -> list[str]:
    """The console lines of a tpu_compile.json (or of the manifest's status when there is none)."""
    if tpu is None:
        return [f"  TPU compile: {status['status']}"]
    lines = [f"  TPU compile for {tpu['topology']} ({tpu['chips']} x {tpu['device_kind']}, libtpu {tpu['libtpu']}):"]
    for name, r in tpu["programs"].items():
        hbm = r["hbm_per_device"]
        ways = next(iter(r["mesh"].values()))
        lines.append(
            f"    {name:<10} on {ways} device(s): HBM {hbm['total_bytes'] / 2**20:.2f} MiB/device "
            f"({100 * hbm['fraction_of_device_hbm']:.3f}%), {r['flops_per_device']:.3g} FLOP/device, "
            f"{r['collectives']['total']} collective(s), est. step {r['estimated_step_seconds'] * 1e6:.2f} us "
            f"({r['estimate_bound']}-bound at published peak)"
        )
        if r.get("note"):
            lines.append(f"      note: {r['note']}")
    return lines
