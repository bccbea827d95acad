"""The one .tflite reader: damaged files are one paragraph and exit 2 (CLI `inspect`, `tpuedge.load`),
never a struct.error; valid files read the same through every view built on it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tpuedge
from cli_runner import run_cli
from tpuedge.edge.flatbuffer import model_packing, tflite_file
from tpuedge.shared_ir.errors import UserError


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.fc(x))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A real android build (float, converter output) to damage."""
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tfl") / "net"
    program = tpuedge.export(_Net(), (torch.zeros(1, 4),), name="net")
    tpuedge.build(program, "android", out, quantize="none")
    return out


def _damaged(built, tmp_path):
    data = (built / "model.tflite").read_bytes()
    rng = np.random.default_rng(0)
    files = {
        "empty": b"",
        "truncated": data[: len(data) // 2],
        "random": rng.integers(0, 256, len(data), dtype=np.uint8).tobytes(),
        "text": b"this is not a model\n" * 20,
    }
    paths = {}
    for kind, content in files.items():
        paths[kind] = tmp_path / f"{kind}.tflite"
        paths[kind].write_bytes(content)
    return paths


@pytest.mark.parametrize(
    "kind, problem",
    [
        ("empty", "it is empty (0 bytes)"),
        ("truncated", "points outside its"),
        ("random", "lacks the TFLite file identifier 'TFL3'"),
        ("text", "lacks the TFLite file identifier 'TFL3'"),
    ],
)
def test_inspect_a_damaged_tflite_is_one_paragraph_exit_2(built, tmp_path, kind, problem):
    path = _damaged(built, tmp_path)[kind]
    code, out, err = run_cli("inspect", str(path))
    assert code == 2, err
    assert "Traceback" not in err and "struct.error" not in err
    assert str(path) in err and "is not a valid .tflite model" in err and problem in err, err
    with pytest.raises(UserError, match="is not a valid .tflite model"):
        tpuedge.load(path)


def test_a_damaged_model_in_a_build_folder_is_a_user_error(built, tmp_path):
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(built, folder)
    import hashlib

    data = (folder / "model.tflite").read_bytes()
    cut = data[: len(data) - 100]
    (folder / "model.tflite").write_bytes(cut)
    # the manifest's checksum then matches, as for a build whose writer itself was cut short
    manifest = (folder / "manifest.json").read_text()
    old, new = hashlib.sha256(data).hexdigest(), hashlib.sha256(cut).hexdigest()
    (folder / "manifest.json").write_text(
        manifest.replace(old, new).replace(f'"bytes": {len(data)}', f'"bytes": {len(cut)}')
    )
    code, _, err = run_cli("inspect", str(folder))
    assert code == 2 and "model.tflite is not a valid .tflite model" in err, err
    artifact = tpuedge.load(folder)
    with pytest.raises(UserError, match="not a valid .tflite model"):
        artifact.run(np.zeros((1, 4), np.float32))


def test_every_truncation_and_random_bytes_with_the_identifier_fail_cleanly(built):
    """Every prefix of a real model, and random bytes behind a real header: UserError or a model."""
    data = (built / "model.tflite").read_bytes()
    for n in range(len(data)):
        with pytest.raises(UserError, match="not a valid .tflite model"):
            tflite_file.read_model(data[:n], "cut.tflite")
    rng = np.random.default_rng(1)
    for _ in range(200):
        noise = bytearray(rng.integers(0, 256, len(data), dtype=np.uint8).tobytes())
        noise[4:8] = b"TFL3"
        try:
            tflite_file.read_model(bytes(noise), "noise.tflite")
        except UserError:
            pass


def _in_place_readers():
    """Every reader that skips the object tree for speed, each as a function of the file's bytes."""
    from tpuedge.edge.flatbuffer.tensor_names import renamed_tensors
    from tpuedge.edge.litert.fused_lstm_weights import has_fused_lstm
    from tpuedge.edge.litert.litert_runtime import aborting_op

    return {
        "tensor_names": tflite_file.tensor_names,
        "builtin_names": tflite_file.builtin_names,
        "op_scales": lambda data: tflite_file.op_scales(data, frozenset({"FULLY_CONNECTED"})),
        "renamed_tensors": lambda data: renamed_tensors(data, ["x"] * len(tflite_file.tensor_names(data)[0])),
        "has_fused_lstm": has_fused_lstm,
        "aborting_op": aborting_op,
    }


@pytest.mark.parametrize("kind", ["empty", "truncated", "random", "text"])
def test_the_readers_in_place_give_the_readers_error_on_a_damaged_file(built, tmp_path, kind):
    """Reading in place (tensor names, op codes, scales) checks the file as `read_model` does: a
    damaged file is the same UserError, never a struct.error from the flatbuffers runtime."""
    data = _damaged(built, tmp_path)[kind].read_bytes()
    if kind == "truncated":
        data = data[:64]  # the root table and its vtable, no vectors
    for name, read in _in_place_readers().items():
        with pytest.raises(UserError, match="is not a valid .tflite model"):
            read(data)
            pytest.fail(f"{name} read a damaged file")


def test_the_readers_in_place_read_every_truncation_cleanly(built):
    """Every prefix of a real model: each reader in place gives the reader's UserError or an answer."""
    data = (built / "model.tflite").read_bytes()
    readers = _in_place_readers()
    for n in range(0, len(data), 7):
        for read in readers.values():
            try:
                read(data[:n])
            except UserError as exc:
                assert "is not a valid .tflite model" in str(exc)


def test_a_buffer_stored_past_the_end_is_named(built):
    model = tflite_file.read_model((built / "model.tflite").read_bytes())
    index = next(i for i, b in enumerate(model.buffers) if b.data is not None and len(b.data))
    model.buffers[index].data, model.buffers[index].offset, model.buffers[index].size = None, 10**6, 64
    with pytest.raises(UserError, match=f"buffer {index} is stored at bytes 1000000..1000064, past the file's end"):
        tflite_file.read_model(tflite_file.write_model(model), "ext.tflite")


def test_one_dtype_table_and_op_names(built):
    model = tflite_file.read_model((built / "model.tflite").read_bytes())
    assert tflite_file.operator_names(model) == ["FULLY_CONNECTED"]
    assert {tflite_file.DTYPE_NAMES[c] for c in (0, 1, 2, 3, 7, 9, 10)} == {
        "float32",
        "float16",
        "int32",
        "uint8",
        "int16",
        "int8",
        "float64",
    }
    assert all(np.dtype(tflite_file.DTYPE_NAMES[c]) for c in (0, 1, 2, 3, 4, 6, 7, 9, 10, 12, 15, 16))


def _with_buffer_outside(data: bytes) -> tuple[bytes, int, np.ndarray]:
    """The model with its largest buffer stored after the flatbuffer, as ai-edge-quantizer writes
    large models (offset/size), to check what reads and rewrites such files."""
    model = tflite_file.read_model(data)
    index = max(range(len(model.buffers)), key=lambda i: tflite_file.buffer_nbytes(model.buffers[i]))
    payload = np.asarray(model.buffers[index].data, np.uint8).copy()
    buf = model.buffers[index]
    buf.data, buf.offset, buf.size = None, 16, payload.size  # read from bytes 16.. of the source below
    return tflite_file.write_model(model, external_from=bytes(16) + payload.tobytes()), index, payload


def test_external_buffers_are_read_and_moved_inline(built):
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner
    from tpuedge.edge.flatbuffer.tflite_inspect import summarize_tflite
    from tpuedge.edge.mcu.tflm_model import external_buffers, inline_buffers

    data = (built / "model.tflite").read_bytes()
    outside, index, payload = _with_buffer_outside(data)
    assert external_buffers(outside) == [index] and external_buffers(data) == []
    assert summarize_tflite(outside).external_buffers == 1
    assert summarize_tflite(outside).weight_bytes == summarize_tflite(data).weight_bytes
    inline = inline_buffers(outside)
    assert external_buffers(inline) == []
    assert np.array_equal(np.asarray(tflite_file.read_model(inline).buffers[index].data), payload)
    x = np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32)
    expected = LiteRTRunner(data).run([x])[0]
    assert np.array_equal(LiteRTRunner(outside).run([x])[0], expected)  # LiteRT reads the outside buffer
    assert np.array_equal(LiteRTRunner(inline).run([x])[0], expected)


