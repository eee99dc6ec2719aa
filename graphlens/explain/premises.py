"""The premises an explanation states, held against the graph it was read from: :func:`check`.

An explanation says things such as "w does not require grad" or "loss does not depend on
w".  Each such premise is a fact of the recorded graph (a tensor's ``requires_grad``,
``is_leaf``, whether the roots' backward graph reaches it, an op's name), so it can be
checked: a premise the graph contradicts is a confident wrong explanation.

Two sources are read: the structured :attr:`Explanation.facts` that the code filling a
sentence adds beside it, and the premises read back from the sentences themselves (a few
fixed phrasings, about tensors the graph names), which also covers sentences whose code
adds no facts.  Sentences that hedge (``If ...``, ``Either ...``, a lead read from the
code) are not read as premises.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from ..graph import Graph, OpNode, TensorNode
from .paths import PathView

__all__ = ["FACTS", "reached", "stated", "check"]

#: The facts an explanation may state, with what each one says of its subject.
FACTS: dict[str, str] = {
    "requires_grad": "the tensor's requires_grad, as the graph records it",
    "is_leaf": "whether the tensor is a leaf (no grad_fn)",
    "reached": "whether the backward graph of the graph's roots reaches the tensor",
    "has_grad": "whether the tensor's .grad held a tensor when the graph was captured",
    "is_parameter": "whether the tensor is an nn.Parameter",
    "op": "the op's forward or backward name",
}

#: Words that make a sentence a hedge, a lead or a condition rather than a statement of fact.
_HEDGES = re.compile(
    r"\b(?:if|If|Either|either|whether|would|may|might|most likely|unless|graphlens read your code|cannot tell|"
    r"for example|e\.g\.)\b"
)


def reached(g: Graph, tid: str, roots: Iterable[str] | None = None) -> bool:
    """Whether the backward graph below ``roots`` (default: the graph's roots) reaches the
    tensor ``tid`` (a leaf through its AccumulateGrad node)."""
    view = PathView(g)
    starts = [r.id for r in g.roots] if roots is None else list(roots)
    if not starts:
        return False
    parents, _ = view.bfs(starts)
    acc = view.adj.accumulate_grad.get(tid)
    return tid in parents or (acc is not None and acc in parents)


def _value(g: Graph, subject: str, fact: str) -> Any:
    node = g.node(subject)
    if fact == "op":
        return (node.name, node.forward) if isinstance(node, OpNode) else None
    if not isinstance(node, TensorNode):
        return None
    if fact == "reached":
        return reached(g, subject)
    return {"requires_grad": node.requires_grad, "is_leaf": node.is_leaf, "has_grad": node.has_grad,
            "is_parameter": node.is_parameter}.get(fact)


def _labels(g: Graph, e) -> dict[str, list[str]]:
    """Every phrase an explanation uses for a tensor of ``g`` -> the ids it may mean."""
    out: dict[str, list[str]] = {}
    for t in g.tensors:
        out.setdefault(f"an unnamed tensor ({t.id})", []).append(t.id)
        out.setdefault(f"the unnamed tensor {t.id}", []).append(t.id)
        if t.name:
            out.setdefault(t.name, []).append(t.id)
            out.setdefault(f"{t.name} ({t.id})", []).append(t.id)
    own = getattr(e, "tensor_id", None)
    if own is not None and own in g and getattr(e, "tensor_name", None) in out:
        out[e.tensor_name] = [own]  # (the answer's own tensor, when it names it)
    return out


def _ancestors(g: Graph, tid: str) -> list[str]:
    """The tensors ``tid`` was computed from, following the recorded forward inputs."""
    view = PathView(g)
    seen, stack, out = {tid}, [tid], []
    while stack:
        node = view.t(stack.pop())
        ins = list(view.adj.inputs.get(node.op, ())) if node.op is not None and node.op in g else []
        for i in ins:
            if i not in seen:
                seen.add(i)
                out.append(i)
                stack.append(i)
    return out


def stated(e) -> list[tuple[list[str], str, Any, str]]:
    """The premises ``e`` states: ``(candidate subject ids, fact, value, where)`` for each of
    its :attr:`~Explanation.facts` (``where`` is ``"facts"``) and each premise read from its
    sentences and fix (``where`` is the sentence).  A premise holds when the graph agrees
    for at least one of the candidate ids (a name several records share is ambiguous)."""
    g: Graph | None = getattr(e, "graph", None)
    out: list[tuple[list[str], str, Any, str]] = []
    if g is None:
        return out
    for subject, fact, value in getattr(e, "facts", ()) or ():
        if subject in g:
            out.append(([subject], fact, value, "facts"))
    labels = _labels(g, e)
    if not labels:
        return out
    alts = "|".join(re.escape(k) for k in sorted(labels, key=len, reverse=True))
    who = rf"(?<![\w.\[])(?P<s>{alts})(?![\w\[])"
    root = rf"(?<![\w.\[])(?P<r>{alts})(?![\w\[])"
    patterns = [
        (re.compile(who + r",? (?:does|do|did) not require grad"), "requires_grad", False),
        (re.compile(who + r" (?:requires grad|is a leaf that requires grad)"), "requires_grad", True),
        (re.compile(who + r" is not a leaf"), "is_leaf", False),
        (re.compile(who + r" is a leaf\b"), "is_leaf", True),
    ]
    texts = list(getattr(e, "sentences", ()) or ()) + ([e.fix] if getattr(e, "fix", None) else [])
    own = getattr(e, "tensor_id", None)
    for text in texts:
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z(])", text):
            if _HEDGES.search(sentence):
                continue
            for pattern, fact, value in patterns:
                for m in pattern.finditer(sentence):
                    if sentence[max(0, m.start() - 4):m.start()].endswith(("not ", "no ")):
                        continue
                    out.append((labels[m.group("s")], fact, value, sentence))
            for m in re.finditer(root + r" does not depend on " + who.replace("(?P<s>", "(?P<t>"), sentence):
                r_ids, t_ids = labels[m.group("r")], labels[m.group("t")]
                out.append(([f"{t}@{r}" for t in t_ids for r in r_ids], "reached", False, sentence))
            for m in re.finditer(root + r" reaches (?:(?P<it>it)|" + who.replace("(?P<s>", "(?P<t>") + r") through", sentence):
                r_ids = labels[m.group("r")]
                t_ids = [own] if m.group("it") and own else labels.get(m.group("t") or "", [])
                out.append(([f"{t}@{r}" for t in t_ids for r in r_ids], "reached", True, sentence))
            m = re.search(r"[Tt]he tensors it was computed from[^.]*? do not require grad", sentence)
            if m and own is not None and own in g:
                out.append(([f"{a}" for a in _ancestors(g, own)] or [own], "requires_grad", False, sentence + " [every one]"))
            if "(parameters do)" in sentence:
                params = [t.id for t in g.tensors if t.is_parameter]
                if params:
                    out.append((params, "requires_grad", True, sentence))
    return out


def check(e) -> list[str]:
    """Every premise ``e`` states that its graph contradicts, one line each (``[]`` when all
    hold, or when there is no graph to hold them against)."""
    g: Graph | None = getattr(e, "graph", None)
    if g is None:
        return []
    problems = []
    for ids, fact, value, where in stated(e):
        if fact not in FACTS:
            problems.append(f"unknown fact {fact!r} of {ids} (from {where!r})")
            continue
        every = where.endswith("[every one]")
        seen: list[tuple[str, Any]] = []
        for subject in ids:
            if "@" in subject:  # reached from one root
                tid, rid = subject.split("@")
                seen.append((subject, reached(g, tid, [rid])))
            elif subject in g:
                seen.append((subject, _value(g, subject, fact)))
        if not seen:
            continue
        if fact == "op":
            ok = any(v is not None and value in v for _, v in seen)
        elif every:
            ok = all(v == value for _, v in seen)
        else:
            ok = any(v == value for _, v in seen)
        if not ok:
            wrong = [(i, v) for i, v in seen if v != value and not (fact == "op" and v is not None and value in v)]
            names = ", ".join(f"{i} ({g.node(i.split('@')[0]).label}): {v!r}" for i, v in wrong[:6])
            problems.append(f"states {fact}={value!r} of {names if not every else 'every one of ' + str(len(seen))}, "
                            f"but the graph records {names} (from {where!r})")
    return problems
