# SPDX-License-Identifier: Apache-2.0
"""Write a model file all at once: a failed or interrupted conversion leaves no file behind."""

from __future__ import annotations

import contextlib
import os
import tempfile


class OutputError(OSError):
    """The output path cannot be written: a one-line reason for the user."""


def check_writable(path) -> str:
    """The folder ``path`` goes in, after checking that a file can be created there."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise OutputError(f"{path}: is a directory, not a file name")
    if not os.path.isdir(folder):
        raise OutputError(f"{path}: directory {folder} does not exist")
    try:  # a real attempt: permission bits do not tell (root, read-only mounts, /proc)
        with tempfile.NamedTemporaryFile(prefix=".probe-", dir=folder):
            pass
    except OSError as error:
        raise OutputError(f"{path}: cannot write in {folder} ({error.strerror or error})") from None
    return folder


@contextlib.contextmanager
def atomic_path(path):
    """Yields a hidden temporary path next to ``path``; what was written there becomes ``path``
    only when the block ends without an error (then with an ordinary new file's permissions).
    On any error, ``KeyboardInterrupt`` and ``SystemExit`` included, the temporary file is removed."""
    handle, partial = tempfile.mkstemp(prefix=".partial-", suffix=".onnx", dir=check_writable(path))
    os.close(handle)
    try:
        yield partial
        if not os.path.getsize(partial):
            raise OutputError(f"{path}: nothing was written")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(partial, 0o666 & ~umask)  # as an ordinary new file, not mkstemp's 0600
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
