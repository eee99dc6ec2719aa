"""The code that reads live torch: the trace's recorder and its backward hooks, the facts read off tensors and nodes, and the guard that keeps those reads unseen.

Everything else in graphlens works on the plain records these modules make (a
:class:`~graphlens.graph.Graph`, a replay's steps) and never touches a tensor.

- :mod:`.recorder` (with :mod:`.capture`, :mod:`.frames`, :mod:`.backward`): what a trace
  records of each op, each backward step and each ``.grad`` write.
- :mod:`.freeze`: turning those records into a Graph.
- :mod:`.facts` and :mod:`.storages`: plain numbers read off live tensors, nodes and storages.
- :mod:`.guard`, :mod:`.modestack`, :mod:`.attribution`: staying unseen by the user's modes,
  subclasses and warnings filters; :mod:`.safety`: keeping deep graphs safe to free.
"""

__all__: list[str] = []
