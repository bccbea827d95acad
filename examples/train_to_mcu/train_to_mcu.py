"""Train on the cloud backend, deploy the same weights to a microcontroller: PTQ against QAT on TFLite-Micro.

    python examples/train_to_mcu/train_to_mcu.py [--out build/train_to_mcu]

1. A small 1-D depthwise-separable CNN with SiLU (EfficientNet's block, in 1-D as keyword
   spotting uses it) trains on MNIST-1D (40-sample signals of the ten digits; the `mnist1d`
   package generates the published dataset from its own templates and seed) with
   `tpuedge.cloud.train_step` over a mesh of 8 host devices ("data:8"), on the dataset's
   4000 training signals. 512 validation signals are drawn by the same generator with another
   seed.
2. Post-training int8 (PTQ): the float model is built for mcu with calibration ranges from
   200 training signals.
3. Quantization-aware training (QAT): the same float weights train up to 8 more epochs with
   int8 faked in the forward (`quantize="int8"`). After each epoch the int8 eval (which
   computes each op with TFLite's integer arithmetic, so it is what TFLite-Micro will output)
   scores the validation signals; the best epoch's state is kept. `step.program()` carries the
   trained activation ranges, so its mcu build takes no calibration data.
4. Both int8 models run in TFLite-Micro on the 1000 test signals (never used for training,
   calibration or choosing anything), and `tpuedge.verify` checks the QAT build against the IR.

Prints the float, PTQ and QAT accuracies and how closely TFLite-Micro follows the QAT model's
int8 eval on XLA; writes them to OUT/results.json.
"""

from __future__ import annotations

import os

# eight CPU devices for the "data:8" mesh, unless the caller chose a platform or flags
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import tpuedge  # noqa: E402
import tpuedge.cloud  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mnist1d_data import mnist1d_split, mnist1d_validation  # noqa: E402

BATCH = 64
FLOAT_EPOCHS = 40
QAT_EPOCHS = 8  # at most; the epoch the validation signals score best is kept
QAT_LR = 3e-4  # a tenth of the float training's: QAT fine-tunes trained weights
CALIBRATION = 200


class SwishDSCNN(nn.Module):
    """stem conv, three strided depthwise + pointwise blocks, SiLU after each conv, average pool,
    classifier (no BatchNorm, to keep it small)."""

    def __init__(self, width: int = 32, blocks: int = 3):
        super().__init__()
        self.stem = nn.Conv1d(1, width, 5, padding=2)
        self.depthwise = nn.ModuleList(
            nn.Conv1d(width, width, 3, stride=2, padding=1, groups=width) for _ in range(blocks)
        )
        self.pointwise = nn.ModuleList(nn.Conv1d(width, width, 1) for _ in range(blocks))
        self.classifier = nn.Linear(width, 10)

    def forward(self, signal):
        x = F.silu(self.stem(signal))
        for depthwise, pointwise in zip(self.depthwise, self.pointwise):
            x = F.silu(pointwise(F.silu(depthwise(x))))
        return self.classifier(x.mean(2))


def train(step, x, y, epochs: int, seed: int) -> float:
    order_rng = np.random.default_rng(seed)
    loss = float("nan")
    for _ in range(epochs):
        order = order_rng.permutation(len(x))
        for i in range(0, len(order) - BATCH + 1, BATCH):  # fixed batch shape: one compile
            loss = float(step(x[order[i : i + BATCH]], y[order[i : i + BATCH]]))
    return loss


def int8_eval_outputs(step, x) -> np.ndarray:
    """The QAT step's int8 eval of `x` (whole batches; the step's batch shape)."""
    usable = len(x) - len(x) % BATCH
    return np.concatenate([step.quantized_outputs(x[i : i + BATCH])[0] for i in range(0, usable, BATCH)])


def qat_epochs(step, x, y, x_val, y_val, epochs: int, seed: int) -> list[float]:
    """Train up to `epochs`, keep the state whose int8 eval scores best on the validation
    signals (the earlier on a tie); returns each epoch's validation accuracy."""
    scores: list[float] = []
    best = None
    for epoch in range(epochs):
        train(step, x, y, 1, seed + epoch)
        scores.append(float((int8_eval_outputs(step, x_val).argmax(1) == y_val).mean()))
        if scores[-1] > max(scores[:-1], default=-1.0):
            best = step.state_dict()
    step.load_state_dict(best)
    return scores


