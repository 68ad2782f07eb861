# SPDX-License-Identifier: Apache-2.0
"""LiteRT's fused LSTM op (``sources/litert_lstm.py``, ``read/litert_lstm.py``): ``.tflite`` files whose
tf_keras LSTM layers LiteRT fused (``testdata/litert_fused``, made by ``tools/make_litert_fused.py``),
converted through ``enable()``, become native and give Keras's outputs, stored beside each file, at every
position on onnxruntime and OpenVINO (stock tf2onnx cannot convert them at all); they stream chunk by
chunk; where LiteRT's op clips the cell state, the native node gives Keras's values and the report says so.
The reader's refusals, on graphs made by hand as tf2onnx parses the op."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
import tf2onnx
from tf2onnx.graph import Graph

import masked_lstm_rewriter as mlr
from masked_lstm_rewriter.read.litert_lstm import LITERT_LSTM, LiteRTLayer, read_litert_lstm
from masked_lstm_rewriter.failure import Refusal
from masked_lstm_rewriter.keras_source import SourceError
from _harness import assert_same_outputs, available_runtimes, check_rewrites, op_counts, runner
from _onnx_files import name_of

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "testdata",
                    "litert_fused")
FILES = sorted(glob.glob(os.path.join(DATA, "*.tflite")))
# the native nodes of each file's model: its fused LSTMs (a Bidirectional's two), and a GRU that stays a loop
NATIVES = {"bidirectional": 2, "bidirectional_sum_last": 2, "stack": 2, "lstm_gru": 2}
CLIP_NOTE = "carries its states from one run to the next (unless its variables are reset) and clips the cell state " \
    "to [-10, 10], which Keras does not"


class LiteRTFile:
    """A ``.tflite`` file for ``check_rewrites``: converted by tf2onnx through ``enable()``; its reference
    is Keras's output stored beside it (``<stem>.npz``, :mod:`tools.make_litert_fused`)."""

    replaces = LITERT_LSTM
    atol, rtol = 1e-5, 0.0

    def __init__(self, path: str, opset: int = 15, **options):
        self.path, self.opset, self.options = path, opset, options
        self.stored = np.load(os.path.splitext(path)[0] + ".npz")

    def rewrite(self, mode: str) -> tuple:
        with mlr.enable(mask_mode=mode, **self.options):
            model, _ = tf2onnx.convert.from_tflite(self.path, opset=self.opset)
        return model, mlr.last_report()

    def feeds(self, batch: str) -> dict:
        prefix = f"{batch}.in."
        return {key[len(prefix):]: self.stored[key] for key in self.stored.files if key.startswith(prefix)}

    def batches(self, layout: str) -> list:
        return [(self.feeds("post"), {"Keras": [self.stored["post.out.0"]]})] if layout == "post" else []


@pytest.mark.parametrize("path", [p for p in FILES if name_of(p) != "clip"], ids=name_of)
def test_fused_lstm_files_become_native_and_equal_keras(path):
    model, report = check_rewrites(LiteRTFile(path), "post", natives=NATIVES.get(name_of(path), 1))
    assert not any(node.op_type.startswith("TFL_") for node in model.graph.node), op_counts(model)
    fused = [layer for layer in report.layers if layer.layer.startswith(("tfl.", "StatefulPartitionedCall"))]
    assert fused and all(CLIP_NOTE in layer.detail for layer in fused), str(report)


@pytest.mark.parametrize("name, opset", [("stack", 11), ("bidirectional", 18)])
def test_fused_lstm_files_at_the_lowest_and_a_high_opset(name, opset):
    check_rewrites(LiteRTFile(os.path.join(DATA, f"{name}.tflite"), opset=opset), "post", natives=2)


