"""dense.weight[:, pos] -= ... changes a view of a leaf Parameter in place.

Address: https://github.com/Hunter-DDM/knowledge-neurons/issues/14
Title: RuntimeError: a view of a leaf Variable that requires grad is being used in an in-place operation.

What went wrong: the knowledge-editing script edits one column of a dense layer with
weight[:, pos] -= emb * lam. The weight is a Parameter, weight[:, pos] a view of it, and -= is in
place, so PyTorch raises the view-of-leaf error.

Accepted answer (standard): edit parameters inside torch.no_grad().
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained, note


def view_of_leaf_weight_column():
    dense = nn.Linear(4, 3)
    ori_pred_emb = torch.randn(3)
    tgt_emb = torch.randn(3)
    pos, lam1, lam2 = 1, 0.5, 0.5
    dense.weight[:, pos] -= ori_pred_emb * lam1
    dense.weight[:, pos] += tgt_emb * lam2
    return dense


@pytest.mark.parametrize("how", HOW)
def test_names_the_view_of_the_parameter(how):
    """explain_error says a view of dense.weight was changed, quotes the -= line, proposes torch.no_grad()."""
    expect(explained(view_of_leaf_weight_column, how), reason="inplace_leaf", tensor="dense.weight",
           says=("a view of dense.weight", "dense.weight[:, pos] -= ori_pred_emb * lam1"), fix=("torch.no_grad()",),
           never=("+= tgt_emb",))


def test_note_names_the_view():
    """The note of trace(explain_errors=True) names the view of dense.weight."""
    expect(note(view_of_leaf_weight_column), says=("a view of dense.weight",))


@pytest.mark.parametrize("how", HOW)
def test_line_and_op_as_fields(how):
    """e.line is the first -= line and e.op the in-place subtraction."""
    expect(explained(view_of_leaf_weight_column, how), line="dense.weight[:, pos] -=", op=("sub_", "__isub__", "isub"))
