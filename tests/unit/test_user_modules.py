# SPDX-License-Identifier: Apache-2.0
"""The modules ``--custom-objects`` names (user_modules.py): how they are split, imported and
read for classes, and the one-line error for one that cannot be imported; and how custom objects
reach the TensorFlow process of a model on another backend (backend_process.py). No Keras here:
the modules are plain Python."""

import sys

import pytest

from masked_lstm_rewriter import backend_process, user_modules

LAYERS = '''
import collections
from json import JSONDecoder


class Base:
    pass


class ScaledDense(Base):
    pass


class _Private(Base):
    pass


def helper():
    return 1
'''


@pytest.fixture
def module_file(tmp_path, monkeypatch):
    """Writes ``name``.py in tmp_path; both it and the import path are forgotten after the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    written = []

    def write(name, text=LAYERS):
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        written.append(name)
        return path
    yield write
    for name in written:
        sys.modules.pop(name, None)


def test_repeated_and_comma_separated_values_each_count_once():
    assert user_modules.split(["a.b, c", "a.b", ",d,"]) == ["a.b", "c", "d"]


def test_a_py_file_is_imported_by_its_name_with_its_folder_on_the_path(module_file):
    path = module_file("mlr_unit_layers_a")
    module = user_modules.import_module(str(path))
    assert module.__name__ == "mlr_unit_layers_a" and sys.modules["mlr_unit_layers_a"] is module
    assert str(path.parent) in sys.path  # it may import its neighbours
    assert user_modules.import_module(str(path)) is module  # once


def test_a_dotted_name_is_imported_from_the_path(module_file):
    path = module_file("mlr_unit_layers_b")
    sys.path.insert(0, str(path.parent))
    assert user_modules.import_module("mlr_unit_layers_b").ScaledDense.__name__ == "ScaledDense"


def test_the_classes_it_defines_are_collected_not_those_it_imports_nor_functions(module_file):
    module = user_modules.import_module(str(module_file("mlr_unit_layers_c")))
    assert sorted(user_modules.classes_of(module)) == ["Base", "ScaledDense"]
    assert sorted(user_modules.custom_objects([str(module.__file__)])) == ["Base", "ScaledDense"]


@pytest.mark.parametrize("name, text, message", [
    ("mlr_no_such_module", None, "mlr_no_such_module: cannot import it (ModuleNotFoundError: No module named "
                                 "'mlr_no_such_module')"),
    ("mlr_unit_broken.py", "import mlr_no_such_module\n", "mlr_unit_broken.py: cannot import it "
                                                          "(ModuleNotFoundError: No module named 'mlr_no_such_module')"),
    ("mlr_unit_syntax.py", "class (:\n", "mlr_unit_syntax.py: cannot import it (SyntaxError: "),
    ("missing.py", None, "missing.py: no such file"),
    ("my-layers", None, "my-layers: not a module name (such as my_layers or project.layers) nor a .py file"),
])
def test_a_module_that_cannot_be_imported_is_one_line_naming_it(module_file, monkeypatch, tmp_path, name, text,
                                                                message):
    monkeypatch.chdir(tmp_path)
    if text is not None:
        module_file(name[:-3], text)
    with pytest.raises(user_modules.ModuleError) as raised:
        user_modules.import_module(name)
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)
    assert text is None or name[:-3] not in sys.modules  # not half-imported


def test_custom_objects_reach_the_tensorflow_process_by_module_and_name(module_file):
    module = user_modules.import_module(str(module_file("mlr_unit_layers_d")))
    named = backend_process._objects_as_json({"Alias": module.ScaledDense})  # pylint: disable=protected-access
    assert named == {"Alias": ["mlr_unit_layers_d", "ScaledDense"]}
    assert backend_process._objects_from_json(named) == {"Alias": module.ScaledDense}  # pylint: disable=protected-access


def test_a_custom_object_of_main_or_of_a_function_cannot_reach_it():
    class Local:  # pylint: disable=too-few-public-methods
        pass
    main = type("Main", (), {"__module__": "__main__"})
    for value in (Local, main):
        with pytest.raises(backend_process.BackendError, match="not importable"):
            backend_process._objects_as_json({"X": value})  # pylint: disable=protected-access