def test_a_rewritten_model_keeps_its_outside_buffers_outside(built):
    """Rewriting a model ai-edge-quantizer stored partly after the flatbuffer (a renamed tensor)
    re-appends those buffers with their offsets moved: written as read, the offsets would point
    into bytes the new file does not have, and LiteRT refuses it."""
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner
    from tpuedge.edge.mcu.tflm_model import external_buffers

    data = (built / "model.tflite").read_bytes()
    outside, index, payload = _with_buffer_outside(data)
    model = tflite_file.read_model(outside)
    model.subgraphs[0].tensors[0].name = b"a much longer name than the converter gave this tensor"
    rewritten = tflite_file.write_model(model, external_from=outside)
    assert external_buffers(rewritten) == [index]
    buf = tflite_file.read_model(rewritten).buffers[index]
    assert buf.offset % 16 == 0 and rewritten[buf.offset : buf.offset + buf.size] == payload.tobytes()
    x = np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32)
    assert np.array_equal(LiteRTRunner(rewritten).run([x])[0], LiteRTRunner(data).run([x])[0])


def test_every_view_reads_the_same_tensors(built):
    from tpuedge.edge.flatbuffer.tflite_inspect import summarize_tflite
    from tpuedge.edge.mcu.tflm_model import io_quantization, ops_used
    from tpuedge.edge.intermediates.tflite_graph import read_graph

    data = (built / "model.tflite").read_bytes()
    summary, io, graph = summarize_tflite(data), io_quantization(data), read_graph(data)
    assert [o.name for o in ops_used(data)] == list(summary.op_histogram) == [op.name for op in graph.ops]
    assert (
        [t.dtype for t in summary.inputs]
        == [d["dtype"] for d in io["inputs"]]
        == [graph.tensors[i].dtype for i in graph.inputs]
    )
    assert (
        [list(t.shape) for t in summary.outputs]
        == [d["shape"] for d in io["outputs"]]
        == [list(graph.tensors[i].shape) for i in graph.outputs]
    )


