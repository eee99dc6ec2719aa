"""A CAM extractor registers a gradient hook on a layer's output while the model runs under torch.no_grad().

Address: https://github.com/frgfm/torch-cam/issues/217
Title: RuntimeError: cannot register a hook on a tensor that doesn't require gradient

What went wrong: torch-cam's gradient-based extractors (SmoothGradCAMpp) put a forward hook on the target
layer that calls output.register_hook(...) to catch the layer's gradient. The reporter ran the model
inside `with torch.no_grad():`, so the layer's output did not require grad and register_hook raised
"cannot register a hook on a tensor that doesn't require gradient".

Accepted answer (frgfm, the maintainer): gradient-based CAMs need the gradient; do not run the forward
under torch.no_grad() (model.eval() is enough), or use a CAM method that needs no gradient.

The traceback runs through the forward hook; the user's frames show the no_grad block around the call.
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained


class GradCAMExtractor:
    """What torch-cam's _GradCAM does: hook the target layer's activation and its gradient."""

    def __init__(self, model, target_layer):
        self.hook_a = self.hook_g = None
        target_layer.register_forward_hook(self._hook_a)

    def _hook_a(self, module, input, output):
        self.hook_a = output.detach()
        output.register_hook(self._store_grad)

    def _store_grad(self, grad):
        self.hook_g = grad


def cam_hook_under_no_grad():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
    model.eval()
    cam_extractor = GradCAMExtractor(model, target_layer=model[0])
    input = torch.rand(1, 3, 6, 6)
    with torch.no_grad():
        output = model(input)
    return cam_extractor, output


@pytest.mark.parametrize("how", HOW)
def test_names_the_output_and_the_no_grad_block(how):
    """explain_error is hook_no_requires_grad + created_in_no_grad on output, naming the with torch.no_grad() block."""
    expect(explained(cam_hook_under_no_grad, how), reason="hook_no_requires_grad", reasons=("created_in_no_grad",),
           tensor="output", op="register_hook", line="output.register_hook(self._store_grad)",
           says=("with torch.no_grad():",))


@pytest.mark.parametrize("how", HOW)
def test_fix_runs_the_forward_outside_no_grad(how):
    """The fix runs the forward outside torch.no_grad() (model.eval() keeps the graph)."""
    expect(explained(cam_hook_under_no_grad, how), fix=("outside", "model.eval()"), never_fix=("retain_grad",))
