"""The kinds of cut: the :class:`Cut` record and the tables of operations that stop a gradient path."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Cut", "CODE_CUTS", "REWRAPS", "INDEXED", "NONDIFFERENTIABLE", "ZERO_DERIVATIVE", "CHECKPOINTS", "INTEGER_DTYPE_NAMES"]

#: dtype names of the records that can never carry a gradient.
INTEGER_DTYPE_NAMES = frozenset({"int64", "int32", "int16", "int8", "uint8", "bool", "uint16", "uint32", "uint64"})

#: Calls (methods or torch functions) whose result carries no gradient, read from code:
#: name -> the reason code of the cut they make.
CODE_CUTS = {
    "argmax": "cut_by_integer_op", "argmin": "cut_by_integer_op", "argsort": "cut_by_integer_op",
    "long": "cut_by_integer_op", "int": "cut_by_integer_op", "bool": "cut_by_integer_op", "short": "cut_by_integer_op",
    "byte": "cut_by_integer_op", "char": "cut_by_integer_op", "nonzero": "cut_by_integer_op",
    "item": "cut_by_python_value", "tolist": "cut_by_python_value", "numpy": "cut_by_python_value",
    "tensor": "cut_by_python_value", "Tensor": "cut_by_python_value", "FloatTensor": "cut_by_python_value",
    "DoubleTensor": "cut_by_python_value", "LongTensor": "cut_by_python_value", "as_tensor": "cut_by_python_value",
    "from_numpy": "cut_by_python_value", "new_tensor": "cut_by_python_value",
    "detach": "cut_by_detach",
    "histc": "cut_by_nondifferentiable_op", "bucketize": "cut_by_integer_op", "searchsorted": "cut_by_integer_op",
    "bincount": "cut_by_integer_op", "zeros_like": "cut_by_nondifferentiable_op", "ones_like": "cut_by_nondifferentiable_op",
    "full_like": "cut_by_nondifferentiable_op", "empty_like": "cut_by_nondifferentiable_op",
}
#: Factories that copy values into a new tensor without history.
REWRAPS = frozenset({"tensor", "as_tensor", "Tensor", "FloatTensor", "DoubleTensor", "LongTensor", "from_numpy", "new_tensor"})
#: ``torch.max(x, dim)[1]``, ``x.max(1)[1]``, ``.indices``: the indices of a reduction.
INDEXED = {"max", "min", "sort", "topk", "kthvalue", "mode", "median"}
#: Ops with a floating point result that PyTorch never differentiates (the result of an input
#: that requires grad has no grad_fn), with what the result holds.  Integer and bool results
#: are known by their dtype; round, floor, ceil, trunc and sign do have a backward node, whose
#: gradient is zero (see :data:`ZERO_DERIVATIVE`).
NONDIFFERENTIABLE = {
    "histc": "a histogram: counts of the values in each bin",
    "zeros_like": "a new tensor of the input's shape only", "ones_like": "a new tensor of the input's shape only",
    "empty_like": "a new tensor of the input's shape only", "full_like": "a new tensor of the input's shape only",
    "rand_like": "new random numbers of the input's shape", "randn_like": "new random numbers of the input's shape",
    "randint_like": "new random numbers of the input's shape", "new_zeros": "a new tensor", "new_ones": "a new tensor",
    "new_empty": "a new tensor", "new_full": "a new tensor",
    "_values": "the stored values of a sparse tensor, read without their history, as .data reads a dense one",
}
#: Backward nodes (without their trailing number) whose derivative is zero almost everywhere.
ZERO_DERIVATIVE = {"RoundBackward", "FloorBackward", "CeilBackward", "SignBackward", "SgnBackward", "TruncBackward"}
#: Calls that run a function under no_grad and give its output a graph only through their
#: own backward node (the reentrant ``torch.utils.checkpoint``).
CHECKPOINTS = ("checkpoint(", "checkpoint_sequential(")


class Cut(NamedTuple):
    """One place where the gradient path stops.

    ``kind`` is the reason code (``cut_by_integer_op``, ``cut_by_python_value``,
    ``cut_by_detach``, ``cut_by_no_grad``); ``op`` the operation (``"argmax"``,
    ``"item"``); ``node`` the graph node id where it happens (None when read from code);
    ``tensor`` the variable the cut made; ``line``/``code`` where in the program;
    ``text`` one sentence saying so; ``path`` node ids to highlight; ``known``: False
    when graphlens read it from the source code rather than saw it happen; ``facts`` the
    premises ``text`` states, as :attr:`Explanation.facts` triples."""

    kind: str
    op: str | None
    node: str | None
    tensor: str | None
    line: int | None
    code: str | None
    text: str
    path: tuple[str, ...] = ()
    known: bool = True
    facts: tuple = ()