def test_tflite_micro_runner_checks_the_file_first(built):
    """TFLite-Micro's Python loader decodes without bounds checks: an mcu artifact's damaged
    model.tflite must be a UserError naming it, not a struct.error from inside tflite_micro."""
    from tpuedge.edge.mcu.tflm_runtime import TflmRunner

    data = (built / "model.tflite").read_bytes()
    with pytest.raises(UserError, match="model.tflite is not a valid .tflite model"):
        TflmRunner(data[: len(data) // 2], 16384, source=built / "model.tflite")
    x = np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32)
    assert TflmRunner(data, 16384).run([x])[0].shape == (1, 3)


def _with_megabyte_buffers(model, count: int):
    """`model` with `count` more buffers of 1 MiB of random bytes: weights for the memory tests."""
    from ai_edge_litert import schema_py_generated as schema

    rng = np.random.default_rng(0)
    for _ in range(count):
        buffer = schema.BufferT()
        buffer.data = rng.integers(0, 256, 1 << 20, dtype=np.uint8)
        model.buffers.append(buffer)
    return model


def test_writing_a_model_holds_about_two_copies_and_gives_the_same_bytes(built):
    """Old code grew the flatbuffers builder by doubling from 1 KiB and copied its output twice:
    a 434 MB float BERT-base held 1.4 GB at once there, its build's peak. 24 buffers of 1 MiB:
    the bytes are those a 1 KiB builder writes, and packing holds under 2.6 copies of them (the
    builder, the bytes copied out, and a few copies of one buffer on its way in)."""
    import tracemalloc

    import flatbuffers

    model = _with_megabyte_buffers(tflite_file.read_model((built / "model.tflite").read_bytes()), 24)
    size = 24 << 20
    tracemalloc.start()
    try:
        data = tflite_file.write_model(model)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    builder = model_packing.ModelBuilder(1024)  # the bytes do not depend on the starting size
    with model_packing.equal_tables_shared(model):
        builder.Finish(model.Pack(builder), file_identifier=tflite_file.FILE_IDENTIFIER)
    assert data == bytes(builder.Output())
    stock = flatbuffers.Builder(1024)  # and the buffers are the stock builder's, byte for byte
    stock.Finish(model.Pack(stock), file_identifier=tflite_file.FILE_IDENTIFIER)
    assert [bytes(b.data) for b in tflite_file.read_model(data).buffers if b.data is not None] == [
        bytes(b.data) for b in tflite_file.read_model(bytes(stock.Output())).buffers if b.data is not None
    ]
    assert peak < 2.6 * size, f"packing {size / 2**20:.0f} MiB of weights held {peak / 2**20:.0f} MiB"


def test_the_one_copy_vector_writer_gives_the_runtimes_bytes_for_every_kind_of_array():
    """Weights go into the builder in one copy where no byte swap is needed; every other array
    (big-endian, strided, 2-D) takes the runtime's own path. Either way the bytes are those the
    stock flatbuffers builder writes, at every alignment."""
    import flatbuffers

    rng = np.random.default_rng(0)
    arrays = [
        rng.integers(0, 256, 37, dtype=np.uint8),
        rng.integers(-128, 128, 5, dtype=np.int8),
        rng.standard_normal(7).astype("<f4"),
        rng.standard_normal(3).astype(">f4"),
        rng.integers(0, 9, 11).astype("<i8"),
        rng.standard_normal(12).astype(np.float32)[::3],
        np.zeros(0, np.uint8),
        np.array([True, False, True]),
    ]

    def written(builder):
        ends = [builder.CreateNumpyVector(a) for a in arrays]
        builder.StartVector(4, len(ends), 4)
        for end in reversed(ends):
            builder.PrependUOffsetTRelative(end)
        builder.Finish(builder.EndVector())
        return bytes(builder.Output())

    assert written(model_packing.ModelBuilder(64)) == written(flatbuffers.Builder(64))


class _Channels(torch.nn.Module):
    """Three convs of 16 output channels: per-channel int8, each weight and bias with a zero
    point vector of 16 zeros."""

    def __init__(self):
        super().__init__()
        self.convs = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(16, 16, 3, padding=1, groups=16),
            torch.nn.ReLU(),
            torch.nn.Conv2d(16, 16, 1),
        )

    def forward(self, x):
        return self.convs(x)


