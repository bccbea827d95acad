"""The `tpuedge` command. A thin front door: each command calls the packages' public API.

Start-up stays light (no torch/jax/litert import until a command runs), so `--help` is instant.
User errors print one paragraph and exit 2; our own bugs print a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from tpuedge.command_inputs import console as _console
from tpuedge.command_inputs import model_arg as _model_arg
from tpuedge.command_inputs import target_arg as _target_arg
from tpuedge.command_inputs import verbose_option
from tpuedge.shared_ir.errors import (
    EXIT_BELOW_BUDGET,
    EXIT_USER_ERROR,
    BudgetError,
    InternalError,
    ProblemsError,
    UserError,
)

__all__ = ["main", "cli"]


class _Group(click.Group):
    """Builds `build` lazily so its per-target options come from the target registry."""

    def list_commands(self, ctx):
        return sorted({*super().list_commands(ctx), "build"})

    def get_command(self, ctx, name):
        if name == "build":
            from tpuedge.build_command import make_build_command

            return make_build_command()
        return super().get_command(ctx, name)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tpuedge")
def cli() -> None:
    """One PyTorch model to Cloud TPU, Android and microcontrollers, checked on the real runtimes."""


def _capture_options(function):
    """--prefill-lengths / --cache-length (a decoder LM) and --buckets: how a model is captured (check, export)."""
    function = click.option(
        "--buckets", help="One entry point per size of an input's axis: INPUT:AXIS=SIZES, e.g. input_ids:1=16,32,64."
    )(function)
    function = click.option(
        "--cache-length", type=click.IntRange(min=2), help="A decoder LM's KV cache, in positions."
    )(function)
    return click.option("--prefill-lengths", help="A decoder LM's prefill entry points, tokens each, e.g. 32,128.")(
        function
    )


@cli.command()
@click.argument("model", required=False)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Where to write the .pt2.")
@click.option("--name", help="Program name (default: from the model spec).")
@_capture_options
def export(
    model: str | None,
    output: Path | None,
    name: str | None,
    prefill_lengths: str | None,
    cache_length: int | None,
    buckets: str | None,
) -> None:
    """Capture MODEL with torch.export into the shared IR and save it as a .pt2."""
    from tpuedge.shared_ir.model_spec import load_program, spec_name
    from tpuedge.shared_ir.generative.bundle import ProgramBundle

    spec = _model_arg(model)
    program = load_program(spec, {"prefill_lengths": prefill_lengths, "cache_length": cache_length, "buckets": buckets})
    if isinstance(program, ProgramBundle):
        raise UserError(
            f"{spec} is captured as {len(program.entries)} entry points sharing one set of weights, which a .pt2 can't hold "
            "once for all of them. Build it from MODEL directly (`tpuedge build MODEL --target ...`); the build cache "
            "keeps its lowering."
        )
    if name:
        program.name = name
    output = output or Path(f"{spec_name(spec)}.pt2")
    program.save(output)
    _print_program(program)
    _console().print(f"wrote {output} ({output.stat().st_size:,} bytes)")


@cli.command()
@click.argument("model", required=False)
@click.option("--target", "-t", help="Target to check against.")
@_capture_options
@verbose_option
def check(
    model: str | None, target: str | None, prefill_lengths: str | None, cache_length: int | None, buckets: str | None
) -> None:
    """Report every problem TARGET has with MODEL (exit 0 clean, 2 with problems)."""
    from tpuedge.shared_ir.model_spec import load_program
    from tpuedge.shared_ir.targets import all_targets

    target = _target_arg(target, list(all_targets()))
    program = load_program(
        _model_arg(model), {"prefill_lengths": prefill_lengths, "cache_length": cache_length, "buckets": buckets}
    )
    problems = program.check(target)
    if problems:
        raise ProblemsError(
            f"{program.name} has {len(problems)} problem(s) for target {target}; nothing was written:", problems
        )
    console = _console()
    console.print(f"{program.name}: no problems for target {target} ({sum(program.op_histogram.values())} ops).")
    for note in program.rewrites(target):
        console.print(f"  rewrite the {target} build applies (with its measured cost reported): {note}")


@cli.command()
@click.option("--target", "-t", help="Target whose coverage to print.")
@click.option("--all", "show_all", is_flag=True, help="Also list the core ATen ops the target lacks.")
def ops(target: str | None, show_all: bool) -> None:
    """Op coverage of TARGET, read from its backend's registry."""
    from rich.table import Table

    from tpuedge.shared_ir.coverage import coverage
    from tpuedge.shared_ir.targets import all_targets

    target = _target_arg(target, list(all_targets()))
    rows = coverage(target)
    table = Table(title=f"ops for {target}")
    table.add_column("op")
    table.add_column("core ATen")
    table.add_column("supported")
    table.add_column("note")
    for row in rows:
        if row.supported or row.rewritten or show_all:
            verdict = "yes" if row.supported else "rewritten" if row.rewritten else "no"
            table.add_row(row.op, "yes" if row.core else "", verdict, row.note)
    console = _console()
    console.print(table)
    core = [r for r in rows if r.core]
    rewritten = sum(r.rewritten for r in rows)
    console.print(
        f"{target}: {sum(r.supported for r in rows)} ops supported"
        + (
            f", {rewritten} more rewritten on the IR into supported ones (some forms only: see their notes)"
            if rewritten
            else ""
        )
        + f"; core ATen coverage {sum(r.supported for r in core)}/{len(core)}."
    )