def tflm_accuracy(artifact, x, y) -> tuple[float, np.ndarray]:
    outputs = np.concatenate([artifact.run(x[i : i + 1])[0] for i in range(len(x))])
    return float((outputs.argmax(1) == y).mean()), outputs


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("build/train_to_mcu"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--qat-epochs", type=int, default=QAT_EPOCHS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    x_train, y_train, x_test, y_test = mnist1d_split()
    x_val, y_val = mnist1d_validation()  # chooses the QAT epoch; 512 = 8 whole batches
    example = (torch.from_numpy(x_train[:BATCH]), torch.from_numpy(y_train[:BATCH]))

    torch.manual_seed(args.seed)
    model = SwishDSCNN()
    step = tpuedge.cloud.train_step(
        model, F.cross_entropy, torch.optim.Adam(model.parameters(), lr=3e-3), example, mesh="data:8"
    )
    print(
        f"float training on {len(step.mesh.devices.flat)} devices: final loss {train(step, x_train, y_train, FLOAT_EPOCHS, args.seed):.4f}"
    )
    step.sync_to(model)
    model.eval()
    with torch.no_grad():
        float_accuracy = float((model(torch.from_numpy(x_test)).argmax(1).numpy() == y_test).mean())

    if args.out.exists():
        shutil.rmtree(args.out)
    float_program = tpuedge.export(model, (torch.zeros(1, 1, 40),), name="swish_ds_cnn")
    calibration = [(x_train[i : i + 1],) for i in range(CALIBRATION)]
    ptq = tpuedge.build(
        float_program,
        "mcu",
        args.out / "ptq_mcu",
        calibration=calibration,
        eval=(x_test, y_test),
        allow_below_budget=True,
    )
    ptq_accuracy, _ = tflm_accuracy(ptq, x_test, y_test)

    qat_step = tpuedge.cloud.train_step(
        model, F.cross_entropy, torch.optim.Adam(model.parameters(), lr=QAT_LR), example, mesh="data:8", quantize="int8"
    )
    validation = qat_epochs(qat_step, x_train, y_train, x_val, y_val, args.qat_epochs, args.seed + 1)
    chosen = int(np.argmax(validation)) + 1
    print(
        f"QAT: int8 validation accuracy by epoch {', '.join(f'{100 * v:.1f}%' for v in validation)}; keeping epoch {chosen}"
    )
    qat_program = qat_step.program(batch_size=1)
    qat_program.save(args.out / "qat_program.pt2")
    qat = tpuedge.build(qat_program, "mcu", args.out / "qat_mcu", eval=(x_test, y_test))  # no calibration
    qat_accuracy, tflm_outputs = tflm_accuracy(qat, x_test, y_test)

    # TFLite-Micro against the QAT model's int8 eval on XLA (TFLite's kernel arithmetic), in output int8 steps
    fake_quant = int8_eval_outputs(qat_step, x_test)
    usable = len(fake_quant)
    from tpuedge.quantize.activation_ranges import int8_affine

    step_size, _ = int8_affine(*qat_program.activation_ranges.ranges[_output_point(qat_program)])
    lsb = np.abs(tflm_outputs[:usable] - fake_quant) / step_size
    verified = tpuedge.verify(
        args.out / "qat_mcu", qat_program, [(x,) for x in x_test[:, None]], labels=y_test, max_drop=0.3
    )

    results = {
        "test_samples": len(x_test),
        "train_samples": len(x_train),
        "validation_samples": len(x_val),
        "qat_validation_accuracy_by_epoch": validation,
        "qat_epoch_kept": chosen,
        "float_accuracy": float_accuracy,
        "ptq_tflm_accuracy": ptq_accuracy,
        "qat_tflm_accuracy": qat_accuracy,
        "qat_fake_quant_accuracy": float((fake_quant.argmax(1) == y_test[:usable]).mean()),
        "fake_quant_samples": usable,
        "ptq_loss_points": round(100 * (float_accuracy - ptq_accuracy), 2),
        "qat_loss_points": round(100 * (float_accuracy - qat_accuracy), 2),
        "tflm_vs_fake_quant_identical": float((lsb < 1e-3).mean()),
        "tflm_vs_fake_quant_within_1_lsb": float((lsb <= 1.0 + 1e-4).mean()),
        "tflm_vs_fake_quant_max_lsb": float(lsb.max()),
        "tflm_vs_fake_quant_top1_agreement": float((tflm_outputs[:usable].argmax(1) == fake_quant.argmax(1)).mean()),
        "verify_passed": verified.passed,
    }
    print()
    print(f"  {'model':<28}{'accuracy':>10}{'loss (points)':>16}")
    print(f"  {'float (XLA, cloud backend)':<28}{100 * float_accuracy:>9.2f}%{'':>16}")
    print(f"  {'PTQ int8 on TFLite-Micro':<28}{100 * ptq_accuracy:>9.2f}%{results['ptq_loss_points']:>16.2f}")
    print(f"  {'QAT int8 on TFLite-Micro':<28}{100 * qat_accuracy:>9.2f}%{results['qat_loss_points']:>16.2f}")
    print(
        f"  {'(QAT int8 eval on XLA)':<28}{100 * results['qat_fake_quant_accuracy']:>9.2f}%   on the first {usable} signals"
    )
    print(
        f"  on {len(x_test)} held-out test signals; TFLite-Micro vs the QAT int8 eval on XLA: "
        f"{100 * results['tflm_vs_fake_quant_identical']:.1f}% of output values identical, "
        f"{100 * results['tflm_vs_fake_quant_within_1_lsb']:.1f}% within 1 LSB "
        f"(max {results['tflm_vs_fake_quant_max_lsb']:.2f}), same top-1 on "
        f"{100 * results['tflm_vs_fake_quant_top1_agreement']:.1f}%"
    )
    print(verified)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


def _output_point(program) -> str:
    """The IR node of the model's output (its int8 range is the output's step)."""
    out = next(n for n in program.exported_program.graph.nodes if n.op == "output")
    return out.args[0][0].name


if __name__ == "__main__":
    main()