def test_equal_vectors_are_written_once_and_the_model_runs_the_same(tmp_path):
    """ai-edge-quantizer writes every tensor's zero points (and shapes, op inputs) as its own
    vector; a built int8 model holds each distinct vector once (old code: 6 int64 zero point
    vectors of 16 zeros, one per conv weight and bias), and LiteRT and TFLite-Micro give the
    same outputs as on the quantizer's own layout."""
    import flatbuffers

    from litert_builtin import builtin_output
    from tpuedge.edge.mcu.tflm_runtime import TflmRunner

    torch.manual_seed(0)
    program = tpuedge.export(_Channels().eval(), (torch.zeros(1, 3, 8, 8),), name="channels")
    rng = np.random.default_rng(0)
    calibration = [(rng.standard_normal((1, 3, 8, 8)).astype(np.float32),) for _ in range(16)]
    tpuedge.build(program, "android", tmp_path / "int8", calibration=calibration, quantize="int8")
    data = (tmp_path / "int8" / "model.tflite").read_bytes()
    zeros16 = np.zeros(16, "<i8").tobytes()
    assert data.count(zeros16) == 1  # each of the six tables points at the one copy

    model = tflite_file.read_model(data)
    builder = flatbuffers.Builder(1 << 16)  # the same model, each vector its own: the quantizer's layout
    builder.Finish(model.Pack(builder), file_identifier=tflite_file.FILE_IDENTIFIER)
    separate = bytes(builder.Output())
    assert separate.count(zeros16) == 6 and len(separate) > len(data)
    assert tflite_file.compact_model(separate) == data  # one writer, one layout

    for (x,) in calibration[:3]:
        np.testing.assert_array_equal(builtin_output(data, x), builtin_output(separate, x))
        np.testing.assert_array_equal(
            TflmRunner(data, 100_000).run_raw([x])[0], TflmRunner(separate, 100_000).run_raw([x])[0]
        )


