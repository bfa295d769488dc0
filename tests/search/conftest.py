"""The search tests' fixtures. `models` and `predictors` are function-scoped views of what
search.helpers builds once per process (each xdist worker): a module- or session-scoped fixture
defined in tests/ would put every test using it into one xdist group (tests/conftest.py's
_groups), on one worker, while these cost about a second each to build."""
from __future__ import annotations

import functools

import pytest

from search.helpers import trained, zoo_models


@pytest.fixture
def models():
    """name -> (normalized model, feeds, reference outputs) for resnet_tiny and mobilenet_v2_tiny."""
    return zoo_models()


@pytest.fixture
def predictors(tmp_path_factory):
    """predictors(target, name) -> a CostModel trained on the model and its one-action variants."""
    folder = tmp_path_factory.getbasetemp() / "search-predictors"
    folder.mkdir(exist_ok=True)
    return functools.partial(trained, folder)
