"""counts = out.round().long() leaves the graph: a loss from the integer counts cannot backward.

Address: https://discuss.pytorch.org/t/torch-round-gradient/28628/4
Title: Torch.round() gradient (follow-up in the thread: rounding a network's output and still learning)

What went wrong: a later poster asked how to round a network's outputs and still train. This case
is our variant of that question with an integer cast (.round().long()), which leaves the graph: the
integer tensor has no grad_fn, so a loss computed from it (after .float()) cannot reach the model
and backward fails with "element 0 of tensors does not require grad ...".

Accepted answer (thread): rounding has no useful gradient; keep the loss on the float output or use
a straight-through / custom-backward round (e.g. x + (x.round() - x).detach()).

That .long() made the cut is seen by a trace; without one it can only be read from the user's code,
as a lead.
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained


def round_long_cast():
    torch.manual_seed(0)
    net = nn.Linear(2, 1)
    target = torch.tensor([[3.0], [1.0]])
    out = net(torch.randn(2, 2)) * 5
    counts = out.round().long()
    loss = ((counts.float() - target) ** 2).mean()
    loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_says_nothing_false_about_the_cut(how):
    """explain_error says no_grad_fn on loss, names integer results, and blames no detach() or no_grad."""
    expect(explained(round_long_cast, how), reason="no_grad_fn", tensor="loss", says=("integer",),
           not_reasons=("made_by_detach", "cut_by_detach", "created_in_no_grad", "cut_by_no_grad"),
           never_fix=("requires_grad=True",))


def test_traced_answer_names_the_long_cast():
    """With a trace, the answer is no_grad_fn + cut_by_integer_op at .long(), on the counts line."""
    expect(explained(round_long_cast, "traced"), reason="no_grad_fn", reasons=("cut_by_integer_op",), op=("long", "to"),
           line="counts = out.round().long()")


def test_plain_answer_gives_the_cast_as_a_lead():
    """Without a trace, the .long() read from the user's code is given as a lead, said conditionally."""
    expect(explained(round_long_cast), reasons=("cut_by_integer_op",), op=("long", "to"), line="counts = out.round().long()",
           says=("If ",))