def test_equal_names_and_tables_are_written_once_and_the_model_runs_the_same(tmp_path):
    """A quantized model's tensors of one scope share its name (an unrolled LSTM: every step's
    tensors are "lstm/LSTM"), and many tensors carry equal quantization tables and ops equal
    options: each is written once and referred to (old code: a string per tensor, "lstm/LSTM;17",
    a table per tensor and per op). LiteRT and TFLite-Micro give the same outputs as on the
    one-copy-each layout."""
    import flatbuffers

    from litert_builtin import builtin_output
    from models import LSTMTagger
    from tpuedge.edge.mcu.tflm_runtime import TflmRunner

    torch.manual_seed(0)
    program = tpuedge.export(LSTMTagger(4, 8, 3).eval(), (torch.zeros(1, 6, 4),), name="recurrent")
    rng = np.random.default_rng(0)
    calibration = [(rng.standard_normal((1, 6, 4)).astype(np.float32),) for _ in range(16)]
    for target, options in (
        ("android", {"quantize": "int8", "strict_int8": True}),
        ("mcu", {"board": "esp32s3", "eval": "none"}),
    ):
        tpuedge.build(program, target, tmp_path / target, calibration=calibration, allow_below_budget=True, **options)
        data = (tmp_path / target / "model.tflite").read_bytes()
        names = tflite_file.tensor_names(data)[0]
        assert names.count("lstm/LSTM") > 20 and data.count(b"lstm/LSTM\x00") == 1, (target, names)

        root = tflite_file.schema.Model.GetRootAs(data, 0)
        graph = root.Subgraphs(0)
        tables: dict[bytes, set[int]] = {}
        for i in range(graph.TensorsLength()):
            q = graph.Tensors(i).Quantization()
            if q is not None and q.ScaleLength():
                key = q.ScaleAsNumpy().tobytes() + q.ZeroPointAsNumpy().tobytes() + bytes([q.QuantizedDimension()])
                tables.setdefault(key, set()).add(q._tab.Pos)
        assert all(len(at) == 1 for at in tables.values())  # equal tables: one copy
        assert sum(1 for _ in tables) < graph.TensorsLength() - 20
        options = {
            graph.Operators(i).BuiltinOptions().Pos
            for i in range(graph.OperatorsLength())
            if graph.Operators(i).BuiltinOptions()
        }
        assert len(options) < graph.OperatorsLength() // 4, (len(options), graph.OperatorsLength())

        model = tflite_file.read_model(data)
        builder = flatbuffers.Builder(1 << 16)  # the same model, each string and table its own
        builder.Finish(model.Pack(builder), file_identifier=tflite_file.FILE_IDENTIFIER)
        separate = bytes(builder.Output())
        assert len(separate) > len(data) + 30 * graph.TensorsLength() // 2, (len(separate), len(data))
        assert tflite_file.compact_model(separate) == data  # one writer, one layout
        for (x,) in calibration[:3]:
            x = (
                x
                if graph.Tensors(graph.Inputs(0)).Type() == tflite_file.schema.TensorType.FLOAT32
                else np.clip(np.round(x * 40), -128, 127).astype(np.int8)
            )  # the raw int8 ends strict int8 and mcu give
            np.testing.assert_array_equal(builtin_output(data, x), builtin_output(separate, x))
            np.testing.assert_array_equal(
                TflmRunner(data, 200_000).run_raw([x])[0], TflmRunner(separate, 200_000).run_raw([x])[0]
            )


