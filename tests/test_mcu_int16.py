"""mcu: int16 activations (16x8) where the int8 search measures int8 costs accuracy, integer
only (no float island), checked against TFLite-Micro's own kernels before a recipe is scored."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import tpuedge
from tpuedge.shared_ir.errors import BudgetError, UserError


class _OutlierChannel(torch.nn.Module):
    """A Linear with one output channel 400x the others, into a LayerNorm: int8 spends its 256
    steps on that channel's range and the LayerNorm's statistics of the rest are lost."""

    def __init__(self, width: int = 32):
        super().__init__()
        self.fc1, self.ln, self.fc2 = torch.nn.Linear(16, width), torch.nn.LayerNorm(width), torch.nn.Linear(width, 4)
        with torch.no_grad():
            self.fc1.weight[0] *= 400.0

    def forward(self, x):
        return self.fc2(self.ln(self.fc1(x)))


@pytest.fixture(scope="module")
def outlier():
    torch.manual_seed(0)
    program = tpuedge.export(_OutlierChannel().eval(), (torch.zeros(1, 16),), name="outlier")
    rng = np.random.default_rng(0)
    return program, [(rng.standard_normal((1, 16)).astype(np.float32),) for _ in range(32)]


def test_int16_where_int8_misses_the_budget_and_strict_int8_fails_loudly(outlier, tmp_path):
    from tpuedge.edge.flatbuffer import tflite_file

    program, calibration = outlier
    with pytest.raises(BudgetError, match="misses its accuracy budget"):
        tpuedge.build(program, "mcu", tmp_path / "strict", calibration=calibration, strict_int8=True)
    assert not (tmp_path / "strict").exists()

    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=calibration)
    m = art.manifest
    held_out = m["verification"]["held_out"]  # the 8 samples calibration did not see
    assert held_out["samples"] == 8
    assert held_out["tflm_vs_float"]["sample_cosine"] >= 0.99  # strict int8: 0.983 on them
    assert held_out["tflm_vs_litert_max_lsb"] <= 2
    upgraded = [o for o in m["quantization"]["recipe"]["non_int8_ops"]]
    assert upgraded and {o["precision"] for o in upgraded} == {"int16"}
    # the Linear's output and the LayerNorm's first statistic read it in 16 bits, through the reshape
    assert {"FULLY_CONNECTED", "MEAN"} <= {op.split()[0] for o in upgraded for op in o["ops"]}
    model = tflite_file.read_model((tmp_path / "mcu" / "model.tflite").read_bytes())
    dtypes = {tflite_file.dtype_name(t.type) for t in model.subgraphs[0].tensors}
    assert "int16" in dtypes and not dtypes & {"float32", "float16"}
    # the 16x8 FULLY_CONNECTED's int64 bias, like every bias, without its unread scale table
    biases = [
        t
        for t in model.subgraphs[0].tensors
        if tflite_file.dtype_name(t.type) in ("int32", "int64")
        and tflite_file.is_constant(model, t)
        and len(t.shape) == 1
    ]
    assert "int64" in {tflite_file.dtype_name(t.type) for t in biases}
    assert all(tflite_file.tensor_quantization(t)[0].size == 0 for t in biases)
    assert art.run(calibration[-1][0])[0].shape == (1, 4)  # runs in TFLite-Micro


class _Repeated(torch.nn.Module):
    """Each feature repeated twice: the mcu passes make it one GATHER_ND of constant positions."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(16, 16), torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.repeat_interleave(self.fc1(x), 2, dim=-1))


class _HardSwish(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.nn.functional.hardswish(self.fc1(x)))


