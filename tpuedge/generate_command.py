"""`tpuedge generate DIR --prompt TEXT`: text from a built language model, in its target's real
runtime (LiteRT for android, TFLite-Micro for mcu, XLA for cloud-tpu), with its timings."""

from __future__ import annotations

from pathlib import Path

import click

from tpuedge.command_inputs import verbose_option

__all__ = ["generate_command"]


@click.command("generate")
@click.argument("artifact", type=click.Path(path_type=Path))
@click.option("--prompt", "-p", help="The prompt text (the model's tokenizer encodes it).")
@click.option("--prompt-ids", help="The prompt as token ids, e.g. 1,2,3 (for a model built without a tokenizer).")
@click.option("--max-new-tokens", "-n", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--temperature", type=click.FloatRange(min=0.0), default=0.0, show_default=True, help="0: greedy.")
@click.option(
    "--top-k", type=click.IntRange(min=0), default=0, show_default=True, help="Sample among the k most likely (0: all)."
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sampling.")
@click.option("--chat", is_flag=True, help="Wrap the prompt as one user turn in the model's chat template.")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True, help="Runtime threads (LiteRT).")
@verbose_option
def generate_command(
    artifact: Path,
    prompt: str | None,
    prompt_ids: str | None,
    max_new_tokens: int,
    temperature: float,
    top_k: int,
    seed: int,
    chat: bool,
    threads: int,
) -> None:
    """Generate text from a language model built by `tpuedge build` (android, mcu or cloud-tpu)."""
    from tpuedge.command_inputs import console
    from tpuedge.shared_ir.artifact import load
    from tpuedge.shared_ir.errors import UserError
    from tpuedge.shared_ir.generative.generating_artifact import GeneratingArtifact

    if (prompt is None) == (prompt_ids is None):
        raise UserError("Give the prompt as --prompt TEXT or --prompt-ids 1,2,3 (one of them).")
    built = load(artifact)
    if not isinstance(built, GeneratingArtifact):
        raise UserError(
            f"{artifact} is not a language model build (it has no prefill and decode entry points); "
            "`tpuedge generate` runs models built from a decoder LM. Use `tpuedge verify` for other models."
        )
    if prompt_ids is not None:
        try:
            given = [int(t) for t in prompt_ids.split(",") if t.strip()]
        except ValueError:
            raise UserError(
                f"--prompt-ids takes integers separated by commas, e.g. 1,2,3; got {prompt_ids!r}."
            ) from None
    else:
        given = prompt
    result = built.generate(
        given, max_new_tokens, temperature=temperature, top_k=top_k, seed=seed, chat=chat, num_threads=threads
    )
    out = console()
    g = result.generation
    if result.text is not None:
        out.print((prompt or "") + result.text, markup=False, highlight=False, soft_wrap=True)
    else:
        out.print(" ".join(map(str, g.new_ids)), markup=False, highlight=False)
    out.print(
        f"[dim]{built.runtime_name}: {len(g.prompt_ids)} prompt tokens, {len(g.new_ids)} new ({g.stopped_by}); time to first token "
        f"{1000 * g.time_to_first_token_s:.1f} ms, prefill {g.prefill_tokens_per_s:.1f} tokens/s, decode "
        f"{g.decode_tokens_per_s:.1f} tokens/s, peak memory {result.peak_rss_bytes / 2**20:.0f} MiB[/dim]"
    )
