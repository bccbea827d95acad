"""LiteRT aborts the whole process (TFLITE_CHECK, SIGABRT) on an integer ADD or SUB whose rescale
factor is outside (0, 1): no exception, no message, a build gone with exit 134. The runner
refuses such a model before LiteRT loads it (edge/litert_runtime.aborting_op)."""

from __future__ import annotations

import subprocess
import sys

from tflm_single_op import single_op_model


def _load_in_a_child(model: bytes, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "model.tflite"
    path.write_bytes(model)
    code = (
        "import sys\n"
        "from tpuedge.edge.litert.litert_runtime import LiteRTRunner, ModelRunError\n"
        f"data = open({str(path)!r}, 'rb').read()\n"
        "try:\n"
        "    LiteRTRunner(data)\n"
        "    print('loaded')\n"
        "except ModelRunError as exc:\n"
        "    print('refused:', exc)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_an_add_litert_would_abort_on_is_refused_with_its_reason(tmp_path):
    # inputs at scale 0.05, the output at 1e-9: a rescale factor of 0.1 / (2**20 * 1e-9) = 95
    child = _load_in_a_child(single_op_model("ADD", n_inputs=2, out_quant=(1e-9, 0)), tmp_path)
    assert child.returncode == 0, f"the process died (exit {child.returncode}): {child.stderr[-500:]}"
    assert "refused: LiteRT can't run this model: int8 ADD (op 0)" in child.stdout
    assert "outside (0, 1)" in child.stdout


def test_an_ordinary_add_still_loads(tmp_path):
    child = _load_in_a_child(single_op_model("ADD", n_inputs=2), tmp_path)
    assert child.returncode == 0 and "loaded" in child.stdout, child.stderr[-500:]


def test_a_kernel_that_refuses_to_prepare_is_a_model_that_failed_to_run():
    """A model LiteRT reads and a kernel refuses when it prepares (here a MEAN without its axes
    input; in HF's architectures, a 16x8 depthwise convolution over
    activations calibrated to ~1e-9, HF MobileNetV2 at random init) is ModelRunError, which the
    int8 search scores as a candidate that failed to run. It was UserError ("rebuild it with
    `tpuedge build`"), which stopped the search, and the build, on one bad candidate."""
    import pytest

    from tpuedge.edge.litert.litert_runtime import LiteRTRunner, ModelRunError

    with pytest.raises(ModelRunError, match="refused to prepare"):
        LiteRTRunner(single_op_model("MEAN"))


def test_bytes_that_are_no_model_are_still_the_users_error():
    import pytest

    from tpuedge.edge.litert.litert_runtime import LiteRTRunner
    from tpuedge.shared_ir.errors import UserError

    with pytest.raises(UserError, match="could not load this model"):
        LiteRTRunner(single_op_model("ADD", n_inputs=2)[:40])
