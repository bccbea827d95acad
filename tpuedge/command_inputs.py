"""What every `tpuedge` command takes the same way: MODEL and --target from the flag or from
[tool.tpuedge], and the console the reports print to. Shared by cli.py and build_command.py
(kept apart from both, so neither imports the other)."""

from __future__ import annotations

from tpuedge.shared_ir.errors import UserError

__all__ = ["project_config", "model_arg", "target_arg", "console", "verbose_param", "verbose_option"]


def project_config():
    from tpuedge.config import find_config

    return find_config()


def model_arg(model: str | None) -> str:
    model = model or project_config().get("model")
    if not model:
        raise UserError(
            "No MODEL given and no `model` in [tool.tpuedge] of a pyproject.toml here or above; "
            "pass e.g. `examples/digits/model.py:build` or a `.pt2` file."
        )
    return model


def target_arg(target: str | None, choices) -> str:
    target = target or project_config().get("target")
    if not target:
        raise UserError(f"No --target given and no `target` in [tool.tpuedge]; choose one of: {', '.join(choices)}.")
    if target not in choices:
        raise UserError(f"Target {target!r} is not available here; choose one of: {', '.join(choices)}.")
    return target


def console():
    from rich.console import Console

    return Console(highlight=False)


def _turn_on_verbose(ctx, param, value) -> None:
    if value:
        from tpuedge.shared_ir.held_logs import set_verbose

        set_verbose()


def verbose_param():
    """--verbose: what TPUEDGE_VERBOSE=1 does (third-party output shown as it happens, not held)."""
    import click

    return click.Option(
        ["--verbose"],
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_turn_on_verbose,
        help="Show what third-party libraries print, log and warn (converter, quantizer, runtimes) as it happens, "
        "instead of holding it back for the build's log and for a failure (same as TPUEDGE_VERBOSE=1).",
    )


def verbose_option(function):
    """`verbose_param` as a decorator, for commands declared with click's decorators."""
    function.__dict__.setdefault("__click_params__", []).append(verbose_param())
    return function
