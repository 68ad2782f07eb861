# SPDX-License-Identifier: Apache-2.0
"""Write a model file all at once: a failed or interrupted conversion leaves no file behind."""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Callable, Optional


class OutputError(OSError):
    """The output path cannot be written: a one-line reason for the user."""


def check_writable(path) -> str:
    """The folder ``path`` goes in, after checking that a file can be created there."""
    path = os.fspath(path)
    if not path:
        raise OutputError("an empty file name")
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise OutputError(f"{path}: is a directory, not a file name")
    if not os.path.isdir(folder):
        blocking = _file_in_the_way(path)
        if blocking is not None:
            raise OutputError(f"{path}: {blocking} is a file, not a directory")
        raise OutputError(f"{path}: directory {folder} does not exist")
    try:  # a real attempt: permission bits do not tell (root, read-only mounts, /proc)
        with tempfile.NamedTemporaryFile(prefix=".probe-", dir=folder):
            pass
    except OSError as error:
        raise OutputError(f"{path}: cannot write in {folder} ({error.strerror or error})") from None
    return folder


def _file_in_the_way(path: str) -> Optional[str]:
    """The folder of ``path`` (as given) that exists but is not a folder, if any: ``model.keras`` in
    ``model.keras/out.onnx``."""
    folder = os.path.dirname(path)
    while folder and not os.path.exists(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent
    return folder if folder and not os.path.isdir(folder) else None


@contextlib.contextmanager
def atomic_path(path, before_rename: Optional[Callable[[], None]] = None):
    """Yields a hidden temporary path next to ``path``; what was written there becomes ``path``
    only when the block ends without an error (then with an ordinary new file's permissions).
    On any error, ``KeyboardInterrupt`` and ``SystemExit`` included, the temporary file is removed.

    ``before_rename`` is called just before the rename, after the last check: from then on the
    file is as good as written (the command line holds Ctrl-C from there on, so that an
    interruption cannot leave a renamed file behind a failure status)."""
    handle, partial = tempfile.mkstemp(prefix=".partial-", suffix=".onnx", dir=check_writable(path))
    os.close(handle)
    try:
        yield partial
        if not os.path.getsize(partial):
            raise OutputError(f"{path}: nothing was written")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(partial, 0o666 & ~umask)  # as an ordinary new file, not mkstemp's 0600
        if before_rename is not None:
            before_rename()
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
