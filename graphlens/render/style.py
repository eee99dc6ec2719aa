"""The visual language of the diagrams: colours, fonts and default options (constants only)."""

from __future__ import annotations

__all__ = [
    "VIEWS",
    "DIRECTIONS",
    "MAX_NODES",
    "MAX_ELEMENTS",
    "MIN_CHAIN",
    "MODULE_NODES",
    "FONT",
    "LEAF_FILL",
    "NONLEAF_FILL",
    "GRAD_BORDER",
    "PLAIN_BORDER",
    "PARAM_PERIPHERIES",
    "OP_FILL",
    "OP_BORDER",
    "RELEASED",
    "GRAD_TEXT",
    "NONFINITE",
    "HIGHLIGHT",
    "DETACH",
    "REGION",
    "BOX_FILL",
    "BOX_BORDER",
    "FROZEN_FILL",
    "FROZEN_BORDER",
    "FADED",
]

# -- default options ---------------------------------------------------------------------
#: The diagrams :func:`~graphlens.render.to_dot` can draw.
VIEWS = ("data", "function")
#: Which way the arrows point: as the forward pass ran, or as gradients flow back.
DIRECTIONS = ("forward", "backward")
#: Above this many drawn nodes, submodules and repeated chains of identical ops collapse.
MAX_NODES = 150
#: How many numbers a value or grad row shows by default.
MAX_ELEMENTS = 4
#: A run of at least this many identical ops collapses into one node (above ``max_nodes``).
MIN_CHAIN = 3
#: A model's graph (nodes with module scopes) above this many drawn nodes opens collapsed
#: to the deepest module level that fits in this many.
MODULE_NODES = 60

# -- the visual language (see DESIGN.md) ------------------------------------------------
FONT = "Helvetica"
LEAF_FILL = "#c8ebc4"  # green: leaf tensor
NONLEAF_FILL = "#ffffff"  # white: non-leaf tensor
GRAD_BORDER = "#f28c28"  # thick orange border: requires_grad
PLAIN_BORDER = "#555555"
PARAM_PERIPHERIES = "2"  # double border: an nn.Parameter (a weight the model holds)
OP_FILL = "#ececec"  # small grey rounded box: operation
OP_BORDER = "#9e9e9e"
RELEASED = "#8c8c8c"  # grey italic: a gradient that flowed and was released
GRAD_TEXT = "#1f5fa8"  # a grad that survived backward
NONFINITE = "#c62828"  # a value or gradient holding NaN or infinity
HIGHLIGHT = "#d62728"
DETACH = "#7a7a7a"
REGION = "#9e9e9e"
BOX_FILL = "#e9eff9"  # a collapsed submodule or chain
BOX_BORDER = "#6b8cc7"
FROZEN_FILL = "#f0f0f0"  # a collapsed submodule none of whose parameters requires grad
FROZEN_BORDER = "#9e9e9e"
FADED = "#777777"

#: Notes (shape=note): a pale yellow fill, a darker edge, text wrapped to this many characters.
NOTE_FILL = "#fff6bf"
NOTE_BORDER = "#c8b560"
NOTE_EDGE = "#b59f3b"
NOTE_WIDTH = 30
