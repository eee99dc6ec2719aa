"""Shared test set-up: hypothesis profiles (HYPOTHESIS_PROFILE=default|thorough|ci) and fixtures."""

import gc
import os

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=True, print_blob=True)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(autouse=True)
def _torch_state_is_restored():
    """Every test leaves grad mode on and no TorchFunctionMode behind."""
    yield
    assert torch.is_grad_enabled(), "a test left grad mode disabled"
    assert not torch._C._is_torch_function_mode_enabled(), "a test left a TorchFunctionMode active"


@pytest.fixture
def collect():
    """Run a full garbage collection and return it (for weakref tests)."""
    def run():
        for _ in range(3):
            gc.collect()
    return run
