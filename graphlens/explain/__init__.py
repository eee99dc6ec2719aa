"""Diagnostics: why a tensor's ``.grad`` is (or will be) None, and what a classic autograd error means."""

# The package face.  explain() lives in .grad, explain_error() in .errors, Explanation and
# the reason codes in .types; path queries in .paths, questions to live tensors in .live.
from .errors import explain_error
from .grad import explain
from .types import ERROR_REASONS, GRAD_REASONS, REASONS, Explanation

__all__ = ["explain", "explain_error", "Explanation", "GRAD_REASONS", "ERROR_REASONS", "REASONS"]
