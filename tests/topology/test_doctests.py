"""The examples in the topology modules' docstrings run and print what they say."""
import doctest
import importlib

import pytest

MODULES = [
    "spatial_tf.topology",
    "spatial_tf.topology.slices",
    "spatial_tf.topology.shapes",
    "spatial_tf.topology.assignment",
    "spatial_tf.topology.hosts",
    "spatial_tf.topology.placement",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0
