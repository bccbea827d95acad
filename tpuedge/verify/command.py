"""`tpuedge verify ARTIFACT_DIR... --model MODEL --data FILE.npz`: the CLI face of `verify`.

Only click is imported here (the CLI's start-up path); numpy/torch/litert load when it runs.
Exit codes: 0 every threshold holds, 1 one failed (named on the console and in the JSON),
2 bad input (UserError: fingerprint mismatch, data of the wrong shape, missing keys).
"""

from __future__ import annotations

from pathlib import Path

import click

from tpuedge.command_inputs import verbose_option

from tpuedge.verify import DEFAULT_MIN_COSINE

__all__ = ["verify_command"]


@click.command("verify")
@click.argument("artifact_dirs", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="ARTIFACT_DIR...")
@click.option(
    "--model", "-m", "model", help="MODEL the artifacts were built from (file.py:factory, pkg.mod:factory or .pt2)."
)
@click.option(
    "--data",
    "-d",
    "data",
    type=click.Path(path_type=Path),
    help=".npz with one array per model input (first axis = samples); .npy for one input. For a language model: a UTF-8 .txt (passages separated by lines of ---; default: tpuedge's held-out corpus).",
)
@click.option("--labels", help="Key of the labels array in the .npz: report task accuracy of both and the drop.")
@click.option(
    "--min-cosine",
    type=float,
    default=DEFAULT_MIN_COSINE,
    show_default=True,
    help="Fail (exit 1) when any output's cosine similarity with the float IR (all samples together) is below this; -1 turns the check off.",
)
@click.option(
    "--min-top1",
    type=float,
    help="Fail when top-1 agreement with the float IR is below this fraction (e.g. 0.99); for a language model, teacher-forced next-token agreement.",
)
@click.option(
    "--max-perplexity-increase",
    type=float,
    help="A language model: fail when its perplexity is more than this (relative, 0.05 = 5%) above the float IR's.",
)
@click.option(
    "--max-drop",
    type=float,
    help="Fail when task accuracy drops by more than this many percentage points (needs --labels).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the results as JSON here (for CI).",
)
@click.option(
    "--per-layer", is_flag=True, help="Compare every layer the runtime exposes with the IR; rank by SNR drop."
)
@click.option(
    "--report-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write report.md, verify.json (and with --per-layer the SNR plot) here; --per-layer defaults to build/<model>/verify.",
)
@click.option(
    "--layer-samples", type=click.IntRange(min=1), default=64, show_default=True, help="Samples used for --per-layer."
)
@click.option(
    "--top", type=click.IntRange(min=1), default=10, show_default=True, help="Worst layers shown on the console."
)
@verbose_option
def verify_command(
    artifact_dirs: tuple[Path, ...],
    model: str | None,
    data: Path,
    labels: str | None,
    min_cosine: float,
    min_top1: float | None,
    max_perplexity_increase: float | None,
    max_drop: float | None,
    json_path: Path | None,
    per_layer: bool,
    report_dir: Path | None,
    layer_samples: int,
    top: int,
) -> int:
    """Run ARTIFACT_DIR (one or more builds) in its real runtime and the float MODEL on the same data; compare.

    Per output: max/mean abs error, cosine, SNR, top-1 agreement; with --labels, task accuracy
    of both. Default threshold: cosine >= 0.99 on every output (--min-cosine). Exit 0 when every
    threshold holds, 1 when one fails or nothing was checked, 2 for bad input.
    """
    import json

    from rich.console import Console

    from tpuedge.config import find_config
    from tpuedge.shared_ir.model_spec import load_program
    from tpuedge.shared_ir.atomic import write_bytes_atomic
    from tpuedge.shared_ir.errors import UserError
    from tpuedge.verify.compare import open_artifact, verify
    from tpuedge.verify.report import PLOT_FILE, REPORT_FILE, render, write_report_dir

    model = model or find_config().get("model")
    if not model:
        raise UserError(
            "No --model given and no `model` in [tool.tpuedge]; pass the model the artifact was built from, "
            "e.g. --model examples/digits/model.py:build."
        )
    console = Console(highlight=False)
    if not console.is_terminal:  # CI logs: don't wrap the tables at 80 columns
        console = Console(highlight=False, width=160)
    if any(_language_model_build(directory) for directory in artifact_dirs):  # captured with the build's own lengths
        artifacts = [open_artifact(directory) for directory in artifact_dirs]
        return _verify_language_models(artifacts, model, data, min_top1, max_perplexity_increase, json_path, console)
    if data is None:
        raise UserError("--data is required: an .npz with one array per model input (first axis = samples), or a .npy.")
    program = load_program(model)
    artifacts = [open_artifact(directory) for directory in artifact_dirs]
    mismatched = [a for a in artifacts if a.manifest.get("ir_fingerprint") not in (None, program.fingerprint)]
    if mismatched:  # every problem before any output
        listed = ", ".join(f"{a.directory} ({a.manifest['ir_fingerprint'][:12]})" for a in mismatched)
        raise UserError(
            f"{listed} {'was' if len(mismatched) == 1 else 'were'} built from a different IR than the model "
            f"{program.name!r} (fingerprint {program.fingerprint[:12]}); their numbers would say nothing about this "
            "model. Rebuild them with `tpuedge build MODEL --target ...`, or verify them against the --model they "
            "were built from."
        )
    results = []
    for artifact in artifacts:
        result = verify(
            artifact,
            program,
            data,
            labels=labels,
            min_cosine=min_cosine,
            min_top1=min_top1,
            max_drop=max_drop,
            per_layer=per_layer,
            layer_samples=layer_samples,
            progress=True,
        )
        render(result, console, top_layers=top)
        results.append(result)

    if per_layer or report_dir is not None:
        out = report_dir or Path("build") / program.name / "verify"
        write_report_dir(out, results)
        console.print(f"report: {out / REPORT_FILE}" + (f", plot: {out / PLOT_FILE}" if per_layer else ""))
    if json_path is not None:
        payload = {"passed": all(r.passed for r in results), "results": [r.to_json() for r in results]}
        write_bytes_atomic(json_path, (json.dumps(payload, indent=2, sort_keys=True) + "\n").encode())
        console.print(f"wrote {json_path}")

    failures = [(r, c) for r in results for c in r.failures]
    checks = sum(len(r.checks) for r in results)
    if failures:
        for r, c in failures:
            console.print(f"[red]FAILED[/red] {r.artifact}: {c.describe()}")
        return 1
    unchecked = [r for r in results if not r.checks]
    if unchecked:  # every threshold turned off: measured, but nothing says it is right
        console.print(
            f"[red]verify checked nothing[/red] on {', '.join(r.artifact for r in unchecked)}: every threshold is off "
            "(--min-cosine -1 and no --min-top1/--max-drop); give one to pass or fail."
        )
        return 1
    console.print(f"[green]verify passed[/green]: {checks} check(s) on {len(results)} artifact(s)")
    return 0