class _Upsample(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        return self.conv2(torch.nn.functional.interpolate(self.conv1(x), scale_factor=2.0, mode="bilinear"))


def _all_int16(module, shape=(1, 16), sample=None) -> bytes:
    """`module` after the mcu passes, every activation int16 (ai-edge-quantizer's 16x8 recipe);
    `sample(rng)` draws one input (default: normal floats of `shape`)."""
    from ai_edge_quantizer import recipe_manager

    from tpuedge.edge.litert.float_model import float_tflite
    from tpuedge.edge.litert.litert_candidates import quantizer_samples
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner
    from tpuedge.edge.mcu.mcu_capability import mcu_passes
    from tpuedge.edge.litert.quantizer_runner import run_quantizer
    from tpuedge.shared_ir.program import Program

    sample = sample or (lambda rng: rng.standard_normal(shape).astype(np.float32))
    torch.manual_seed(0)
    example = torch.from_numpy(sample(np.random.default_rng(1)))
    program = tpuedge.export(module.eval(), (example,), name="probe")
    program = Program(mcu_passes().run(program.exported_program)[0], name="probe")
    base = float_tflite(program, channels_last=True, target="mcu")
    manager = recipe_manager.RecipeManager()
    manager.add_static_config(".*", "*", activation_num_bits=16, weight_num_bits=8)
    recipe = manager.get_quantization_recipe()
    quantize = run_quantizer(base)
    rng = np.random.default_rng(0)
    samples = [[sample(rng)] for _ in range(8)]
    quantize.calibrate(recipe, quantizer_samples(samples, LiteRTRunner(base).inputs, True))
    return quantize(recipe)


def test_the_candidate_check_names_what_tflite_micro_cannot_run():
    from tpuedge.edge.mcu.tflm_candidates import tflm_candidate_problem

    # a kernel TFLite-Micro has, refusing int16 tensors when it prepares
    assert "TFLite-Micro refused it" in tflm_candidate_problem(_all_int16(_Repeated()))
    assert "GATHER_ND" in tflm_candidate_problem(_all_int16(_Repeated()))
    # one that prepares and refuses them when it runs (found on torchvision's LRASPP head)
    assert "RESIZE_BILINEAR" in tflm_candidate_problem(_all_int16(_Upsample(), (1, 3, 8, 8)))
    # an op the quantizer leaves float at 16 bits
    assert tflm_candidate_problem(_all_int16(_HardSwish())).startswith("left in float: HARD_SWISH")


class _Embedded(torch.nn.Module):
    """Token ids -> an embedding table -> Linear -> tanh -> Linear (every op has a 16x8 recipe)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(64, 16)
        self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)

    def forward(self, ids):
        return self.fc2(torch.tanh(self.fc1(self.embed(ids))))


def test_int16_candidates_of_a_model_with_an_embedding_run_in_tflite_micro(monkeypatch):
    """The quantizer leaves an embedding lookup in float, and the mcu build stores its table in
    int8 (edge/mcu/tflm_forms.py). The candidate check judged the raw candidate, so it refused every
    int16 candidate of a model with an embedding ("left in float: EMBEDDING_LOOKUP"): MiniLM-L6's
    mcu search ran none of its 41 int16 recipes. Rows read at 16 bits come from an int8
    table on its own range, re-quantized to int16 (TFLite-Micro looks up no int16 table)."""
    from tpuedge.edge.flatbuffer import tflite_file
    from tpuedge.edge.mcu import tflm_candidates
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner
    from tpuedge.edge.mcu.tflm_candidates import tflm_candidate_problem
    from tpuedge.edge.mcu.tflm_forms import tflm_forms
    from tpuedge.edge.mcu.tflm_runtime import TflmRunner

    monkeypatch.setattr(tflm_candidates, "_RAN_IN_TFLM", set())
    candidate = _all_int16(_Embedded(), sample=lambda rng: rng.integers(0, 64, (1, 8)).astype(np.int64))
    assert tflm_candidate_problem(candidate) is None
    tflm_model, forms = tflm_forms(candidate)
    assert forms == {"int8_lookup_tables": 1}
    model = tflite_file.read_model(tflm_model)
    graph, names = model.subgraphs[0], tflite_file.operator_names(model)
    lookup = next(op for op in graph.operators if names[op.opcodeIndex] == "EMBEDDING_LOOKUP")
    assert [tflite_file.dtype_name(graph.tensors[int(t)].type) for t in (lookup.inputs[1], lookup.outputs[0])] == [
        "int8",
        "int8",
    ]
    ids = np.random.default_rng(5).integers(0, 64, (1, 8)).astype(np.int32)
    litert = LiteRTRunner(candidate).run([ids])[0]  # the candidate as scored, its float table
    tflm = TflmRunner(tflm_model, 1 << 20).run([ids])[0]
    spread = float(np.ptp(litert))
    assert np.max(np.abs(tflm - litert)) <= 0.02 * spread  # the table's int8 rounding, nothing more


class _WideLayers(torch.nn.Module):
    """Ten 4 -> 16,384 -> 4 Linear pairs: TFLite-Micro keeps a multiplier and a shift per output
    channel of each per-channel FULLY_CONNECTED, 1.3 MB here, beside 0.2 MB of activations."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            [torch.nn.Linear(4, 16384) if i % 2 == 0 else torch.nn.Linear(16384, 4) for i in range(20)]
        )

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))  # no activation range collapses to zero (a dead ReLU's scale 0)
        return x


