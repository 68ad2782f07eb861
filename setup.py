# SPDX-License-Identifier: Apache-2.0
"""Metadata lives in setup.cfg; this file only ships the start-up hook.

``masked_lstm_rewriter.pth`` must land at the root of site-packages (where Python reads .pth
files at start-up) for ``TF2ONNX_MASKED_LSTM=post|any`` to reach an unmodified
``python -m tf2onnx.convert``. build_py puts it next to the packages for a regular install;
editable_wheel (which links the packages instead of building them) adds it to its wheel.
"""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = "masked_lstm_rewriter.pth"


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        self.copy_file(PTH, os.path.join(self.build_lib, PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH)]

    def get_output_mapping(self):
        mapping = super().get_output_mapping()
        mapping[os.path.join(self.build_lib, PTH)] = PTH
        return mapping


class EditableWheelWithPth(editable_wheel):
    """An editable wheel links the packages to the checkout; the .pth must still be in it."""

    def _run_build_commands(self, dist_name, unpacked_wheel, build_lib, tmp_dir):
        result = super()._run_build_commands(dist_name, unpacked_wheel, build_lib, tmp_dir)
        shutil.copyfile(PTH, os.path.join(unpacked_wheel, PTH))
        return result


setup(cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth})
