# SPDX-License-Identifier: Apache-2.0
"""The command line's streaming switch, as :func:`.conversion.convert`'s ``streaming``.

``--streaming`` streams, ``--no-streaming`` does not (a stateful model's states are frozen), and
with neither a Keras file streams when its model has ``stateful=True`` layers: that is decided
once tf2onnx's ``main`` has loaded the file (:func:`streaming_decided`), as ``convert`` decides it
for a model object. A SavedModel streams only with ``--streaming``: its Keras layers are not known.

What the conversion says of stateful layers (streamed, or frozen) is shown as progress lines,
naming the command line's flags where the library names its keyword.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Callable, Optional

from .cli_input import pop_switch

logger = logging.getLogger("masked_lstm_rewriter")

STATEFUL_RECORDS = "stateful layer"  # how the library's records of stateful layers begin
KEYWORDS_AS_FLAGS = {"streaming=True": "--streaming", "streaming=False": "--no-streaming"}


def pop_streaming(args: list) -> tuple:
    """(True for ``--streaming``, False for ``--no-streaming``, None for neither; the other arguments)."""
    return pop_switch(args, "streaming")


@contextlib.contextmanager
def streaming_decided(streaming: Optional[bool], streaming_plugin: Callable):
    """Within the block, with ``streaming`` None, a Keras file loaded by the conversion
    (:func:`.keras_source.load`) whose model has stateful layers streams: ``streaming_plugin()``,
    the plugin enabled with streaming on, is in force from then until the block ends (the
    plugin's rewriter runs after the load). Records of stateful layers are progress lines."""
    from . import keras_source  # pylint: disable=import-outside-toplevel
    from .conversion import streaming_for  # pylint: disable=import-outside-toplevel  (convert's decision)
    load = keras_source.load
    decided = contextlib.ExitStack()

    def load_deciding(path, custom_objects=None):
        model = load(path, custom_objects)
        if streaming is None and streaming_for(model, None):
            decided.enter_context(streaming_plugin())
        return model

    keras_source.load = load_deciding
    logger.addFilter(stateful_as_progress)
    try:
        with decided:
            yield
    finally:
        keras_source.load = load
        logger.removeFilter(stateful_as_progress)


def stateful_as_progress(record: logging.LogRecord) -> bool:
    """A record of a stateful layer becomes a progress line (shown without ``-v``), the library's
    keyword (``streaming=False``) said as the flag (``--no-streaming``)."""
    if isinstance(record.msg, str) and record.msg.startswith(STATEFUL_RECORDS):
        for keyword, flag in KEYWORDS_AS_FLAGS.items():
            record.msg = record.msg.replace(keyword, flag)
        record.progress = True
    return True
