"""A memory module keeps its keys and values as plain tensors made with torch.randn: they are not parameters, get no gradient and are never trained.

Address: https://github.com/SimonThomine/RememberingNormality/issues/7
Title: some questions

What went wrong: NormalityMemory.__init__ sets self.keys = torch.randn(L, channel) (and self.values);
the reporter noticed they stay at their random start.

Accepted answer (the maintainer's, fixed in the repository): they must be nn.Parameter, so that the
module registers them and the optimizer trains them.

The answer says keys does not require grad and is a plain tensor attribute, not among the optimizer's
parameters, and the fix registers it as nn.Parameter (requires_grad=True alone would not train it).
"""

import pytest
import torch
import torch.nn as nn

import graphlens as gl
from _helpers import expect


class NormalityMemory(nn.Module):
    def __init__(self, L, channel):
        super().__init__()
        self.keys = torch.randn(L, channel)
        self.values = torch.randn(L, channel)
        self.proj = nn.Linear(channel, channel)

    def forward(self, f):
        q = self.proj(f)
        attn = torch.softmax(q @ self.keys.t(), dim=-1)
        return attn @ self.values


@pytest.mark.parametrize("traced", (False, True))
def test_keys_must_be_registered_as_a_parameter(traced):
    """explain(mem.keys, ..., optimizer=opt): a plain tensor attribute, not in the optimizer; fix: nn.Parameter."""
    torch.manual_seed(0)
    mem = NormalityMemory(6, 4)
    opt = torch.optim.Adam(mem.parameters(), lr=1e-2)
    teacher_feat, student_feat = torch.randn(3, 4), torch.randn(3, 4)
    if traced:
        with gl.trace() as tr:
            loss = (mem(student_feat) - teacher_feat).pow(2).mean()
            loss.backward()
        e = gl.explain(mem.keys, tr, optimizer=opt)
    else:
        loss = (mem(student_feat) - teacher_feat).pow(2).mean()
        loss.backward()
        e = gl.explain(mem.keys, loss, optimizer=opt)
    expect(e, reason="requires_grad_false", tensor="mem.keys", says=("not an nn.Parameter", "not among the optimizer"),
           fix=("nn.Parameter",))
