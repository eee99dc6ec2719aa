"""graphlens: see, check and explain PyTorch's real autograd graph."""
from .graph import Edge, Graph, OpNode, TensorNode
from .snapshot import snapshot
from .trace import Trace, trace

__all__ = ["snapshot", "trace", "Trace", "Graph", "TensorNode", "OpNode", "Edge"]
__version__ = "0.1.0"
