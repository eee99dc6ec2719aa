"""An answer being written: the question :func:`~graphlens.explain.grad.analyse` asks (:class:`Asked`) and what its branches add (:class:`Draft`)."""

from __future__ import annotations

from typing import Any, NamedTuple

from .paths import PathView

__all__ = ["Asked", "Draft"]


class Asked(NamedTuple):
    """What is known of the tensor an explanation is about, for the branches that answer.

    ``view`` is the graph, ``tid`` / ``node`` the tensor's id and record (None when the
    graph does not hold it), ``live`` the tensor itself when known; ``name`` what the
    answer calls it in code, ``who`` in a sentence, ``grad_of`` its ``.grad``; ``roots`` the
    root ids and ``root_name`` / ``backward`` how the answer names them; ``will`` / ``stays``
    the verb phrases for a ``.grad`` that is None; ``ran`` whether backward ran (True, or
    None for unknown); the flags are the live tensor's (else the record's); ``reachable``
    and ``reach_path`` whether and how the roots' backward graph reaches the tensor."""

    view: PathView
    tid: str | None
    node: Any
    live: Any
    name: str
    who: str
    grad_of: str
    roots: list
    root_name: str | None
    backward: str
    will: str
    stays: str
    ran: bool | None
    optimizer: Any
    hints: dict
    precision: int
    is_leaf: bool
    requires_grad: bool
    retains: bool
    has_grad: bool
    dtype: Any
    is_param: bool
    reachable: bool
    reach_path: list

    @property
    def traced(self) -> bool:
        """Whether the graph was recorded by a trace (which sees detach, no_grad and cut ops)."""
        return self.view.g.source == "trace"

    def root_is_leaf(self) -> bool:
        """Whether every root is a leaf that requires grad (and not the tensor asked about)."""
        return bool(self.roots) and self.tid not in self.roots and all(
            self.view.t(r).is_leaf and self.view.t(r).requires_grad for r in self.roots
        )


class Draft:
    """The answer as the branches write it: reason codes, sentences, the fix, the cut they
    found, what to highlight, and the premises the sentences state (``facts``)."""

    __slots__ = ("reasons", "sentences", "fix", "cut", "path", "edges", "facts", "fault_op", "fault_node", "root_cut")

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.sentences: list[str] = []
        self.fix: str | None = None
        self.cut = None  # the Cut the answer is about, when one was found
        self.path: list[str] = []
        self.edges: list[tuple[str, str]] = []
        self.facts: list[tuple[str, str, Any]] = []
        self.fault_op: str | None = None  # the op at fault where no cut is (a Function that kept a ctx tensor)
        self.fault_node: str | None = None
        self.root_cut = False

    def fact(self, subject: str | None, fact: str, value: Any) -> None:
        """Note a premise a sentence states (nothing when the graph does not hold the subject)."""
        if subject is not None:
            self.facts.append((subject, fact, value))

    def add_cut(self, cut, *, reason: bool = True) -> None:
        """Add a cut: its reason code, its sentence, the premises it states, and (when it
        has one) the path to highlight."""
        if reason:
            self.reasons.append(cut.kind)
        self.sentences.append(cut.text)
        self.facts.extend(f for f in cut.facts if f)
        self.cut = cut
