# SPDX-License-Identifier: Apache-2.0
"""The Keras flavour of a process: Keras 3, or tf_keras (``TF_USE_LEGACY_KERAS=1``).

TensorFlow reads ``TF_USE_LEGACY_KERAS`` once, when it is first imported, so a flavour is chosen
for a whole process: :func:`select` in this one before TensorFlow is imported, or
:func:`flavour_env` for a child process. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import logging
import os
import sys

LOG = logging.getLogger(__name__)
FLAVOURS = ("keras3", "tf_keras")
LEGACY_KERAS = "TF_USE_LEGACY_KERAS"
# also set for a flavour's process unless already set: quiet TensorFlow, and no GPU (Keras's cuDNN
# kernels cannot be converted); output unbuffered, so that a parent shows it as it comes
DEFAULTS = {"TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}


def current_flavour() -> str:
    """The Keras flavour TensorFlow uses in this process: tf_keras when ``TF_USE_LEGACY_KERAS`` is
    set the way TensorFlow reads it (``1``, ``true``, ``True``), else Keras 3."""
    return "tf_keras" if os.environ.get(LEGACY_KERAS, "") in ("1", "true", "True") else "keras3"


def flavour_env(flavour: str, base=None) -> dict:
    """The environment of a process that runs ``flavour``: ``base`` (default: this process's) with
    ``TF_USE_LEGACY_KERAS`` set for it and :data:`DEFAULTS` where unset."""
    if flavour not in FLAVOURS:
        raise ValueError(f"unknown Keras flavour {flavour!r}, expected one of {FLAVOURS}")
    env = dict(os.environ if base is None else base)
    env[LEGACY_KERAS] = "1" if flavour == "tf_keras" else "0"
    for name, value in DEFAULTS.items():
        env.setdefault(name, value)
    return env


def select(flavour: str) -> None:
    """Make this process run ``flavour``: must come before TensorFlow is imported, which reads it
    once (a warning says so when it is already loaded: the process keeps the Keras it has)."""
    os.environ.update(flavour_env(flavour))
    if "tensorflow" in sys.modules:
        LOG.warning("TensorFlow is already imported: selecting %s now may not change its Keras", flavour)
