"""Train on the cloud backend, deploy the same weights to a microcontroller: PTQ against QAT on TFLite-Micro.

    python examples/train_to_mcu/train_to_mcu.py [--out build/train_to_mcu]

1. A small depthwise-separable CNN trains on scikit-learn's digits (8x8 images, shipped with
   the package) with `tpuedge.cloud.train_step` over a mesh of 8 host devices ("data:8").
2. Post-training int8 (PTQ): the float model is built for mcu with calibration ranges from
   200 training images.
3. Quantization-aware training (QAT): the same float weights train 3 more epochs with int8
   faked in the forward (`quantize="int8"`); `step.program()` carries the trained activation
   ranges, so its mcu build takes no calibration data.
4. Both int8 models run in TFLite-Micro on the 360 test images (never used for training,
   calibration or choosing anything), and `tpuedge.verify` checks the QAT build against the IR.

Prints the float, PTQ and QAT accuracies and how closely TFLite-Micro follows the QAT model's
fake-quant eval on XLA; writes them to OUT/results.json.
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "digits"))

import tpuedge  # noqa: E402
import tpuedge.cloud  # noqa: E402
from model import digits_split  # noqa: E402  (examples/digits/model.py: the fixed split)

BATCH = 64
FLOAT_EPOCHS = 20
QAT_EPOCHS = 3
CALIBRATION = 200


class TinyDSCNN(nn.Module):
    """stem conv, depthwise 3x3, pointwise 1x1, max pool, classifier (no BatchNorm: see the README)."""

    def __init__(self, width: int = 16):
        super().__init__()
        self.stem = nn.Conv2d(1, width, 3, padding=1)
        self.depthwise = nn.Conv2d(width, width, 3, padding=1, groups=width)
        self.pointwise = nn.Conv2d(width, 2 * width, 1)
        self.classifier = nn.Linear(2 * width * 4 * 4, 10)

    def forward(self, image):
        x = F.relu(self.stem(image))
        x = F.relu(self.depthwise(x))
        x = F.max_pool2d(F.relu(self.pointwise(x)), 2)
        return self.classifier(x.flatten(1))


def train(step, x, y, epochs: int, seed: int) -> float:
    order_rng = np.random.default_rng(seed)
    loss = float("nan")
    for _ in range(epochs):
        order = order_rng.permutation(len(x))
        for i in range(0, len(order) - BATCH + 1, BATCH):  # fixed batch shape: one compile
            loss = float(step(x[order[i : i + BATCH]], y[order[i : i + BATCH]]))
    return loss


def tflm_accuracy(artifact, x, y) -> tuple[float, np.ndarray]:
    outputs = np.concatenate([artifact.run(x[i : i + 1].transpose(0, 2, 3, 1))[0] for i in range(len(x))])
    return float((outputs.argmax(1) == y).mean()), outputs


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("build/train_to_mcu"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    x_train, y_train, x_test, y_test = digits_split()
    example = (torch.from_numpy(x_train[:BATCH]), torch.from_numpy(y_train[:BATCH]))

    torch.manual_seed(args.seed)
    model = TinyDSCNN()
    step = tpuedge.cloud.train_step(model, F.cross_entropy, torch.optim.Adam(model.parameters(), lr=3e-3), example, mesh="data:8")
    print(f"float training on {len(step.mesh.devices.flat)} devices: final loss {train(step, x_train, y_train, FLOAT_EPOCHS, args.seed):.4f}")
    step.sync_to(model)
    model.eval()
    with torch.no_grad():
        float_accuracy = float((model(torch.from_numpy(x_test)).argmax(1).numpy() == y_test).mean())

    if args.out.exists():
        shutil.rmtree(args.out)
    float_program = tpuedge.export(model, (torch.zeros(1, 1, 8, 8),), name="tiny_ds_cnn")
    calibration = [(x_train[i : i + 1],) for i in range(CALIBRATION)]
    ptq = tpuedge.build(float_program, "mcu", args.out / "ptq_mcu", calibration=calibration,
                        eval=(x_test, y_test), allow_below_budget=True)
    ptq_accuracy, _ = tflm_accuracy(ptq, x_test, y_test)

    qat_step = tpuedge.cloud.train_step(model, F.cross_entropy, torch.optim.Adam(model.parameters(), lr=1e-3), example,
                                        mesh="data:8", quantize="int8")
    print(f"QAT: final loss {train(qat_step, x_train, y_train, QAT_EPOCHS, args.seed + 1):.4f}")
    qat_program = qat_step.program(batch_size=1)
    qat_program.save(args.out / "qat_program.pt2")
    qat = tpuedge.build(qat_program, "mcu", args.out / "qat_mcu", eval=(x_test, y_test))  # no calibration
    qat_accuracy, tflm_outputs = tflm_accuracy(qat, x_test, y_test)

    # TFLite-Micro against the QAT model's fake-quant eval on XLA, in output int8 steps
    usable = len(x_test) - len(x_test) % BATCH
    fake_quant = np.concatenate([qat_step.quantized_outputs(x_test[i : i + BATCH])[0] for i in range(0, usable, BATCH)])
    from tpuedge.quantize.activation_ranges import int8_affine

    step_size, _ = int8_affine(*qat_program.activation_ranges.ranges[_output_point(qat_program)])
    lsb = np.abs(tflm_outputs[:usable] - fake_quant) / step_size
    verified = tpuedge.verify(args.out / "qat_mcu", qat_program, [(x,) for x in x_test[:, None]], labels=y_test, max_drop=0.3)

    results = {
        "test_samples": len(x_test),
        "float_accuracy": float_accuracy,
        "ptq_tflm_accuracy": ptq_accuracy,
        "qat_tflm_accuracy": qat_accuracy,
        "ptq_loss_points": round(100 * (float_accuracy - ptq_accuracy), 2),
        "qat_loss_points": round(100 * (float_accuracy - qat_accuracy), 2),
        "tflm_vs_fake_quant_identical": float((lsb < 1e-3).mean()),
        "tflm_vs_fake_quant_within_1_lsb": float((lsb <= 1.0 + 1e-4).mean()),
        "tflm_vs_fake_quant_max_lsb": float(lsb.max()),
        "verify_passed": verified.passed,
    }
    print()
    print(f"  {'model':<28}{'accuracy':>10}{'loss (points)':>16}")
    print(f"  {'float (XLA, cloud backend)':<28}{100 * float_accuracy:>9.2f}%{'':>16}")
    print(f"  {'PTQ int8 on TFLite-Micro':<28}{100 * ptq_accuracy:>9.2f}%{results['ptq_loss_points']:>16.2f}")
    print(f"  {'QAT int8 on TFLite-Micro':<28}{100 * qat_accuracy:>9.2f}%{results['qat_loss_points']:>16.2f}")
    print(f"  on {len(x_test)} held-out test images; TFLite-Micro vs the QAT fake-quant eval on XLA: "
          f"{100 * results['tflm_vs_fake_quant_identical']:.1f}% of output values identical, "
          f"{100 * results['tflm_vs_fake_quant_within_1_lsb']:.1f}% within 1 LSB "
          f"(max {results['tflm_vs_fake_quant_max_lsb']:.2f})")
    print(verified)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


def _output_point(program) -> str:
    """The IR node of the model's output (its int8 range is the output's step)."""
    out = next(n for n in program.exported_program.graph.nodes if n.op == "output")
    return out.args[0][0].name


if __name__ == "__main__":
    main()
