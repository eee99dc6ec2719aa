"""Drawing a Graph: Graphviz DOT for the data view and the function view, and rendering it to files.

The package face; the work is done in one module per concern:

- :mod:`~graphlens.render.style`: the visual language (colours, fonts, default options);
- :mod:`~graphlens.render.labels`: node labels and how record values become text;
- :mod:`~graphlens.render.scene`: the nodes and edges of the data and function views;
- :mod:`~graphlens.render.collapse`: submodule boxes and chains of repeated ops;
- :mod:`~graphlens.render.rows`: the rows of wide diagrams (a training loop, many leaves);
- :mod:`~graphlens.render.legend` and :mod:`~graphlens.render.dot`: the DOT text;
- :mod:`~graphlens.render.draw`: :func:`to_dot`, checking its options;
- :mod:`~graphlens.render.output`: layout programs, files, SVG and notebooks.
"""

from __future__ import annotations

from .draw import to_dot
from .output import (
    FORMATS,
    LayoutProgram,
    LayoutProgramNotFound,
    LayoutTimeout,
    find_layout_program,
    layout,
    render,
    repr_mimebundle,
    svg,
)
# The visual language stays readable as graphlens.render.LEAF_FILL etc., as before the split.
from .style import (  # noqa: F401
    BOX_BORDER,
    BOX_FILL,
    DETACH,
    DIRECTIONS,
    FADED,
    FONT,
    GRAD_BORDER,
    GRAD_TEXT,
    HIGHLIGHT,
    LEAF_FILL,
    MAX_ELEMENTS,
    MAX_NODES,
    MIN_CHAIN,
    NONLEAF_FILL,
    OP_BORDER,
    OP_FILL,
    PARAM_PERIPHERIES,
    PLAIN_BORDER,
    REGION,
    RELEASED,
    VIEWS,
)

__all__ = [
    "to_dot",
    "render",
    "repr_mimebundle",
    "svg",
    "layout",
    "find_layout_program",
    "LayoutProgram",
    "LayoutProgramNotFound",
    "LayoutTimeout",
    "VIEWS",
    "DIRECTIONS",
    "FORMATS",
    "MAX_NODES",
]
