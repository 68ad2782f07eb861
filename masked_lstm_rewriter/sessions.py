# SPDX-License-Identifier: Apache-2.0
"""The runtimes a converted model runs on: one onnxruntime session factory and one OpenVINO
compiler, shared by the corpus check, ``verify``, the tests and the tools.

Every caller gets the same settings: onnxruntime on its CPU provider, one thread unless asked
otherwise, quiet (the guard's expected failure would otherwise be logged as an error);
OpenVINO's CPU plugin in exact float32. Nothing is imported until a runtime is used.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .dependencies import how_to_install, needed

RUNTIMES = ("onnxruntime", "openvino")
# OpenVINO: exact float32 arithmetic (no bf16/f16 inference precision). With one inference thread
# (INFERENCE_NUM_THREADS=1, or the default where the process may use one CPU), OpenVINO 2026.4's
# synchronous inference drops every runtime error (the guard's included) and returns empty or stale
# outputs (tests/test_openvino.py pins it): callers that must see errors run requests asynchronously
OPENVINO_CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}
QUIET = 4  # onnxruntime's log severity: fatal errors only


def runtime_available(runtime: str) -> tuple:
    """(True, "") when ``runtime`` can be imported, else (False, why)."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}, expected one of {RUNTIMES}")
    try:
        __import__(runtime)
    except ImportError as error:
        if isinstance(error, ModuleNotFoundError) and error.name == runtime:
            return False, f"{runtime} is not installed: {how_to_install(runtime)}"
        return False, f"{runtime} cannot be imported ({error})"
    return True, ""


def onnxruntime_session(model, threads: Optional[int] = 1, shared_threads: bool = False):
    """An onnxruntime CPU session for ``model`` (a ModelProto, or the path of an ``.onnx`` file).

    ``threads``: its intra- and inter-op threads (None: onnxruntime's default). ``shared_threads``:
    use the process's global thread pool instead (``onnxruntime.set_global_thread_pool_sizes``,
    which the caller sets first), as a timing harness running several sessions does."""
    with needed():
        import onnxruntime as ort  # pylint: disable=import-outside-toplevel
    options = ort.SessionOptions()
    options.log_severity_level = QUIET
    if shared_threads:
        options.use_per_session_threads = False
    elif threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = threads
    source = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def openvino_compiled(model, shapes: Optional[dict] = None, threads: Optional[int] = None,
                      from_memory: bool = True):
    """OpenVINO's CPU plugin's compiled ``model`` (a ModelProto, or the path of an ``.onnx`` file),
    in exact float32. ``shapes`` (input name -> shape) makes its inputs static first; ``threads``
    sets its inference threads (for timing). A path is read from its bytes unless ``from_memory``
    is False: OpenVINO 2026.4 reads tf2onnx's masked Loop from memory but not from a path."""
    with needed():
        import openvino as ov  # pylint: disable=import-outside-toplevel
    core = ov.Core()
    if not isinstance(model, str):
        source = core.read_model(model.SerializeToString(), b"")
    elif from_memory:
        with open(model, "rb") as handle:
            source = core.read_model(handle.read(), b"")
    else:
        source = core.read_model(model)
    if shapes:
        source.reshape({name: ov.PartialShape(list(shape)) for name, shape in shapes.items()})
    config = dict(OPENVINO_CONFIG, **({} if threads is None else {"INFERENCE_NUM_THREADS": threads}))
    return core.compile_model(source, "CPU", config)


def openvino_runner(model, static: bool = True, from_memory: bool = False):
    """``run(output_names, feeds) -> [arrays]`` on OpenVINO's CPU plugin: ``model`` (a ModelProto, or
    the path of an ``.onnx`` file, read from the file or, with ``from_memory``, from its bytes)
    compiled once with its declared shapes, or (``static``) once for each set of input shapes, made
    static first. Requests run asynchronously, so that their errors are raised with one inference
    thread too (see ``OPENVINO_CONFIG``)."""
    compiled = {}

    def run(output_names, feeds):
        key = tuple(sorted((name, value.shape) for name, value in feeds.items())) if static else ()
        if key not in compiled:
            shapes = {name: value.shape for name, value in feeds.items()} if static else None
            compiled[key] = openvino_compiled(model, shapes, from_memory=from_memory)
        request = compiled[key].create_infer_request()
        request.start_async(feeds)
        request.wait()
        return [np.array(request.get_tensor(compiled[key].output(name)).data) for name in output_names]

    return run
