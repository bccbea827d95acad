"""Op-coverage survey: `Program.check` for android, mcu and cloud-tpu over many architectures.

    python bench/zoo.py --setup                  # once: torchvision + timm, privately
    python bench/arch_survey.py                  # every architecture below (a few minutes)
    python bench/arch_survey.py tv_swin_t timm_levit_128s

    python bench/arch_survey.py --build          # also convert each: android int8 and mcu (about an hour)
    python bench/arch_survey.py --build --build-targets cloud-tpu   # the cloud export and its self-check
    python bench/arch_survey.py timm_efficientvit_b0 --build --build-targets android-search  # the default int8 search

Random-init torchvision and timm models at small input sizes (BatchNorm statistics re-estimated
on 32 photo crops, as in the zoo): no conversion, no weights that matter, so it is cheap enough
to run over dozens of architectures and find the ops a target refuses (or a check that raises)
before anyone builds. The zoo (bench/zoo.py) then measures the
models it finds worth building. With --build each model is also built, as a user would, for
android (static int8, `--strict-int8`: the converter and the quantizer without the per-op
search, which random weights would send through every recipe) and mcu (esp32s3), calibrated on
16 photo crops and written even below its accuracy budget (random weights: the cosine says
whether it runs, not what a trained model scores): a check that passes and a build that fails
is the finding. Writes
bench/results/arch_survey.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # the checkout's tpuedge wins over an installed copy

TARGETS = ("android", "mcu", "cloud-tpu")
# --build-targets also takes android's default int8 search (float islands where int8 costs too
# much; 32 photo crops, part held out for the budget), where "android" builds strict int8
BUILD_TARGETS = (*TARGETS, "android-search")

# name -> (library, constructor name, input side, constructor keyword arguments)
ARCHITECTURES = {
    "tv_densenet121": ("tv", "densenet121", 64, {}),
    "tv_googlenet": ("tv", "googlenet", 64, {"aux_logits": False, "init_weights": True}),
    "tv_inception_v3": ("tv", "inception_v3", 96, {"aux_logits": False, "init_weights": True}),
    "tv_vit_b_16": ("tv", "vit_b_16", 224, {}),
    "tv_swin_t": ("tv", "swin_t", 224, {}),
    "tv_maxvit_t": ("tv", "maxvit_t", 224, {}),
    "tv_convnext_tiny": ("tv", "convnext_tiny", 64, {}),
    "tv_resnext50_32x4d": ("tv", "resnext50_32x4d", 64, {}),
    "tv_efficientnet_v2_s": ("tv", "efficientnet_v2_s", 64, {}),
    "tv_mobilenet_v3_large": ("tv", "mobilenet_v3_large", 96, {}),
    "tv_mnasnet0_5": ("tv", "mnasnet0_5", 96, {}),
    "tv_squeezenet1_1": ("tv", "squeezenet1_1", 96, {}),
    "tv_alexnet": ("tv", "alexnet", 96, {}),
    "tv_vgg11": ("tv", "vgg11", 64, {}),
    "tv_lraspp_mobilenet_v3_large": ("tv.segmentation", "lraspp_mobilenet_v3_large", 96, {"weights_backbone": None}),
    "tv_deeplabv3_mobilenet_v3_large": (
        "tv.segmentation",
        "deeplabv3_mobilenet_v3_large",
        96,
        {"weights_backbone": None},
    ),
    "timm_ghostnet_100": ("timm", "ghostnet_100", 96, {}),
    "timm_mobileone_s0": ("timm", "mobileone_s0", 96, {}),
    "timm_levit_128s": ("timm", "levit_128s", 224, {}),
    "timm_efficientvit_b0": ("timm", "efficientvit_b0", 224, {}),
    "timm_lcnet_050": ("timm", "lcnet_050", 96, {}),
    "timm_repvit_m1": ("timm", "repvit_m1", 224, {}),
    "timm_fastvit_t8": ("timm", "fastvit_t8", 256, {}),
    "timm_mixnet_s": ("timm", "mixnet_s", 96, {}),
    "timm_regnetx_002": ("timm", "regnetx_002", 96, {}),
    "timm_coat_tiny": ("timm", "coat_tiny", 224, {}),
    "timm_poolformer_s12": ("timm", "poolformer_s12", 224, {}),
    "timm_edgenext_xx_small": ("timm", "edgenext_xx_small", 256, {}),
    "timm_mobilevitv2_050": ("timm", "mobilevitv2_050", 256, {}),
    "timm_hgnetv2_b0": ("timm", "hgnetv2_b0", 224, {}),
    "timm_tf_efficientnet_lite0": ("timm", "tf_efficientnet_lite0", 96, {}),
    "timm_mobilenetv4_conv_small": ("timm", "mobilenetv4_conv_small", 96, {}),
    "tv_regnet_x_400mf": ("tv", "regnet_x_400mf", 96, {}),
    "tv_resnet50": ("tv", "resnet50", 64, {}),
    "tv_shufflenet_v2_x1_0": ("tv", "shufflenet_v2_x1_0", 96, {}),
    "timm_resnet18d": ("timm", "resnet18d", 96, {}),
    "timm_efficientformer_l1": ("timm", "efficientformer_l1", 224, {}),
    "timm_efficientformerv2_s0": ("timm", "efficientformerv2_s0", 224, {}),
    "timm_tiny_vit_5m_224": ("timm", "tiny_vit_5m_224", 224, {}),
    "timm_vit_tiny_patch16_224": ("timm", "vit_tiny_patch16_224", 224, {}),
    "timm_pvt_v2_b0": ("timm", "pvt_v2_b0", 224, {}),
    "timm_rexnet_100": ("timm", "rexnet_100", 96, {}),
    "timm_dla34": ("timm", "dla34", 96, {}),
    "timm_xcit_nano_12_p16_224": ("timm", "xcit_nano_12_p16_224", 224, {}),
    "timm_gcvit_xxtiny": ("timm", "gcvit_xxtiny", 224, {}),
    "timm_visformer_tiny": ("timm", "visformer_tiny", 224, {}),
    "timm_starnet_s1": ("timm", "starnet_s1", 96, {}),
    "timm_mobilevit_xxs": ("timm", "mobilevit_xxs", 256, {}),
    "timm_semnasnet_050": ("timm", "semnasnet_050", 96, {}),
    "timm_fbnetc_100": ("timm", "fbnetc_100", 96, {}),
    "timm_nf_regnet_b0": ("timm", "nf_regnet_b0", 96, {}),
    "timm_ese_vovnet19b_dw": ("timm", "ese_vovnet19b_dw", 96, {}),
    "timm_skresnet18": ("timm", "skresnet18", 96, {}),
    "timm_resnest14d": ("timm", "resnest14d", 96, {}),
    "timm_ecaresnet26t": ("timm", "ecaresnet26t", 96, {}),
    "timm_botnet26t_256": ("timm", "botnet26t_256", 256, {}),
    "timm_halonet26t": ("timm", "halonet26t", 256, {}),
    "timm_volo_d1_224": ("timm", "volo_d1_224", 224, {}),
    "timm_pit_ti_224": ("timm", "pit_ti_224", 224, {}),
    "timm_convit_tiny": ("timm", "convit_tiny", 224, {}),
    "timm_cait_xxs24_224": ("timm", "cait_xxs24_224", 224, {}),
    "timm_eva02_tiny_patch14_224": ("timm", "eva02_tiny_patch14_224", 224, {}),
    "timm_swin_tiny_patch4_window7_224": ("timm", "swin_tiny_patch4_window7_224", 224, {}),
    "timm_efficientvit_m0": ("timm", "efficientvit_m0", 224, {}),
    "timm_mixer_s16_224": ("timm", "mixer_s16_224", 224, {}),
    "timm_hardcorenas_a": ("timm", "hardcorenas_a", 96, {}),
    "timm_inception_next_atto": ("timm", "inception_next_atto", 96, {}),
    "timm_sequencer2d_s": ("timm", "sequencer2d_s", 224, {}),
    # families none of the above covers
    "tv_swin_v2_t": ("tv", "swin_v2_t", 256, {}),
    "tv_fcn_resnet50": ("tv.segmentation", "fcn_resnet50", 96, {"weights_backbone": None}),
    "timm_mobilenetv4_hybrid_medium": ("timm", "mobilenetv4_hybrid_medium", 256, {}),
    "timm_caformer_s18": ("timm", "caformer_s18", 224, {}),
    "timm_coatnet_nano_rw_224": ("timm", "coatnet_nano_rw_224", 224, {}),
    "timm_crossvit_9_240": ("timm", "crossvit_9_240", 240, {}),
    "timm_twins_svt_small": ("timm", "twins_svt_small", 224, {}),
    "timm_resmlp_12_224": ("timm", "resmlp_12_224", 224, {}),
    "timm_gmlp_ti16_224": ("timm", "gmlp_ti16_224", 224, {}),
    "timm_ghostnetv2_100": ("timm", "ghostnetv2_100", 96, {}),
    "timm_convnextv2_atto": ("timm", "convnextv2_atto", 96, {}),
    "timm_tnt_s_patch16_224": ("timm", "tnt_s_patch16_224", 224, {}),
    "timm_nest_tiny": ("timm", "nest_tiny", 224, {}),
    "timm_deit3_small_patch16_224": ("timm", "deit3_small_patch16_224", 224, {}),
    "timm_maxvit_nano_rw_256": ("timm", "maxvit_nano_rw_256", 256, {}),
    "timm_repghostnet_050": ("timm", "repghostnet_050", 96, {}),
    "timm_fastvit_mci0": ("timm", "fastvit_mci0", 256, {}),
    "timm_hiera_tiny_224": ("timm", "hiera_tiny_224", 224, {}),
    "timm_davit_tiny": ("timm", "davit_tiny", 224, {}),
    "timm_focalnet_tiny_srf": ("timm", "focalnet_tiny_srf", 224, {}),
    "timm_mvitv2_tiny": ("timm", "mvitv2_tiny", 224, {}),
    "timm_shvit_s1": ("timm", "shvit_s1", 224, {}),
    "timm_mambaout_femto": ("timm", "mambaout_femto", 224, {}),
    "timm_rdnet_tiny": ("timm", "rdnet_tiny", 224, {}),
}


def build(name: str):
    import torch

    from zoo_models import torchvision_models, with_image_statistics

    library, arch, side, kwargs = ARCHITECTURES[name]
    models = torchvision_models()
    if library == "timm":
        import timm

        make = lambda: timm.create_model(arch, pretrained=False, **kwargs)  # noqa: E731
    else:
        namespace = models.segmentation if library == "tv.segmentation" else models
        make = lambda: getattr(namespace, arch)(weights=None, **kwargs)  # noqa: E731
    torch.manual_seed(0)
    # BatchNorm statistics re-estimated on photo crops, as the zoo does: with the init's (mean 0,
    # variance 1) a deep random net's output collapses to a constant and every int8 cosine is noise
    module = with_image_statistics(make().eval(), side)
    return module, (torch.randn(1, 3, side, side),)


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:240]}"


def _built(program, target: str, side: int) -> str:
    """'ok <cosine>' (android: and its size against the zoo's int8 goal, 1.1x parameter bytes +
    32 KiB), 'does not fit: ...' (converted and run, too big for the board) or the error."""
    import tempfile

    import zoo_data

    import tpuedge
    from tpuedge.shared_ir.errors import UserError

    calibration = [[x[None]] for x in zoo_data.image_crops(32 if target == "android-search" else 16, side, 1)]
    options = {  # cloud-tpu: the export and its self-check against torch (a wrong lowering fails it)
        "android": {"quantize": "int8", "strict_int8": True, "calibration": calibration, "allow_below_budget": True},
        "android-search": {"quantize": "int8", "calibration": calibration, "allow_below_budget": True},
        "mcu": {"board": "esp32s3", "eval": "none", "calibration": calibration, "allow_below_budget": True},
        "cloud-tpu": {},
    }[target]
    with tempfile.TemporaryDirectory() as tmp:
        try:
            artifact = tpuedge.build(
                program, target.split("-")[0] if target != "cloud-tpu" else target, f"{tmp}/out", **options
            )
        except UserError as exc:
            if "does not fit" in str(exc):
                return f"does not fit: {' '.join(str(exc).split())[:160]}"
            return _first_line(exc)
        except Exception as exc:  # noqa: BLE001 - a build that fails is the finding
            return _first_line(exc)
        size = Path(f"{tmp}/out/model.tflite").stat().st_size if target.startswith("android") else 0
    if target == "cloud-tpu":
        return "ok"
    budget = artifact.manifest["accuracy_budget"]
    cosines = budget["measured"]["sample_cosine_per_output"]
    verdict = f"ok {min(cosines):.4f}" if cosines else "ok"
    if target == "android-search":  # held out from its calibration: the default build's own verdict
        verdict += "" if budget.get("met") else " (below budget)"
    if size:
        goal = 1.1 * program.parameter_count + 32 * 1024
        verdict += f" {size:,} B {size / goal:.3f}x goal{' (over)' if size > goal else ''}"
    return verdict


def survey(name: str, build_targets: tuple[str, ...] = ()) -> dict:
    import tpuedge

    start, row = time.perf_counter(), {"model": name}
    try:
        module, example = build(name)
        program = tpuedge.export(module, example, name=name)
        row["parameters"] = program.parameter_count
        for target in TARGETS:
            try:
                row[target] = [f"{p.subject}: {p.message}" for p in program.check(target)]
            except Exception as exc:  # noqa: BLE001 - a check that raises is a finding too
                row[target] = [f"check raised {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"]
        for target in build_targets:
            row[f"build {target}"] = _built(program, target, ARCHITECTURES[name][2])
    except Exception as exc:  # noqa: BLE001 - so is a model that does not export
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", help=f"default: all {len(ARCHITECTURES)}")
    parser.add_argument("--build", action="store_true", help="also build each for android (strict int8) and mcu")
    parser.add_argument(
        "--build-targets",
        default="android,mcu",
        help="with --build: which of android (strict int8), android-search (the default int8 search), mcu, cloud-tpu (default: android,mcu)",
    )
    parser.add_argument("--out", type=Path, default=HERE / "results" / "arch_survey.json")
    opts = parser.parse_args()
    unknown = sorted(set(opts.models) - set(ARCHITECTURES))
    if set(opts.build_targets.split(",")) - set(BUILD_TARGETS):
        parser.error(f"--build-targets: choose from {', '.join(BUILD_TARGETS)}")
    if unknown:
        parser.error(f"unknown architecture(s) {', '.join(unknown)}; known: {', '.join(ARCHITECTURES)}")
    rows = []
    for name in opts.models or list(ARCHITECTURES):
        row = survey(name, tuple(t for t in opts.build_targets.split(",") if t) if opts.build else ())
        rows.append(row)
        verdicts = (
            [row["error"]]
            if "error" in row
            else [f"{t}: {'ok' if not row[t] else '; '.join(p.split(':')[0] for p in row[t])}" for t in TARGETS]
        )
        verdicts += [f"{key}: {value[:120]}" for key, value in row.items() if key.startswith("build ")]
        print(f"{name:<34} {' | '.join(verdicts)}", flush=True)
    clean = {t: sum(1 for r in rows if "error" not in r and not r[t]) for t in TARGETS}
    print("clean: " + ", ".join(f"{t} {n}/{len(rows)}" for t, n in clean.items()))
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps({"rows": rows, "clean": clean}, indent=1) + "\n")
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
