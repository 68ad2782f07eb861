# SPDX-License-Identifier: Apache-2.0
"""The Keras names of the layers tf2onnx's graph knows by their TensorFlow name scopes.

tf_keras traces layer ``gru`` of a model under the scope ``model/gru``. Keras 3 on TensorFlow
makes every scope unique within the traced graph, and the trace of a model opens each of them a
second time: layer ``gru`` is traced under ``functional_1/gru_1``, a layer named ``gru_1`` under
``gru_1_1``. Names shown to users (the state inputs and outputs of a streaming model) are the
Keras layers', so while a Keras 3 model is converted, its layer names are remembered
(:func:`remember`, called where the plugin's front doors trace a Keras model) and
:func:`keras_path` drops that suffix from each scope whose stem is one of them. Without a
remembered model (a SavedModel, or a conversion outside :func:`..plugin.enable`) the scopes are
the names.
"""

from __future__ import annotations

import re
import threading

_SUFFIX = re.compile(r"^(.*)_\d+$")


class _Traced(threading.local):
    """Per thread: the layer names of the Keras 3 model traced for the conversion under way, which
    of its layers are stateful, and which are TimeDistributed wrappers."""

    def __init__(self):
        super().__init__()
        self.names = frozenset()
        self.stateful = frozenset()
        self.time_distributed = frozenset()


_TRACED = _Traced()


def remember(model) -> None:
    """Remember ``model``'s layer names (every nested layer's) for the conversion that traces it."""
    layers = _all_layers(model)
    # Keras 3 (a subclassed model's own class lives in the user's module); tf_keras scopes are the names
    suffixed = any(cls.__module__.split(".")[0] == "keras" for cls in type(model).__mro__)
    _TRACED.names = frozenset(layer.name for layer in layers) if suffixed else frozenset()
    _TRACED.stateful = frozenset(layer.name for layer in layers if _is_stateful_layer(layer))
    _TRACED.time_distributed = frozenset(layer.name for layer in layers if type(layer).__name__ == "TimeDistributed")


def forget() -> None:
    """The conversion is over: scopes are names again until the next model is traced."""
    _TRACED.names = _TRACED.stateful = _TRACED.time_distributed = frozenset()


def keras_path(scope_path: str) -> str:
    """The Keras path of a layer the graph names ``scope_path`` ("functional_1/gru_1" stripped of its
    model, "gru_1" -> "gru", or "inner_1/gru_1" -> "inner/gru" in a nested model)."""
    return "/".join(_keras_name(part) for part in scope_path.split("/"))


def is_stateful(scope_path: str) -> bool:
    """Is the remembered model's layer at ``scope_path`` a ``stateful=True`` recurrent layer?"""
    return keras_path(scope_path).split("/")[-1] in _TRACED.stateful


def inside_time_distributed(scope_path: str) -> bool:
    """Does the remembered model run the layer at ``scope_path`` inside a ``TimeDistributed`` wrapper
    (over an inner axis of each step, starting afresh at every step)?"""
    return any(part in _TRACED.time_distributed for part in keras_path(scope_path).split("/"))


def stateful_layers() -> list:
    """The names of the remembered model's ``stateful=True`` layers, sorted."""
    return sorted(_TRACED.stateful)


def _keras_name(scope: str) -> str:
    found = _SUFFIX.match(scope)
    return found.group(1) if found and found.group(1) in _TRACED.names else scope


def _is_stateful_layer(layer) -> bool:
    """A recurrent layer built with ``stateful=True`` (a model's ``stateful`` says whether any of its layers is)."""
    return getattr(layer, "stateful", False) is True and not hasattr(layer, "layers")


def _all_layers(model) -> list:
    """Every layer of ``model``, nested ones included (Keras 3 and tf_keras both have ``_flatten_layers``)."""
    flatten = getattr(model, "_flatten_layers", None)
    try:
        return list(flatten(include_self=False, recursive=True)) if flatten else list(getattr(model, "layers", []))
    except Exception:  # pylint: disable=broad-except  (names are for show: never fail a conversion on them)
        return []
