"""An orientation head in float16, angle = atan2(s, c), with a tiny predicted vector (0, 1e-3): atan2's backward forms 1 / (s² + c²) = 1e6 and overflows float16.

Address: https://github.com/pytorch/pytorch/issues/193040
Title: `torch.atan2` backward returns `±inf` (then silently `0`) in float16 where the gradient is an ordinary number

What went wrong: atan2's derivatives, c / (s² + c²) and -s / (s² + c²), are ordinary numbers for a
small vector (here 1000 and 0), but PyTorch's backward first forms the reciprocal 1 / (s² + c²) as a
tensor of the input's dtype; for (0, 1e-3) that is 1e6, above float16's 65504, so the gradient is
-inf, and the linear layer's backward turns it into NaN in the weights. The point is not the origin.

Accepted answer: the reporter's analysis, and robertomeroni's pull request 193130, which computes
atan2's backward in the op math type (float32 for float16 inputs); until then, call atan2 on float32
inputs, or keep the vector away from the origin (normalise it).

The old answer said "atan2 has no derivative at (0, 0)" and suggested atan2(y, x + eps): the point is
not (0, 0), and an eps would not stop the float16 overflow.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


class OrientationHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, feats):
        s, c = self.fc(feats).unbind(-1)
        angle = torch.atan2(s, c)
        return angle


def atan2_half_orientation():
    torch.manual_seed(0)
    head = OrientationHead()
    with torch.no_grad():
        head.fc.weight.copy_(torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]))
        head.fc.bias.zero_()
    head = head.half()
    feats = torch.tensor([[0.6, 0.8, 1.0, 0.0], [0.0, 0.001, 0.5, 0.2], [-0.5, 0.5, 0.1, 0.1]]).half()
    target = torch.tensor([0.7, 0.1, 2.0]).half()
    with gl.trace() as tr:
        angle = head(feats)
        loss = (1 - torch.cos(angle - target)).mean()
        loss.backward()
    return head, loss, tr


def test_nan_gradient_names_atan2s_float16_overflow_near_the_origin():
    """explain(head.fc.weight, tr): Atan2Backward0 sent -inf at s[1] = 0, c[1] = 0.001: 1 / (x² + y²) overflows float16, not the origin."""
    head, loss, tr = atan2_half_orientation()
    assert torch.isfinite(loss) and torch.isnan(head.fc.weight.grad).any()
    expect(gl.explain(head.fc.weight, tr), reason="nonfinite_backward", reasons=("overflow",),
           not_reasons=("infinite_derivative",), tensor="head.fc.weight", op="atan2", line="angle = torch.atan2(s, c)",
           says=("Atan2Backward0", "s[1] = 0, c[1] = 0.0010004", "is not the origin", "1 / (x² + y²)", "65504"),
           never=("at (0, 0)", "has no derivative"))


def test_fix_computes_atan2_in_float32():
    """The fix calls atan2 on float32 inputs (or normalises the vector), never atan2(y, x + eps)."""
    head, loss, tr = atan2_half_orientation()
    expect(gl.explain(head.fc.weight, tr), fix=("torch.atan2(y.float(), x.float())",), never_fix=("atan2(y, x + eps)",))