def test_tensors_are_renamed_where_they_lie(built):
    """`renamed_tensors`: a name no longer than the old one is written over it, a longer one (or
    one whose string another tensor shares: the writer stores equal strings once) is appended and
    pointed to; the result is the model the repack gives, a buffer stored after the flatbuffer stays
    at its offset, and LiteRT runs it as before. A tensor with no name field cannot be renamed so."""
    from tpuedge.edge.flatbuffer.tensor_names import renamed_tensors
    from tpuedge.edge.litert.litert_runtime import LiteRTRunner

    data = (built / "model.tflite").read_bytes()
    outside, index, payload = _with_buffer_outside(data)
    model = tflite_file.read_model(outside)
    tensors = model.subgraphs[0].tensors
    assert len(tensors) >= 4
    old = ["shared", "shared", "a fairly long name from the converter", "short"] + [
        tflite_file.text(t.name) for t in tensors[4:]
    ]
    for tensor, name in zip(tensors, old):
        tensor.name = name.encode()
    source = tflite_file.write_model(model, external_from=outside)
    new = ["s", "shared", "a short one", "a name longer than the one it had"] + old[4:]

    renamed = renamed_tensors(source, new)
    assert [n for graph in tflite_file.tensor_names(renamed) for n in graph] == new
    assert len(source) < len(renamed) < len(source) + 128  # two names appended, nothing else moved
    buffer = tflite_file.read_model(renamed).buffers[index]
    assert renamed[buffer.offset : buffer.offset + buffer.size] == payload.tobytes()
    expected = tflite_file.read_model(source)
    for tensor, name in zip(expected.subgraphs[0].tensors, new):
        tensor.name = name.encode()
    assert tflite_file.write_model(tflite_file.read_model(renamed), external_from=renamed) == tflite_file.write_model(
        expected, external_from=source
    )
    x = np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32)
    assert np.array_equal(LiteRTRunner(renamed).run([x])[0], LiteRTRunner(data).run([x])[0])
    assert renamed_tensors(source, old) == source

    tensors[0].name = None
    unnamed = tflite_file.write_model(model, external_from=outside)
    assert renamed_tensors(unnamed, ["x"] + old[1:]) is None


def test_a_float_model_is_renamed_holding_one_copy_of_it(built):
    """A float model's names are shortened in place: old code unpacked and repacked it (its weights
    copied out, then packed again), and on a float DistilBERT that was the build's peak memory, 77
    MB above the lowering's own. With 24 MiB of weights, renaming holds under 1.3 copies."""
    import tracemalloc

    from tpuedge.edge.flatbuffer.tensor_names import ScopeNames, shorten_tensor_names

    model = _with_megabyte_buffers(tflite_file.read_model((built / "model.tflite").read_bytes()), 24)
    for tensor in model.subgraphs[0].tensors:
        tensor.name = f"pkg.Net/torch.nn.modules.linear.Linear_fc;{tflite_file.text(tensor.name)}".encode()
    data = tflite_file.write_model(model)
    size = 24 << 20
    tracemalloc.start()
    try:
        short = shorten_tensor_names(data, ScopeNames())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    names = [n for graph in tflite_file.tensor_names(short) for n in graph]
    assert names[0].startswith("Net/Linear_fc") and len(set(names)) == len(names), names
    assert peak < 1.3 * size, f"renaming a model of {size / 2**20:.0f} MiB of weights held {peak / 2**20:.0f} MiB"
