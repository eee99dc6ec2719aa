"""A memory-saving Sequential that runs its first segments through the reentrant checkpoint: the image batch needs no grad, so the first layers never get a gradient.

Address: https://github.com/Lyken17/pytorch-memonger/issues/4
Title: None of the inputs have requires_grad=True. Gradients will be None

What went wrong: a ResNet converted to memonger's SublinearSequential printed "None of the inputs
have requires_grad=True. Gradients will be None" at training time, and the first layers were never
updated (their .grad stayed None). The sequential's forward calls checkpoint(run_function(...),
input, use_reentrant=True) on each segment but the last, from inside the module, on the module's
own lines.

Accepted answer: the issue was closed without a reply; the standard fix, from the warning and
torch.utils.checkpoint's documentation: the reentrant checkpoint runs its segment under no_grad and
gives the result a graph only when one of the tensors passed to it requires grad. Make the input
require grad (inputs.requires_grad_()) or use use_reentrant=False.

The ops inside the segment run on the segment function's own line, not on a line that calls
checkpoint: a trace knows the no_grad is the checkpoint's own, because PyTorch runs the segment
inside the checkpoint's autograd Function. The user's code holds no torch.no_grad() block.
"""

import math
import warnings

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import graphlens as gl
from _helpers import expect


class SublinearSequential(nn.Sequential):
    def forward(self, input):
        def run_function(start, end, functions):
            def forward(input):
                for j in range(start, end + 1):
                    input = functions[j](input)
                return input
            return forward

        functions = list(self.children())
        segments = int(math.sqrt(len(functions)))
        segment_size = len(functions) // segments
        end = -1
        for start in range(0, segment_size * (segments - 1), segment_size):
            end = start + segment_size - 1
            input = checkpoint(run_function(start, end, functions), input, use_reentrant=True)
        return run_function(end + 1, len(functions) - 1, functions)(input)


def block(c):
    return nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU())


def sublinear_resnet_step():
    torch.manual_seed(0)
    net = SublinearSequential(
        nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
        block(4), block(4), block(4), block(4),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10),
    )
    criterion = nn.CrossEntropyLoss()
    inputs, targets = torch.randn(2, 3, 8, 8), torch.tensor([1, 7])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the warning the user saw)
        with gl.trace() as tr:
            outputs = net(inputs)
            loss = criterion(outputs, targets)
            loss.backward()
    return net, loss, tr


def test_traced_answer_is_the_reentrant_checkpoint_not_a_no_grad_block():
    """explain(net[0].weight, tr): cut_by_checkpoint, the batch named as the input that needs no grad, never cut_by_no_grad."""
    net, loss, tr = sublinear_resnet_step()
    assert net[0].weight.grad is None and net[9].weight.grad is not None
    expect(gl.explain(net[0].weight, tr), reason="not_reachable", reasons=("cut_by_checkpoint",),
           not_reasons=("cut_by_no_grad",), tensor="net.0.weight", op="checkpoint",
           says=("reentrant torch.utils.checkpoint", "inputs does not require grad"),
           never=("running_mean", "num_batches_tracked"))


def test_fix_is_use_reentrant_false_or_an_input_that_requires_grad():
    """The fix is use_reentrant=False (or an input that requires grad), never leaving a no_grad block the code does not have."""
    net, loss, tr = sublinear_resnet_step()
    expect(gl.explain(net[0].weight, tr), fix=("use_reentrant=False", "require grad"), never_fix=("no_grad() block",))


def test_the_diagram_says_whose_no_grad_it_is():
    """The region of the segment's ops is drawn as a no_grad inside a reentrant checkpoint."""
    from graphlens.render import to_dot

    net, loss, tr = sublinear_resnet_step()
    assert "no_grad (inside a reentrant checkpoint)" in to_dot(tr.graph()).source
