"""An optimizer given a slice of a learned text embedding refuses it (a non-leaf): the answer names the embedding the slice was cut from as the leaf to optimize.

Address: https://github.com/aliasgharkhani/SLiMe/issues/10
Title: Optimize Text embedding error: can't optimize a non-leaf Tensor

What went wrong: `embeddings_to_optimize = text_embedding[:, 1:num_parts + 1]`, then
`torch.optim.Adam([embeddings_to_optimize])` raises "can't optimize a non-leaf Tensor".

Accepted answer (the reporter's own diagnosis, the only one): embeddings_to_optimize is a slice of
text_embedding, so it is not a leaf; optimize the tensor it is cut from, or make the slice a leaf.

The leaf is held by a variable of the user's frame: the answer must name it (text_embedding), in
the sentence and in the fix, and never say that no variable holds it.
"""

import pytest
import torch

from _helpers import HOW, expect, explained


def optimize_a_slice():
    torch.manual_seed(0)
    num_parts = 2
    text_embedding = torch.randn(1, 7, 8).requires_grad_(True)
    embeddings_to_optimize = text_embedding[:, 1:num_parts + 1]
    torch.optim.Adam([embeddings_to_optimize], lr=0.1)


@pytest.mark.parametrize("how", HOW)
def test_names_the_embedding_as_the_leaf_to_optimize(how):
    """explain(err): embeddings_to_optimize is a slice (SliceBackward0) of the leaf text_embedding, which the fix gives the optimizer."""
    expect(explained(optimize_a_slice, how), reason="optimizer_nonleaf", tensor="embeddings_to_optimize", op="SliceBackward0",
           line="text_embedding[:, 1:num_parts + 1]", says=("one leaf that requires grad, text_embedding",),
           fix=("Give the optimizer text_embedding",), never=("no variable graphlens can see",))
