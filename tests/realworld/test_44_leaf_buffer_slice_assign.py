"""A buffer created with requires_grad=True is a leaf; filling it slice by slice is refused.

Address: https://github.com/Alex-Fabbri/lang2logic-PyTorch/issues/1
Title: RuntimeError: leaf variable has been moved into the graph interior

What went wrong: eval_training allocates buffers as leaves that require grad
(torch.zeros(..., requires_grad=True)) and fills them with encoder outputs in place. On the
reporter's PyTorch this surfaced at backward as "leaf variable has been moved into the graph
interior"; on torch 2.13 the same write is refused at once with the view-of-leaf in-place error.

Accepted answer (reporter): allocate the buffer, then clone() it so the writes go into a non-leaf;
simpler: do not set requires_grad on a buffer that only collects outputs.
"""

import pytest
import torch
from torch import nn

from _helpers import HOW, expect, explained, note


def leaf_buffer_slice_assign():
    torch.manual_seed(0)
    encoder = nn.Linear(3, 4)
    enc_batch = torch.randn(2, 5, 3)
    enc_max_len = enc_batch.size(1)
    enc_outputs = torch.zeros((enc_batch.size(0), enc_max_len, 4), requires_grad=True)
    for i in range(enc_max_len):
        enc_outputs[:, i, :] = encoder(enc_batch[:, i, :])
    enc_outputs.sum().backward()


@pytest.mark.parametrize("how", HOW)
def test_names_the_buffer_and_proposes_clone(how):
    """explain_error says a view of enc_outputs, a leaf that requires grad, was written, and proposes clone()."""
    expect(explained(leaf_buffer_slice_assign, how), reason="inplace_leaf", tensor="enc_outputs",
           says=("a view of enc_outputs", "enc_outputs[:, i, :] = encoder"), fix=("enc_outputs.clone()",),
           not_reasons=("leaf_moved_interior",))


def test_note_names_the_buffer():
    """The note of trace(explain_errors=True) names enc_outputs."""
    expect(note(leaf_buffer_slice_assign), says=("enc_outputs",))


@pytest.mark.parametrize("how", HOW)
def test_line_and_op_of_the_buffer_write(how):
    """e.line is the write into enc_outputs and e.op the in-place copy."""
    expect(explained(leaf_buffer_slice_assign, how), line="enc_outputs[:, i, :] = encoder", op=("copy_", "__setitem__", "setitem"))