def test_the_command_line_converts_a_fused_lstm_file(tmp_path):
    """``python -m masked_lstm_rewriter model.tflite``: exit 0, a Bidirectional's halves native, Keras's outputs."""
    path, output = os.path.join(DATA, "bidirectional.tflite"), tmp_path / "model.onnx"
    result = subprocess.run([sys.executable, "-m", "masked_lstm_rewriter", path, "-o", str(output)],
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "2 native, 0 left as Loop" in result.stdout, result.stdout
    case = LiteRTFile(path)
    assert_same_outputs([case.stored["post.out.0"]], runner(onnx.load(output), "onnxruntime")(case.feeds("post")),
                        "the command line's file")


@pytest.mark.parametrize("name", ["stack", "lstm_gru"])
def test_verify_takes_the_litert_file_as_its_reference(name):
    """``verify(model.tflite, model.onnx)``: every batch matches; LiteRT carries a fused LSTM's states from one
    run to the next, so the reference starts each batch from zeros again (without that, batches after the
    first differed by 0.09)."""
    path = os.path.join(DATA, f"{name}.tflite")
    model, _ = LiteRTFile(path).rewrite("post")
    result = mlr.verify(path, model, runtime=list(available_runtimes()))
    assert result.ok and len(result.checks) >= 3, result.format()
    assert any("reset before each batch" in note for note in result.notes), result.notes


def test_verify_says_in_one_line_that_a_file_is_no_litert_model(tmp_path):
    path = tmp_path / "model.tflite"
    path.write_bytes(b"not a flatbuffer")
    model, _ = LiteRTFile(os.path.join(DATA, "sequence.tflite")).rewrite("post")
    with pytest.raises(SourceError, match=r"model\.tflite: LiteRT could not load it \("):
        mlr.verify(str(path), model)


def test_where_litert_clips_the_cell_state_the_native_lstm_gives_keras_values():
    """A cell state driven to 12 and back: LiteRT's op clips it at 10 and its outputs leave Keras's; the
    native node (which cannot clip it) gives Keras's, and the report says where the two differ."""
    case = LiteRTFile(os.path.join(DATA, "clip.tflite"))
    assert np.abs(case.stored["litert.out.0"] - case.stored["post.out.0"]).max() > 0.5  # LiteRT's differ
    _, report = check_rewrites(case, "post", natives=1)
    assert CLIP_NOTE in report.layers[0].detail and "the native LSTM computes Keras's layer" in report.layers[0].detail


@pytest.mark.parametrize("name", ["sequence", "stack"])
def test_a_fused_lstm_streams_chunk_by_chunk(name):
    """Converted with streaming=True: two runs of 6 steps, the second from the states the first returned,
    give Keras's output over the 12 steps."""
    case = LiteRTFile(os.path.join(DATA, f"{name}.tflite"), streaming=True)
    model, _ = case.rewrite("post")
    (tokens,), (expected,) = case.feeds("stream").values(), [case.stored["stream.out.0"]]
    (token_input,) = case.feeds("post")
    states = [i for i in model.graph.input if i.name != token_input]
    assert len(states) == 2 * NATIVES.get(name, 1), [i.name for i in model.graph.input]
    for runtime in available_runtimes():
        run = runner(model, runtime)
        carried = {state.name: np.zeros((tokens.shape[0], _width(state)), np.float32) for state in states}
        chunks = []
        for start in (0, 6):
            outputs = run({token_input: tokens[:, start:start + 6], **carried})
            chunks.append(outputs[0])
            carried = {state.name: value for state, value in zip(states, outputs[1:])}
        assert_same_outputs([expected], [np.concatenate(chunks, axis=1)], f"{name}, two chunks, {runtime}")


def _width(value_info) -> int:
    return value_info.type.tensor_type.shape.dim[-1].dim_value


# the reader, on the op as tf2onnx parses it: a Keras layer's 15 inputs, absent optional ones dropped
HIDDEN, FEATURES, BATCH = 3, 2, 4


def _parsed_op(inputs=None, weight_dtype=np.float32, state=0.0, quantized=False, **attributes):
    """(graph, the op) over x [4, 6, 2], with weights of 3 units and the states as constants (``quantized``:
    the first weight int8, dequantized as tf2onnx parses a quantized tensor)."""
    graph = Graph([], opset=15)
    graph.make_node("Placeholder", [], outputs=["x"], attr={"dtype": 1}, shapes=[[BATCH, 6, FEATURES]],
                    dtypes=[1])
    rng = np.random.default_rng(0)
    shapes = [(HIDDEN, FEATURES)] * 4 + [(HIDDEN, HIDDEN)] * 4 + [(HIDDEN,)] * 4
    names = [graph.make_const(f"w{k}", rng.uniform(-1, 1, shape).astype(weight_dtype)).output[0]
             for k, shape in enumerate(shapes)]
    if quantized:
        names[0] = graph.make_node("TFL_DEQUANTIZE", [graph.make_const("q", np.ones(shapes[0], np.int8)).output[0]],
                                   outputs=["q_dequant"]).output[0]
    names += [graph.make_const(f"state{k}", np.full((BATCH, HIDDEN), state, np.float32)).output[0] for k in (0, 1)]
    attr = {"fused_activation_function": b"TANH", "cell_clip": 10.0, "proj_clip": 0.0, "time_major": 0,
            **attributes}
    node = graph.make_node(LITERT_LSTM, ["x"] + (names if inputs is None else inputs(names)), attr=attr,
                           outputs=["model/lstm/out:0"])
    return graph, node


def test_the_reader_takes_a_keras_layers_op_and_says_litert_clips():
    graph, node = _parsed_op()
    layer = read_litert_lstm(graph, node)
    assert isinstance(layer, LiteRTLayer) and layer.batch_major and layer.top.hidden_size == HIDDEN
    weights = {name: graph.get_tensor_value(name, as_list=False) for name in node.input[1:13]}
    np.testing.assert_array_equal(layer.top.kernel["f"], weights["w1"].T)      # LiteRT's order: i, f, c, o
    np.testing.assert_array_equal(layer.top.recurrent["o"], weights["w7"].T)
    np.testing.assert_array_equal(layer.top.bias["c"], weights["w10"])
    assert layer.note and "[-10, 10]" in layer.note and "from one run to the next" in layer.note
    unclipped = read_litert_lstm(*_parsed_op(cell_clip=0.0)).note
    assert "clips" not in unclipped and "from one run to the next" in unclipped


def test_a_time_major_op_reads_its_input_as_it_is():
    layer = read_litert_lstm(*_parsed_op(time_major=1))
    assert not layer.batch_major and layer.x == "x"


@pytest.mark.parametrize("options, reason", [
    ({"cell_clip": 3.0}, "it clips the cell state at 3, which the native LSTM cannot do"),
    ({"proj_clip": 1.0}, "an attribute no Keras layer sets: proj_clip"),
    ({"fused_activation_function": b"RELU"}, "its activation is RELU"),
    ({"inputs": lambda names: names[:9] + names[:3] + names[9:]},
     "the op has other inputs than a Keras LSTM's (18, not 15)"),
    ({"weight_dtype": np.float16}, "a weight is not float32 (float16: 'w0')"),
    ({"state": 0.5}, "a state does not start from zeros"),
    ({"quantized": True}, "its weights are quantized (LiteRT's converter with optimizations)"),
    ({"asymmetric_quantize_inputs": 1}, "its weights are quantized"),
], ids=["cell_clip", "projection_clip", "relu", "peepholes", "float16", "state", "int8", "hybrid"])
def test_what_no_keras_layer_fuses_into_is_refused_with_its_reason(options, reason):
    refusal = read_litert_lstm(*_parsed_op(**options))
    assert isinstance(refusal, Refusal) and refusal.reason.startswith("LiteRT's fused LSTM op: ")
    assert reason in refusal.reason, refusal.reason
