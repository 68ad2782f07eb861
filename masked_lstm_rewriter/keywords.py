# SPDX-License-Identifier: Apache-2.0
"""Keyword arguments the public functions renamed, kept working as deprecated aliases.

The runtime a model is for is ``runtime=`` everywhere (``convert``, ``rewrite_onnx``, ``enable``,
``make_rewriter``, ``verify``); ``enable`` and ``make_rewriter`` called it ``target=`` and
``verify`` ``runtimes=``. An old keyword still works, with a :class:`DeprecationWarning` naming the
new one; giving both is a :class:`TypeError`. Errors about the value name the keyword the caller
used (:func:`renamed` returns it). Nothing here imports TensorFlow.
"""

from __future__ import annotations

import warnings


class _NotGiven:
    """The default of a deprecated keyword: tells "not given" from any value, None included."""

    def __repr__(self):
        return "<not given>"


NOT_GIVEN = _NotGiven()


def renamed(function: str, new: str, value, old: str, old_value, default=None, stacklevel: int = 3) -> tuple:
    """(the value, the keyword it was given as) of an argument renamed from ``old`` to ``new``.

    ``value``: what ``new`` holds (``default`` when the caller left it out); ``old_value``: what the
    deprecated ``old`` holds, or :data:`NOT_GIVEN`. Warns (``DeprecationWarning``, pointing at the
    caller of ``function``: ``stacklevel`` frames up from here) when ``old`` was used; raises
    ``TypeError`` when both were."""
    if old_value is NOT_GIVEN:
        return value, new
    if value is not default and value != default:
        raise TypeError(f"{function}() got both {new}= and {old}=, its deprecated name: give {new}= only")
    warnings.warn(f"{function}(): {old}= is deprecated, use {new}= (it takes the same values)",
                  DeprecationWarning, stacklevel=stacklevel)
    return old_value, old
