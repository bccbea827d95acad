"""`tpuedge build`: its options are the union of the implemented targets' BuildOptions.

An option given for a target that doesn't take it is an error (not silently ignored), and
values come from: flag > [tool.tpuedge.<target>] > [tool.tpuedge] > the target's default.
"""

from __future__ import annotations

from pathlib import Path

import click

from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.targets import BuildOption, implemented_targets

__all__ = ["make_build_command", "resolve_build_options"]


def _click_option(opt: BuildOption, owners: list[str]) -> click.Option:
    flag = "--" + opt.name.replace("_", "-")
    help_text = f"{opt.help} [{', '.join(owners)}]"
    if opt.type is bool:
        return click.Option([f"{flag}/--no-{flag[2:]}", opt.name], default=None, help=help_text)
    ctype = click.Choice(list(opt.type)) if isinstance(opt.type, tuple) else opt.type
    return click.Option([flag, opt.name], type=ctype, default=None, help=help_text)


def _options_by_name(targets) -> dict[str, tuple[BuildOption, list[str]]]:
    merged: dict[str, tuple[BuildOption, list[str]]] = {}
    for name, target in targets.items():
        for opt in target.build_options():
            if opt.name in merged:
                merged[opt.name][1].append(name)
            else:
                merged[opt.name] = (opt, [name])
    return merged


def resolve_build_options(target_name: str, given: dict, config) -> dict:
    """Merge flags over config over defaults for one target; reject options it doesn't take."""
    target = implemented_targets()[target_name]
    accepted = {o.name: o for o in target.build_options()}
    wrong = sorted(k for k, v in given.items() if v is not None and k not in accepted)
    if wrong:
        flags = ", ".join("--" + k.replace("_", "-") for k in wrong)
        raise UserError(
            f"{flags} is not an option of target {target_name}; drop it or choose the target it belongs to."
        )
    from_config = config.target_options(target_name)
    unknown = sorted(set(from_config) - set(accepted))
    if unknown:
        raise UserError(
            f"[tool.tpuedge.{target_name}] in {config.path} sets {', '.join(unknown)}, which target {target_name} "
            f"does not take; its options are: {', '.join(sorted(accepted))}."
        )
    resolved = {}
    for name, opt in accepted.items():
        value = given.get(name)
        if value is None:
            value = from_config.get(name, config.get(name))
        resolved[name] = opt.default if value is None else value
    return resolved


def _target_params() -> list[click.Parameter]:
    """`--target` and every implemented target's options, read from the target registry."""
    targets = implemented_targets()
    params: list[click.Parameter] = [
        click.Option(
            ["--target", "-t"], type=click.Choice(list(targets)) if targets else str, help="Target to build for."
        ),
    ]
    return params + [_click_option(opt, owners) for opt, owners in _options_by_name(targets).values()]


class _BuildCommand(click.Command):
    """Reads the target registry only when `build` itself is parsed or its help is shown, so
    `tpuedge --help` (which lists `build` by its one-line help) never loads the targets."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if not any(p.name == "target" for p in self.params):
            self.params[1:1] = _target_params()
        return super().get_params(ctx)


def make_build_command() -> click.Command:
    from tpuedge.command_inputs import verbose_param

    params: list[click.Parameter] = [
        click.Argument(["model"], required=False),
        click.Option(
            ["--out", "-o"],
            type=click.Path(file_okay=False, path_type=Path),
            help="Output folder (default build/<model>/<target>).",
        ),
        click.Option(
            ["--no-cache", "no_cache"],
            is_flag=True,
            help="Build every stage cold: neither read nor write the build cache (any target).",
        ),
        verbose_param(),
    ]

    def run(model, target, out, no_cache, **given):
        from tpuedge.shared_ir.stage_times import UNNAMED, count_start_up, timed, write_stage_times

        count_start_up()  # every second of the process in a stage: before the build, in it, and in none named
        with timed(UNNAMED):
            _build(model, target, out, no_cache, **given)
        write_stage_times()  # for bench/cold_profile.py, when TPUEDGE_STAGE_TIMES names a file

    def _build(model, target, out, no_cache, **given):
        from tpuedge.command_inputs import console as _console
        from tpuedge.command_inputs import model_arg as _model_arg
        from tpuedge.command_inputs import project_config as _config
        from tpuedge.command_inputs import target_arg as _target_arg
        from tpuedge.shared_ir.model_spec import CAPTURE_OPTIONS, is_model_folder, load_program, spec_name
        from tpuedge.shared_ir.generative.bundle import ProgramBundle
        from tpuedge.shared_ir.cache_keys import build_session
        from tpuedge.shared_ir.held_logs import build_log_path, held_third_party_output

        config = _config()
        target = _target_arg(target, list(implemented_targets()))
        spec = _model_arg(model)
        options = resolve_build_options(target, given, config)
        out = out or config.get("out", target) or Path("build") / spec_name(spec) / target
        from tpuedge import build_replay

        limit = config.get("cache_size")
        key = None if no_cache else build_replay.replay_key(spec, target, options)
        replayed = build_replay.replay(key, Path(out), limit) if key else None
        if replayed is not None:  # nothing imported, nothing rebuilt: the remembered folder, byte for byte
            console = _console()
            console.print(replayed)
            console.print(f"cache: hit {build_replay.STAGE} ({build_replay.cache_folder(limit)})", soft_wrap=True)
            console.print(f"wrote {out}")
            return
        with (
            held_third_party_output(build_log_path(out)),
            build_session(enabled=not no_cache, limit=limit) as cache,  # a .pt2's snapshot is a stage too
        ):
            language_model = is_model_folder(spec) or any(options.get(k) for k in CAPTURE_OPTIONS)
            if options.get("batch") and not spec.endswith(".pt2") and not language_model:
                # a factory's module can be re-traced at the batch asked for (a .pt2 only rebinds if its graph allows);
                # a language model's --batch is its TPU memory plan's, not its capture's
                from tpuedge.cloud.batch_rebind import export_factory_at_batch

                program = export_factory_at_batch(spec, options["batch"])
            else:
                program = load_program(spec, {k: options.get(k) for k in CAPTURE_OPTIONS})
            lowering = {
                k: v for k, v in options.items() if k not in CAPTURE_OPTIONS or not isinstance(program, ProgramBundle)
            }
            artifact = program.lower(target, **lowering).compile(Path(out))
        console = _console()
        report = artifact.report() if hasattr(artifact, "report") else repr(artifact)
        console.print(report)
        if key:
            build_replay.remember(key, Path(out), report, limit)
        console.print(
            cache.describe(), soft_wrap=True
        )  # not in the manifest: a hit gives the same bytes as a cold build
        console.print(f"wrote {out}")

    return _BuildCommand(
        "build",
        params=params,
        callback=run,
        help="Build MODEL for a target: lower the shared IR, convert, run it in the real runtime, write DIR.\n\n"
        "What third-party libraries print, log and warn meanwhile is held: kept in DIR.build.log beside DIR, "
        "shown after the error when the build fails, and shown as it happens with --verbose.",
    )
