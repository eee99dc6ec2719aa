"""What common backward nodes do with the gradient that arrives, in plain words (for the replay's sentences)."""

from __future__ import annotations

import re

__all__ = ["rule", "base", "FACTOR_OF"]

#: The phrase for a backward class (its name without the trailing version digit): what it
#: does to the incoming gradient before sending it on.  ``{factor}`` is filled in by the
#: caller where the node multiplies by a value it saved.
_RULES: dict[str, str] = {
    "Add": "passes it on unchanged to each input",
    "Sub": "passes it on to the first input and its negative to the second",
    "Rsub": "passes its negative on to the first input",
    "Neg": "passes its negative on",
    "Mul": "multiplies it by the other factor{factor}",
    "Div": "divides it by the divisor{factor} for the numerator and scales it by -numerator / divisor² for the divisor",
    "Sum": "copies it to every element of the input",
    "Mean": "divides it by the number of elements averaged and copies it to each",
    "Pow": "multiplies it by exponent × base^(exponent - 1)",
    "Sqrt": "multiplies it by 1 / (2 √input)",
    "Exp": "multiplies it by the result, exp(input)",
    "Log": "divides it by the input",
    "Sin": "multiplies it by cos(input)",
    "Cos": "multiplies it by -sin(input)",
    "Abs": "multiplies it by the sign of the input",
    "Relu": "lets it through where the input was positive and sends 0 elsewhere",
    "Threshold": "lets it through where the input was above the threshold and sends 0 elsewhere",
    "Sigmoid": "multiplies it by σ(1 - σ), σ being the node's output",
    "Tanh": "multiplies it by 1 - tanh², from the node's output",
    "Gelu": "multiplies it by the slope of GELU at the input",
    "Softmax": "multiplies it by the Jacobian of softmax (output × (gradient - its weighted sum))",
    "LogSoftmax": "subtracts softmax × the summed gradient",
    "Clone": "passes it on unchanged",
    "Alias": "passes it on unchanged",
    "ToCopy": "passes it on, converted back to the input's dtype and device",
    "View": "reshapes it back to the input's shape",
    "Reshape": "reshapes it back to the input's shape",
    "UnsafeView": "reshapes it back to the input's shape",
    "Unsqueeze": "removes the dimension the forward added",
    "Squeeze": "puts back the dimension the forward removed",
    "Expand": "sums it over the broadcast dimensions, back to the input's shape",
    "T": "transposes it back",
    "Transpose": "transposes it back",
    "Permute": "permutes it back to the input's order of dimensions",
    "Select": "puts it into a zero tensor of the input's shape, at the selected index",
    "Slice": "puts it into a zero tensor of the input's shape, at the slice",
    "Index": "puts it into a zero tensor of the input's shape, at the indexed places",
    "Cat": "splits it back into the pieces that were joined",
    "Stack": "splits it back into the tensors that were stacked",
    "Mm": "multiplies it by the other matrix, transposed",
    "Mv": "multiplies it by the other operand, transposed",
    "Bmm": "multiplies it by the other batch of matrices, transposed",
    "Addmm": "multiplies it by the other matrix, transposed (and passes it on, summed, to the bias)",
    "Dot": "multiplies it by the other vector",
    "MseLoss": "multiplies it by 2 (input - target) / n",
    "NllLoss": "sends minus it (divided by the batch size) to the picked log-probabilities",
    "Embedding": "adds it to the rows of the weight that were looked up",
    "NativeLayerNorm": "applies layer norm's backward (through the mean and variance)",
    "NativeDropout": "multiplies it by the dropout mask the forward drew",
    "Max": "sends it to the place of the maximum",
    "Min": "sends it to the place of the minimum",
}

#: The phrase when the gradient goes to the first input only.
_FIRST_ONLY: dict[str, str] = {"Div": "divides it by the divisor{factor}"}

#: Which saved attribute is "the other factor" for a gradient sent to each input of Mul:
#: input 0 (``self``) is scaled by the saved ``other``, input 1 by the saved ``self``.
FACTOR_OF = {"Mul": ("other", "self"), "Div": ("other", None)}

_VERSION = re.compile(r"Backward\d*$")


def base(name: str) -> str:
    """``"MulBackward0"`` -> ``"Mul"``; names without ``Backward`` are returned as they are."""
    return _VERSION.sub("", name)


def rule(name: str, inputs: frozenset[int] | set[int] | None = None) -> str | None:
    """The phrase for backward class ``name`` (sending to the input positions ``inputs``),
    or ``None`` when graphlens has none.

    >>> rule("MulBackward0")
    'multiplies it by the other factor{factor}'
    >>> rule("DivBackward0", {0})
    'divides it by the divisor{factor}'
    >>> rule("SomethingNewBackward3") is None
    True
    """
    key = base(name)
    if inputs is not None and set(inputs) == {0} and key in _FIRST_ONLY:
        return _FIRST_ONLY[key]
    return _RULES.get(key)