@cli.command()
@click.argument("path", type=click.Path(path_type=Path))
def inspect(path: Path) -> None:
    """Describe a saved .pt2 Program or a built artifact (folder or .tflite)."""
    from tpuedge.shared_ir.artifact import load
    from tpuedge.shared_ir.program import Program

    obj = load(path)
    if isinstance(obj, Program):
        _print_program(obj)
    else:
        _console().print(obj.report() if hasattr(obj, "report") else repr(obj))


def _print_program(program) -> None:
    from rich.table import Table

    console = _console()
    console.print(f"[bold]{program.name}[/bold]  fingerprint {program.fingerprint}")
    io = Table(title="inputs / outputs")
    for col in ("kind", "name", "dtype", "shape"):
        io.add_column(col)
    for kind, specs in (("input", program.inputs), ("output", program.outputs)):
        for s in specs:
            io.add_row(kind, s.name, s.dtype, str(list(s.shape)))
    console.print(io)
    hist = Table(title="ops")
    hist.add_column("op")
    hist.add_column("count", justify="right")
    for op, n in program.op_histogram.items():
        hist.add_row(op, str(n))
    console.print(hist)
    console.print(f"parameters: {program.parameter_count:,}")


from tpuedge.verify.command import verify_command  # noqa: E402  (click only; heavy imports run inside)

cli.add_command(verify_command)

from tpuedge.cache_command import cache_command  # noqa: E402  (click only)

cli.add_command(cache_command)

from tpuedge.generate_command import generate_command  # noqa: E402  (click only)

cli.add_command(generate_command)

from tpuedge.serve.command import serve_command  # noqa: E402  (click only)

cli.add_command(serve_command)


def _report_problem(exc: UserError) -> None:
    click.echo(f"error: {exc}", err=True)


# Commands that need no accelerator: they capture, lower, convert, compile (TPU compiles are
# deviceless) and check the result on the host CPU. `verify` is not one: it runs artifacts,
# and a cloud-tpu artifact may run on the user's accelerator.
HOST_ONLY_COMMANDS = frozenset({"build", "check", "export", "inspect", "ops"})


def _command_of(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def _host_cpu_for_host_only_commands(argv: list[str]) -> None:
    """JAX_PLATFORMS=cpu for host-only commands, unless the user set JAX_PLATFORMS (any value).

    Without it, jax probes for a TPU when an installed libtpu is present: a screen of start-up
    warnings the first time litert-torch touches jax, and libtpu's lock file taken, which makes
    deviceless TPU compiles in other processes fail.
    """
    import os

    if _command_of(argv) in HOST_ONLY_COMMANDS:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _quiet_third_party() -> None:
    """Settings for a quiet console that hide nothing: the capture in `main` holds the rest.

    The user's model file is their script: its deprecations show, as Python shows __main__'s
    (a library's are held by the capture, by the module they are attributed to; verbose shows
    them as well).
    """
    import warnings

    from tpuedge.shared_ir.held_logs import quiet_defaults

    quiet_defaults()
    warnings.filterwarnings("default", category=DeprecationWarning)


def _with_held_output(exc: BaseException) -> None:
    """After a failure's own message: what third-party code printed during the run (tail + where)."""
    text = getattr(exc, "held_output", "")
    if text:
        from tpuedge.shared_ir.held_logs import held_output_report

        click.echo(held_output_report(text, getattr(exc, "held_log", None)), err=True)


def main(argv: list[str] | None = None) -> Any:
    import contextlib

    from tpuedge.shared_ir.held_logs import held_third_party_output

    given = sys.argv[1:] if argv is None else list(argv)
    _host_cpu_for_host_only_commands(given)
    _quiet_third_party()
    # third-party logs and warnings of a command are held (a build keeps them in its log); not a
    # server's: it runs until stopped, and what it hears while serving is its operator's to see
    held = contextlib.nullcontext() if _command_of(given) == "serve" else held_third_party_output()
    try:
        with held:
            rv = cli.main(args=argv, prog_name="tpuedge", standalone_mode=False)
        if isinstance(rv, int):
            sys.exit(rv)
        return rv
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except click.exceptions.ClickException as exc:
        exc.show()
        sys.exit(EXIT_USER_ERROR)
    except UserError as exc:
        _report_problem(exc)
        _with_held_output(exc)
        sys.exit(EXIT_USER_ERROR)
    except BudgetError as exc:  # the build worked; its model is not accurate enough (nothing written)
        click.echo(f"error: {exc}", err=True)
        _with_held_output(exc)
        sys.exit(EXIT_BELOW_BUDGET)
    except InternalError as exc:
        click.echo(f"internal error (a bug in tpuedge, please report it): {exc}", err=True)
        raise  # the traceback's notes carry the held output


def entry() -> None:
    """The `tpuedge` command (and `python -m tpuedge.cli`): `main`, then a fast exit.

    Tearing down an interpreter that imported torch, JAX and litert-torch frees every module
    object one by one: about 1.8 s on this project's 2-core machine, more than a cached rebuild
    takes. The output is written by then (atomic renames) and the cache entries too, so the
    process runs the exit handlers, flushes its streams and leaves at once, when no other
    non-daemon thread is alive; otherwise (and for exceptions main does not turn into an exit
    code) Python's own exit runs. Tests and scripts call `main`, which never does this.
    """
    try:
        main()
        code: Any = 0
    except SystemExit as exc:
        code = exc.code
    _leave(code)


def _leave(code: Any) -> None:
    import threading

    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if "torch" not in sys.modules or others:
        sys.exit(code)  # nothing heavy to tear down, or a thread Python must join first
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)  # what sys.exit("message") prints
        code = 1
    import atexit
    import logging
    import os

    atexit._run_exitfuncs()  # temp-folder finalizers and libraries' own exit hooks
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can reach it
            pass
    os._exit(code or 0)


if __name__ == "__main__":  # pragma: no cover
    entry()