def _language_model_build(directory: Path) -> bool:
    """A build folder whose manifest describes a decoder (read as JSON only: nothing is opened)."""
    import json

    try:
        return "decoder" in json.loads((Path(directory) / "manifest.json").read_text())
    except (OSError, ValueError):
        return False


def _verify_language_models(artifacts, model, text, min_top1, max_perplexity_increase, json_path, console) -> int:
    """verify's language-model form: token agreement of each decoder artifact (see verify/lm_verify.py)."""
    import json

    from tpuedge.shared_ir.atomic import write_bytes_atomic
    from tpuedge.shared_ir.errors import UserError
    from tpuedge.shared_ir.generative.generating_artifact import GeneratingArtifact
    from tpuedge.verify.lm_verify import verify_decoder

    others = [str(a.directory) for a in artifacts if not isinstance(a, GeneratingArtifact)]
    if others:
        raise UserError(
            f"{', '.join(others)} {'is' if len(others) == 1 else 'are'} not language-model builds; verify them "
            "apart from the language models (their data is tensors, not text)."
        )
    results = [
        verify_decoder(a, model, text=text, min_top1=min_top1, max_perplexity_increase=max_perplexity_increase)
        for a in artifacts
    ]
    for result in results:
        for line in result.lines():
            console.print(line, markup=False)
    if json_path is not None:
        payload = {"passed": all(r.passed for r in results), "results": [r.to_json() for r in results]}
        write_bytes_atomic(json_path, (json.dumps(payload, indent=2, sort_keys=True) + "\n").encode())
        console.print(f"wrote {json_path}")
    failed = [(r, f) for r in results for f in r.failures]
    for r, f in failed:
        console.print(f"[red]FAILED[/red] {r.artifact}: {f}")
    if failed:
        return 1
    if min_top1 is None and max_perplexity_increase is None:
        console.print(
            "[red]verify checked nothing[/red]: give --min-top1 or --max-perplexity-increase to pass or fail a "
            "language model."
        )
        return 1
    console.print(f"[green]verify passed[/green]: {len(results)} language model(s)")
    return 0
