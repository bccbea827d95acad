"""How verify results look: rich tables for the console, plain text for test failures, and a
report folder (report.md with the per-layer tables, snr_per_layer.png, verify.json)."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from tpuedge.verify.per_layer import LayerReport
    from tpuedge.verify.result import VerifyResult

__all__ = [
    "outputs_table",
    "layers_table",
    "render",
    "render_text",
    "write_report_dir",
    "REPORT_FILE",
    "PLOT_FILE",
    "JSON_FILE",
]

REPORT_FILE = "report.md"
PLOT_FILE = "snr_per_layer.png"
JSON_FILE = "verify.json"


def _num(x: float | None, digits: int = 4) -> str:
    if x is None:
        return "–"
    return f"{x:.{digits}g}" if abs(x) < 1e-3 or abs(x) >= 1e4 else f"{x:.{digits}f}"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.2f}%"


def outputs_table(result: "VerifyResult"):
    from rich.table import Table

    failing = {(c.name, c.subject) for c in result.failures}
    table = Table(title=f"{result.runtime} vs float IR — {result.samples} samples", title_justify="left")
    for column in ("output", "shape", "max abs err", "mean abs err", "cosine", "centered cos", "SNR dB", "top-1 agree"):
        table.add_column(column, justify="left" if column in ("output", "shape") else "right")
    for o in result.outputs:
        cos = _num(o.cosine, 6)
        top1 = _pct(o.top1_agreement)
        if ("cosine", o.name) in failing:
            cos = f"[red]{cos} ✗[/red]"
        if ("top-1 agreement", o.name) in failing:
            top1 = f"[red]{top1} ✗[/red]"
        table.add_row(
            o.name,
            "x".join(str(d) for d in o.shape),
            _num(o.max_abs_error),
            _num(o.mean_abs_error),
            cos,
            _num(o.centered_cosine, 6),
            f"{o.snr_db:.2f}",
            top1,
        )
    return table


def layers_table(report: "LayerReport", top: int = 10):
    from rich.table import Table

    ranked = report.ranked()[:top]
    table = Table(
        title=f"worst layers in {report.runtime} (by SNR drop; {report.samples} samples, "
        f"{sum(not l.is_input for l in report.layers)} of {report.ir_layers} IR layers compared, "
        f"{report.counterparts} with a runtime counterpart"
        + (f", {len(report.shape_mismatches)} skipped: shape differs" if report.shape_mismatches else "")
        + ")",
        title_justify="left",
    )
    for column in ("#", "layer", "SNR dB", "in dB", "drop dB", "cosine", "max abs err", "source"):
        table.add_column(column, justify="right" if column not in ("layer", "source") else "left")
    for rank, layer in enumerate(ranked, 1):
        table.add_row(
            str(rank),
            layer.label,
            f"{layer.snr_db:.1f}",
            f"{layer.input_snr_db:.1f}",
            f"{layer.drop_db:.1f}",
            _num(layer.cosine, 5),
            _num(layer.max_abs_error),
            layer.source,
        )
    return table


def render(result: "VerifyResult", console, *, top_layers: int = 10) -> None:
    """Print one result: header, per-output table, accuracy, checks, worst layers."""
    fp = result.fingerprint[:12] + ("" if result.fingerprint_checked else " (artifact records none: not checked)")
    console.print(f"[bold]{result.artifact}[/bold] ({result.target}) vs [bold]{result.model}[/bold]  IR {fp}")
    console.print(outputs_table(result))
    if result.accuracy is not None:
        a = result.accuracy
        console.print(
            f"accuracy on {a.labels!r} ({a.output}): float IR {a.float_accuracy:.2f}%, {result.runtime} "
            f"{a.runtime_accuracy:.2f}%, drop {a.drop:+.2f} pts"
        )
    for check in result.checks:
        mark = "[green]pass[/green]" if check.passed else "[red]FAIL[/red]"
        console.print(f"  {mark} {check.describe()}")
    if result.layers is not None:
        console.print(layers_table(result.layers, top_layers))


def render_text(result: "VerifyResult", *, top_layers: int = 10, width: int = 140) -> str:
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, highlight=False, soft_wrap=False)
    render(result, console, top_layers=top_layers)
    return buffer.getvalue().rstrip()


def _markdown_layers(report: "LayerReport") -> list[str]:
    lines = [
        f"### {report.runtime} — `{report.artifact}`",
        "",
        f"{report.samples} samples; {sum(not l.is_input for l in report.layers)} of {report.ir_layers} IR layers "
        f"compared ({report.counterparts} have a tensor in the runtime by module scope and shape). SNR is the "
        "mean per-channel SNR against the IR's own value; *drop* is how far a layer falls below the layers it "
        "reads from.",
        "",
    ]
    if report.shape_mismatches:
        lines += [
            f"{len(report.shape_mismatches)} layer(s) not compared because the runtime's tensor has another shape:",
            "",
            *(f"- {m}" for m in report.shape_mismatches),
            "",
        ]
    lines += [
        "| rank | layer | op | runtime tensor | SNR dB | input SNR dB | drop dB | whole-tensor SNR dB | cosine | max abs err | source |",
        "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for rank, l in enumerate(report.ranked(), 1):
        tensor = l.tensor.replace("|", "\\|")
        if len(tensor) > 60:
            tensor = "…" + tensor[-59:]
        source = l.source.replace("|", "\\|")
        lines.append(
            f"| {rank} | {l.label} | {l.op} | `{tensor}` | {l.snr_db:.1f} | {l.input_snr_db:.1f} | "
            f"{l.drop_db:.1f} | {l.tensor_snr_db:.1f} | {l.cosine:.5f} | {_num(l.max_abs_error)} | {source} |"
        )
    return lines


def _markdown(results: Sequence["VerifyResult"]) -> str:
    lines = ["# tpuedge verify", ""]
    for r in results:
        lines += [
            f"## `{r.artifact}` ({r.runtime}) vs `{r.model}`",
            "",
            f"IR fingerprint `{r.fingerprint[:16]}`; {r.samples} samples; **{'PASSED' if r.passed else 'FAILED'}**.",
            "",
            "| output | max abs err | mean abs err | cosine | centered cosine | SNR dB | top-1 agreement |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for o in r.outputs:
            lines.append(
                f"| {o.name} | {_num(o.max_abs_error)} | {_num(o.mean_abs_error)} | {o.cosine:.6f} | {o.centered_cosine:.6f} | {o.snr_db:.2f} | {_pct(o.top1_agreement)} |"
            )
        if r.accuracy is not None:
            a = r.accuracy
            lines += [
                "",
                f"Accuracy: float IR {a.float_accuracy:.2f}%, runtime {a.runtime_accuracy:.2f}%, drop {a.drop:+.2f} pts.",
            ]
        if r.checks:
            lines += [""] + [f"- {'pass' if c.passed else '**FAIL**'}: {c.describe()}" for c in r.checks]
        lines.append("")
    layer_reports = [r.layers for r in results if r.layers is not None]
    if layer_reports:
        lines += ["## Per-layer numerics", "", f"![SNR per layer]({PLOT_FILE})", ""]
        for report in layer_reports:
            lines += _markdown_layers(report) + [""]
    return "\n".join(lines).rstrip() + "\n"


def _plot(results: Sequence["VerifyResult"], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    reports = [r.layers for r in results if r.layers is not None]
    order: dict[str, int] = {}
    for report in reports:
        for l in report.layers:
            order.setdefault(l.node, l.order)
    nodes = sorted(order, key=order.__getitem__)
    position = {n: i for i, n in enumerate(nodes)}
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(nodes) + 2.0), 4.5), dpi=100)
    styles = [("o", "-"), ("s", "--"), ("^", ":"), ("D", "-.")]  # runtimes that agree stay visible
    for number, report in enumerate(reports):
        xs = [position[l.node] for l in report.layers]
        ys = [l.snr_db for l in report.layers]
        marker, linestyle = styles[number % len(styles)]
        (line,) = ax.plot(xs, ys, marker=marker, linestyle=linestyle, label=report.runtime, alpha=0.85)
        worst = [l for l in report.ranked()[:1] if l.drop_db >= 1.0]
        if worst:
            w = worst[0]
            ax.plot([position[w.node]], [w.snr_db], marker="o", markersize=12, fillstyle="none", color=line.get_color())
            ax.annotate(
                f"{w.node}: -{w.drop_db:.1f} dB",
                (position[w.node], w.snr_db),
                textcoords="offset points",
                xytext=(0, 12),
                ha="center",
                color=line.get_color(),
                fontsize=8,
            )
    ax.set_xticks(range(len(nodes)))
    ax.set_xticklabels(nodes, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("SNR vs float IR (dB, per-channel mean)")
    ax.set_title("SNR per layer across runtimes")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    # no timestamps in the file: same numbers, same bytes
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)


def write_report_dir(directory: str | Path, results: Sequence["VerifyResult"]) -> Path:
    """report.md (+ snr_per_layer.png when layers were compared) + verify.json, written atomically."""
    from tpuedge.shared_ir.atomic import atomic_output_dir

    directory = Path(directory)
    with atomic_output_dir(directory) as stage:
        (stage / REPORT_FILE).write_text(_markdown(results))
        if any(r.layers is not None for r in results):
            _plot(results, stage / PLOT_FILE)
        payload = {"passed": all(r.passed for r in results), "results": [r.to_json() for r in results]}
        (stage / JSON_FILE).write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    return directory
