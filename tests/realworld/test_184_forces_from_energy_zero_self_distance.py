"""Forces as the derivative of a learned energy (autograd.grad with create_graph=True) are NaN: a distance written as sqrt of a sum of squares is 0 for each atom's pair with itself.

Address: https://github.com/torchmd/torchmd-net/issues/77
Title: NaN when fitting with derivative

What went wrong: training on energies and forces, where the forces are the negative gradient of the
predicted energy with respect to the atom positions (torch.autograd.grad with create_graph=True, so
that the force loss can be trained), gives NaN; the energy itself is finite.

Accepted answer (the maintainers'): the forces are NaN because some operation of the model has a NaN
gradient with respect to the coordinates; find which one (they suggested anomaly detection). In this
family of models it is the pair distance at zero separation: the derivative of a square root at 0
is infinite, and the self pairs (and unused pairs) have distance 0; mask or replace those distances,
or use a norm whose gradient at 0 is defined.

Three questions: why forces is NaN (it is a gradient made by backward nodes: the answer follows the
create_graph call to SqrtBackward0 at the distance line, never "cannot tell"), why the loss is NaN
(the same), and why a weight's gradient is NaN (the loss was not finite: never "though the loss was finite").
"""

import torch

import graphlens as gl
from _helpers import expect


class Energy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(1, 8)
        self.out = torch.nn.Linear(8, 1)

    def forward(self, pos):
        diff = pos[:, None, :] - pos[None, :, :]  # every pair, each atom with itself too
        dist = (diff ** 2).sum(-1).sqrt()
        h = torch.tanh(self.embed(dist.unsqueeze(-1)))
        return self.out(h).sum()


def energy_and_forces_step():
    torch.manual_seed(0)
    model = Energy()
    pos, ref = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3)
    with gl.trace() as tr:
        energy = model(pos)
        forces = -torch.autograd.grad(energy, pos, create_graph=True)[0]
        loss = ((forces - ref) ** 2).mean()
        loss.backward()
    return model, energy, forces, loss, tr


def test_forces_go_back_to_the_square_root_of_the_distance():
    """explain(forces, tr): made in the create_graph call, whose first non-finite gradient came from sqrt at the distance line."""
    model, energy, forces, loss, tr = energy_and_forces_step()
    assert torch.isfinite(energy) and torch.isnan(forces).all()
    expect(gl.explain(forces, tr), reason="nonfinite_forward", reasons=("nonfinite_backward", "infinite_derivative"),
           tensor="forces", op="sqrt", line="dist = (diff ** 2).sum(-1).sqrt()", says=("create_graph=True", "SqrtBackward0"),
           fix=("vector_norm", "eps"), never=("cannot tell",))


def test_the_loss_is_explained_the_same_way():
    """explain(loss, tr): the NaN came from forces, made by the same call and the same sqrt."""
    model, energy, forces, loss, tr = energy_and_forces_step()
    expect(gl.explain(loss, tr), reason="nonfinite_forward", op="sqrt", line="dist = (diff ** 2).sum(-1).sqrt()",
           never=("cannot tell",))


def test_a_weights_gradient_never_says_the_loss_was_finite():
    """explain(model.embed.weight, tr): the loss the gradient comes from was NaN (linked only through the create_graph call)."""
    model, energy, forces, loss, tr = energy_and_forces_step()
    assert torch.isnan(model.embed.weight.grad).any()
    expect(gl.explain(model.embed.weight, tr), reasons=("nonfinite_forward",), op="sqrt", says=("loss",),
           never=("loss was finite", "cannot tell"))
