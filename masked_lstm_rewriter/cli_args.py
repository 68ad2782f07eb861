# SPDX-License-Identifier: Apache-2.0
"""Where the command line's command and MODEL are among its arguments, whatever options come first
(``-q verify A B``, ``--opset 17 model.keras -o out.onnx``)."""

from __future__ import annotations

import re
from typing import Optional

QUIET = ("-q", "--quiet")
COMMANDS = ("verify", "rewrite", "convert")
# tf2onnx's options that take no value, and the ones every command takes: what may come before MODEL
# or a command without being an option's value
FLAGS = ("--large_model", "--use-graph-names", "--dequantize", "--continue_on_error", "--verbose", "--debug") + QUIET


def split_command(args: list) -> tuple:
    """(the command, the arguments without it): a command named first, or after flags only; else
    (None, ``args``), a conversion."""
    for position, arg in enumerate(args):
        if arg in COMMANDS:
            return arg, args[:position] + args[position + 1:]
        if not is_flag(arg):
            break
    return None, args


def model_position(args: list) -> Optional[int]:
    """Where MODEL is, the first argument that is no option or option's value: an option other than a
    flag (:data:`FLAGS`) takes the argument after it, unless it holds its value (``--opset=17``)."""
    position = 0
    while position < len(args):
        arg = args[position]
        if not arg.startswith("-"):
            return position
        position += 1 if is_flag(arg) or "=" in arg else 2
    return None


def is_flag(arg: str) -> bool:
    """An option that takes no value (``-vv`` counts the verbosity)."""
    return arg in FLAGS or re.fullmatch(r"-v+", arg) is not None
