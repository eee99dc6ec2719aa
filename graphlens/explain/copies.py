"""A non-leaf standing in for a leaf (``randn(..., requires_grad=True) * 2``, ``.to()``): its gradient lands on an unnamed leaf."""

from __future__ import annotations

from .paths import PathView

__all__ = ["copy_answer"]


def copy_answer(
    view: PathView, tid: str, node, copy_leaf: str, *, name: str, who: str, grad_of: str, stays: str, attribute: bool
) -> tuple[list[str], list[str], list, str]:
    """``(sentences, path, edges, fix)`` for the non-leaf ``tid`` computed from the single
    unnamed leaf ``copy_leaf``; ``attribute``: the live tensor is not a Parameter, so a dotted
    name is a module attribute holding the copy of a parameter (``self.w = self.w.double()``)."""
    _, cpath = view.bfs([tid], copy_leaf)
    cpath = view.with_acc(cpath)
    kind = " -> ".join(view.o(p).label for p in cpath if p.startswith("op") and not view.o(p).is_accumulate_grad)
    is_to = any(p.startswith("op") and (view.o(p).name or "").startswith("ToCopyBackward") for p in cpath)
    how = "a copy made by .to(), .double(), .float() or .cuda()" if is_to else f"the output of {kind or 'an operation'}"
    sentences = [
        f"{grad_of} {stays} because {who} is not a leaf: it is {how}, computed from a leaf tensor that "
        f"no variable graphlens can see holds (when it was made with requires_grad=True and never stored, "
        f"nothing does).",
        f"PyTorch puts the gradient on that unnamed leaf ({copy_leaf}) and discards the one passing through {who}.",
    ]
    shape = ", ".join(map(str, node.shape)) if node is not None and node.shape else "3"
    example = (
        f"{name} = torch.randn({shape}, dtype=torch.{node.dtype if node is not None else 'float64'}, "
        f"requires_grad=True), or {name} = x.detach().to(device).requires_grad_() (a leaf, whatever x is)"
        if is_to else f"{name} = {name}.detach().requires_grad_() (a new leaf with the same values), or for a "
        f"parameter made so, {name} = (torch.randn({shape}) * scale).requires_grad_()"
    )
    fix = (
        f"Make {name} itself the leaf: do the arithmetic or conversion first and ask for the gradient last, "
        f"e.g. {example}; or call {name}.retain_grad() before backward."
    )
    if "." in name and attribute:
        owner, _, attr = name.rpartition(".")
        sentences.append(
            f"{name} is not a registered parameter of {owner}: it is a plain tensor attribute, so "
            f"{owner}.parameters() and an optimizer built from it do not see it."
        )
        fix = (
            f"Convert the module, not the tensor ({owner}.double() or {owner}.to(device) keeps its parameters "
            f"registered), or register the converted tensor as a parameter: {owner}.{attr} = "
            f"nn.Parameter({name}.detach().double())."
        )
    return sentences, cpath, view.highlight_edges(cpath), fix
