"""graphlens: see, check and explain PyTorch's real autograd graph.

graphlens never reimplements autograd: it reads the graph PyTorch built.

Snapshot the backward graph behind a loss (names come from your variables):

>>> import torch, graphlens as gl
>>> w = torch.tensor([1.0, 2.0], requires_grad=True)
>>> x = torch.tensor([3.0, 4.0])
>>> h = w * x
>>> loss = h.sum()
>>> g = gl.snapshot(loss)
>>> g
<Graph from snapshot: 3 tensors (1 leaves), 3 ops, 6 edges; roots: loss>
>>> [op.name for op in g.ops]
['SumBackward0', 'MulBackward0', 'AccumulateGrad']
>>> g.find("h").is_leaf, g.find("w").is_leaf
(False, True)

Trace a program to see everything, including what autograd throws away:

>>> with gl.trace() as tr:
...     h = w * x
...     y = h.detach()
...     loss = (h * h).sum()
...     loss.backward()
>>> g = tr.graph()
>>> g.find("h").grad is None, g.find("h").flowed[0].head   # released by PyTorch, seen by graphlens
(True, (6.0, 16.0))
>>> g.find("w").grad            # a Summary: numbers, printed compactly
Summary((2,), 'float32', 2, head=(18.0, 64.0), min=18.0, max=64.0, mean=41.0)
>>> print(g.find("w").grad)
[18, 64]
>>> g.find("y").detached_from == g.find("h").id
True

Graphs are plain values: ``g.to_json()``, ``Graph.from_json(...)``; draw them with
``g.to_dot()`` / ``g.render("chart.svg")``; they show inline in notebooks.
"""

from . import claims
from .explain import Explanation, explain, explain_error
from ._live.safety import DeepGraphWarning
from .compare import Comparison, compare
from .replay import Replay, replay
from .graph import Edge, Graph, OpNode, SavedEntry, SavedState, Summary, TensorNode
from .snapshot import snapshot
from .trace import Trace, set_error_explainer as _set_error_explainer, trace

_set_error_explainer(explain_error)  # trace(explain_errors=True) reads errors through explain

__all__ = [
    "snapshot",
    "trace",
    "Trace",
    "Graph",
    "TensorNode",
    "OpNode",
    "Edge",
    "Summary",
    "SavedEntry",
    "SavedState",
    "explain",
    "explain_error",
    "Explanation",
    "claims",
    "compare",
    "Comparison",
    "replay",
    "Replay",
    "DeepGraphWarning",
]
__version__ = "0.1.0"
