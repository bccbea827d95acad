"""The float reference and LiteRT run side by side on a build's accuracy samples."""

from __future__ import annotations

__all__ = ["verification_runs"]


def verification_runs(program, tflite: bytes, samples, channels_last: bool, reference=None):
    """(runner, float reference, LiteRT outputs) on `samples`. A reference not yet computed runs
    here, the IR in torch in a thread of its own while LiteRT runs the model in this one: both
    release the GIL in their kernels, so on two cores the pair takes about the longer of the two
    (DeiT-tiny, ResNet-18: ~0.2 s of a build). Not earlier, beside the lowering: torch.export's
    re-traces switch oneDNN off process-wide while they run (`_ignore_backend_decomps`), and a
    reference computed then would take other kernels. A sample the IR itself refuses raises its
    UserError, which says more than the kernel's, so it comes before a LiteRT refusal."""
    from concurrent.futures import ThreadPoolExecutor

    from tpuedge.edge.litert.float_model import tflite_layout_inputs
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner, ModelRunError

    def litert() -> tuple:
        runner = LiteRTRunner(tflite)
        return runner, [runner.run(tflite_layout_inputs(s, channels_last)) for s in samples]

    if reference is not None:
        runner, outputs = litert()
        return runner, reference, outputs
    with ThreadPoolExecutor(1, thread_name_prefix="tpuedge-float-reference") as pool:
        running = [pool.submit(program.run, *s) for s in samples]  # one task a sample: see `finally`
        try:
            runner, outputs = litert()
            return runner, [sample.result() for sample in running], outputs
        except ModelRunError:  # the IR's own refusal of a sample, if any, is raised first
            for sample in running:
                sample.result()
            raise
        finally:
            # on any error or an interrupt, the samples not started yet are dropped: leaving the
            # pool waits for the one running, not for a reference over 64 evaluation samples
            for sample in running:
                sample.cancel()