def test_the_candidate_check_gives_the_kernels_all_the_arena_they_keep(monkeypatch):
    """The check's arena was the activations plus 1 MiB, and a model whose kernels keep more than
    that was called refused ("FULLY_CONNECTED failed to prepare"), a verdict about the arena
    (Resemblyzer's all-int8 on mcu: 800 FULLY_CONNECTEDs of 1,024 outputs), not the kernels."""
    from tpuedge.edge.mcu import tflm_candidates
    from tpuedge.edge.litert.convert import program_to_tflite
    from tpuedge.edge.mcu.tflm_candidates import tflm_candidate_problem
    from tpuedge.quantize.config import QuantConfig

    monkeypatch.setattr(tflm_candidates, "_RAN_IN_TFLM", set())  # run it, whatever ran before in this process
    torch.manual_seed(0)
    program = tpuedge.export(_WideLayers().eval(), (torch.zeros(1, 4),), name="wide")
    rng = np.random.default_rng(0)
    samples = [[rng.standard_normal((1, 4)).astype(np.float32)] for _ in range(8)]
    config = QuantConfig(scheme="int8", io_dtype="int8", float_islands=False, channels_last=True)
    assert tflm_candidate_problem(program_to_tflite(program, config, samples, target="mcu").tflite) is None


def test_int16_that_would_not_fit_the_board_gives_way_to_all_int8(tmp_path):
    """int16 tensors double their share of the arena. Where the search's int16 recipe needs more
    RAM than the board has and all-int8 fits, the build ships all-int8 (the budget then decides)
    and says so, instead of failing on RAM the all-int8 model never needed."""
    torch.manual_seed(0)
    # 128 wide: the int16 tensors' extra arena (+848 B) is more than the 1 KiB rounding of the
    # recommended arena hides (at 32 wide both came to 7,168 B once the tensor names got shorter)
    module = _OutlierChannel(width=128)
    with torch.no_grad():
        module.fc1.weight[0] /= 400.0 / 150.0  # all-int8 is under the search's target
    program = tpuedge.export(module.eval(), (torch.zeros(1, 16),), name="outlier150")
    rng = np.random.default_rng(0)
    calibration = [(rng.standard_normal((1, 16)).astype(np.float32),) for _ in range(32)]

    free_build = tpuedge.build(program, "mcu", tmp_path / "free", calibration=calibration, min_cosine=0.98)
    strict_build = tpuedge.build(
        program, "mcu", tmp_path / "strict", calibration=calibration, min_cosine=0.98, strict_int8=True
    )
    free, strict = free_build.manifest, strict_build.manifest
    int16_arena, int8_arena = free["arena"]["recommended_bytes"], strict["arena"]["recommended_bytes"]
    assert free["quantization"]["recipe"]["non_int8_ops"] and int16_arena > int8_arena
    assert "-> int16" in free_build.report()  # the build report names the int16 groups
    cost = strict["quantization"]["recipe"]["strict_int8_cost"]  # --strict-int8 says what it costs
    assert {o["precision"] for o in cost["mixed_non_int8_ops"]} == {"int16"} and cost["cost"]["centered_cosine"] > 0
    assert "strict int8 costs" in strict_build.report()
    ram_kb = -(-int8_arena * 4 // 3 // 1024)  # 75% of it is the arena budget: all-int8 fits, int16 does not
    assert int8_arena <= ram_kb * 1024 * 0.75 < int16_arena

    fitted_build = tpuedge.build(
        program, "mcu", tmp_path / "fitted", calibration=calibration, min_cosine=0.98, flash_kb=1024, ram_kb=ram_kb
    )
    fitted = fitted_build.manifest
    assert "int16 dropped" in fitted_build.report()
    assert fitted["quantization"]["recipe"]["non_int8_ops"] == []
    dropped = fitted["quantization"]["recipe"]["int16_dropped_for_the_board"]
    assert dropped["arena_bytes_with_int16"] == int16_arena and dropped["int16_groups"]
    assert fitted["arena"]["recommended_bytes"] == int8_arena and fitted["board_check"]["fits"] is True
    assert (tmp_path / "fitted" / "model.tflite").read_bytes() == (tmp_path / "strict" / "model.tflite").read_bytes()

    # neither fits: the board's error names the all-int8 arena, the least the model needs (it named
    # the int16 one, twice that, once the budget was met), as TFLite-Micro's allocator took it for
    # the search's first candidate, at most what the probe measured, before any int16 candidate
    with pytest.raises(UserError, match=r"with every activation int8, .* allocator takes ([\d,]+) bytes") as err:
        tpuedge.build(
            program,
            "mcu",
            tmp_path / "neither",
            calibration=calibration,
            min_cosine=0.98,
            flash_kb=1024,
            ram_kb=int8_arena // 1024 // 2,
        )
    allocated = int(re.search(r"allocator takes ([\d,]+) bytes", str(err.value)).group(1).replace(",", ""))
    assert (int8_arena // 1024 // 2) * 1024 * 0.75 < allocated <= strict["arena"]["measured_bytes"]
    assert not (tmp_path / "neither").exists()
    # below its budget (strict int8 at 0.98) and over the board: the board's answer, not the budget's
    with pytest.raises(UserError, match="does not fit"):
        tpuedge.build(
            program,
            "mcu",
            tmp_path / "both",
            calibration=calibration,
            strict_int8=True,
            flash_kb=1024,
            ram_kb=int8_arena // 1024 // 2,
        )


def test_a_candidate_that_aborts_tflite_micro_is_refused_and_the_build_lives_on():
    """Some TFLite-Micro kernels abort the process instead of refusing a model (timm's PiT-tiny:
    SIGABRT in SOFTMAX's Eval); run in the build's own process, that ended the build with exit
    134 and no message. The check runs the candidate in a worker process: here an int8 ADD whose rescale
    factor TFLite-Micro's own check aborts on."""
    from tflm_single_op import single_op_model

    from tpuedge.edge.mcu.tflm_candidates import kernel_problem

    problem = kernel_problem(single_op_model("ADD", n_inputs=2, out_quant=(1e-9, 0)), 1 << 20)
    assert problem is not None and problem.startswith("TFLite-Micro crashed running it (exit")
    assert kernel_problem(single_op_model("ADD", n_inputs=2), 1 << 20) is None


def test_the_candidate_check_runs_only_on_candidates_that_are_not_all_int8(outlier, tmp_path, monkeypatch):
    """The TFLite-Micro check is for recipes that leave int8 (an int16 kernel the board may lack);
    all-int8 is the model's own answer, which the build checks op by op. The op-group search's
    all-int8 baseline (every group named, each "int8") was checked too: a child process for
    nothing, and a refusal there would have scored it as failed while `{}`, the same model, was not."""
    from tpuedge.edge.flatbuffer import tflite_file
    from tpuedge.edge.mcu import tflm_candidates

    monkeypatch.setenv("TPUEDGE_NO_CACHE", "1")  # every candidate built, so every check is seen
    checked: list[set[str]] = []
    real = tflm_candidates.tflm_candidate_problem

    def counting(tflite: bytes):
        model = tflite_file.read_model(tflite)
        checked.append({tflite_file.dtype_name(t.type) for t in model.subgraphs[0].tensors})
        return real(tflite)

    monkeypatch.setattr(tflm_candidates, "tflm_candidate_problem", counting)
    program, calibration = outlier
    # unranked (as a model over the ranking's limit is), the op-group search starts from all-int8
    monkeypatch.setattr("tpuedge.quantize.sensitivity.MAX_RANKED_POINTS", 0)
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=calibration, allow_below_budget=True)
    assert art.manifest["quantization"]["recipe"]["search"]["screening_samples"]  # a screened all-int8 baseline
    assert checked and all("int16" in dtypes for dtypes in checked)


class _Rsqrt(torch.nn.Module):
    def forward(self, x):
        return torch.rsqrt(x)


def test_the_mcu_search_scores_its_candidates_in_tflite_micro():
    """LiteRT's int16 RSQRT misses by up to ~30% on inputs near the bottom of a wide range
    (calibrated to 716, as silero-vad's spectrum power), TFLite-Micro's is within ~1%: scored in
    LiteRT, silero-vad's int16 candidates came out below all-int8. The mcu search runs its
    candidates in TFLite-Micro (`tflm_candidate_outputs`)."""
    from ai_edge_quantizer import recipe_manager

    from tpuedge.edge.litert.float_model import float_tflite
    from tpuedge.edge.litert.litert_candidates import quantizer_samples
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner
    from tpuedge.edge.litert.quantizer_runner import run_quantizer
    from tpuedge.edge.mcu.tflm_candidates import tflm_candidate_outputs

    program = tpuedge.export(_Rsqrt().eval(), (torch.ones(1, 256),), name="rsqrt")
    base = float_tflite(program, channels_last=True, target="mcu")
    x = np.linspace(0.3, 12.0, 256, dtype=np.float32)[None]
    calibration = x.copy()
    calibration[0, -1] = 716.0
    manager = recipe_manager.RecipeManager()
    manager.add_static_config(".*", "*", activation_num_bits=16, weight_num_bits=8)
    recipe = manager.get_quantization_recipe()
    quantize = run_quantizer(base)
    quantize.calibrate(recipe, quantizer_samples([[calibration]], LiteRTRunner(base).inputs, True))
    candidate = quantize(recipe)
    truth = 1 / np.sqrt(x[0])
    [[tflm]] = tflm_candidate_outputs(candidate, [[x]])
    litert = LiteRTRunner(candidate).run([x])[0]
    assert np.max(np.abs(tflm[0] - truth) / truth) < 0.03
    assert np.max(np.abs(litert[0] - truth) / truth) > 0.1  # why the search must not score mcu in LiteRT


class _LearnedSpectrum(torch.nn.Module):
    """silero-vad's front end in small: the audio reflect-padded by 24 samples, a learned STFT
    (a strided conv into real and imaginary halves), their magnitude, a conv and a Linear."""

    def __init__(self):
        super().__init__()
        self.stft = torch.nn.Conv1d(1, 32, 32, stride=16, bias=False)
        self.conv = torch.nn.Conv1d(16, 8, 3, padding=1, bias=False)  # no bias: a quiet clip's answer is small
        self.fc = torch.nn.Linear(8 * 7, 4, bias=False)

    def forward(self, audio):
        x = self.stft(torch.nn.functional.pad(audio, (0, 24), mode="reflect").unsqueeze(1))
        x = torch.sqrt(x[:, :16] ** 2 + x[:, 16:] ** 2)
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def test_quiet_audio_is_heard_in_16_bits_on_mcu(tmp_path):
    """Audio at gains from 1 down to 1/1000, as a microphone gives it. Before: the pad's gather
    ran in 8 bits only, so the model read its input in 8 bits (a quiet clip is then a few steps
    of the loudest one's grid), and the power re**2 + im**2 spans the magnitude's range squared,
    so its 16-bit grid zeroed the quiet clips' spectra: below the budget with every activation at
    16 bits. Now every tensor, the input and outputs too, is int16, the magnitude is the largest
    of a few projections (no power tensor), and TFLite-Micro meets the budget on held-out clips."""
    torch.manual_seed(0)
    program = tpuedge.export(_LearnedSpectrum().eval(), (torch.zeros(1, 104),), name="spectrum")
    rng = np.random.default_rng(0)
    clips = [(rng.standard_normal((1, 104)) * 10 ** rng.uniform(-3, 0)).astype(np.float32) for _ in range(40)]
    art = tpuedge.build(program, "mcu", tmp_path / "mcu", calibration=[(c,) for c in clips], board="nrf52840")
    assert {r["pass"] for r in art.manifest["rewrites"]} >= {"pad-as-slices", "magnitude-as-projections"}
    assert "GATHER_ND" not in {o["op"] for o in art.manifest["tflm_ops"]}
    from tpuedge.edge.flatbuffer import tflite_file

    model = tflite_file.read_model((art.directory / "model.tflite").read_bytes())
    graph = model.subgraphs[0]
    assert [tflite_file.dtype_name(graph.tensors[i].type) for i in graph.inputs] == ["int16"]
    assert min(art.manifest["accuracy_budget"]["measured"]["sample_cosine_per_output"]) >= 0.99
    from tpuedge.edge.mcu import tflm_worker

    assert tflm_worker._WORKER is None  # the search's TFLite-Micro worker ended with the build


def test_int8_io_keeps_int8_ends_where_every_op_runs_at_16_bits(tmp_path):
    """`--io-dtype int8` asks for int8 tensors at the model's ends. The every-op int16 rung gave
    the same model as above int16 ends whatever was asked; only "integer" (mcu's default) lets it
    widen them now, and an int8 request gets int8 ends (the quantizer requantizes inside)."""
    from tpuedge.edge.flatbuffer import tflite_file

    torch.manual_seed(0)
    program = tpuedge.export(_LearnedSpectrum().eval(), (torch.zeros(1, 104),), name="spectrum")
    rng = np.random.default_rng(0)
    clips = [(rng.standard_normal((1, 104)) * 10 ** rng.uniform(-3, 0)).astype(np.float32) for _ in range(40)]
    art = tpuedge.build(
        program,
        "mcu",
        tmp_path / "mcu",
        calibration=[(c,) for c in clips],
        board="nrf52840",
        io_dtype="int8",
        allow_below_budget=True,
    )
    graph = tflite_file.read_model((art.directory / "model.tflite").read_bytes()).subgraphs[0]
    assert [tflite_file.dtype_name(graph.tensors[i].type) for i in [*graph.inputs, *graph.outputs]] == ["int8", "int8"]
    assert "int16" in {tflite_file.dtype_name(t.type) for t in graph.tensors}  # the search's 16-bit ops stay inside


def test_the_search_scores_a_candidate_that_aborts_tflite_micro_as_failed_and_lives_on():
    """The search runs its candidates in TFLite-Micro, all-int8 among them, which the candidate
    check does not run first: in the build's own process, a kernel's abort ended the build with
    exit 134 and no message (HF's tiny random-init MobileViT: a softmax scale below 2^-26). They
    run in a worker process now: a crash is that candidate's TflmError, and the next candidate
    gets a fresh worker."""
    from tflm_single_op import single_op_model

    from tpuedge.edge.mcu.tflm_candidates import tflm_candidate_outputs
    from tpuedge.edge.mcu.tflm_runtime import TflmError

    sample = [np.ones((1, 4), np.float32), np.ones((1, 4), np.float32)]
    with pytest.raises(TflmError, match=r"TFLite-Micro crashed running it \(exit"):
        tflm_candidate_outputs(single_op_model("ADD", n_inputs=2, out_quant=(1e-9, 0)), [sample])
    ((out,),) = tflm_candidate_outputs(single_op_model("ADD", n_inputs=2), [sample])
    np.testing.assert_allclose(out, np.full((1, 4), 2.0))
