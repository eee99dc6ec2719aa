"""A molecule generator's policy-gradient loss is summed from log_probs[0, top_i].item(): the loss is a Python number, re-wrapped as a leaf, and no weight of the generator updates.

Address: https://github.com/isayev/ReLeaSE/issues/39
Title: Weights are not updating

What went wrong: to get around a device error the user changed the loss line to
rl_loss -= log_probs[0, top_i].item() * discounted_reward; rl_loss became a float (the program here
wraps it back with torch.tensor(..., requires_grad=True) to call backward, an assumption: the issue
does not show that step). Every generator weight keeps .grad None.

Accepted answer: (the maintainer) .item() takes the value out of the graph: keep the tensor expression
rl_loss -= log_probs[0, top_i] * discounted_reward.

Without a trace graphlens reads the code: the lead must be the .item() on the loss line, not the
torch.tensor that encodes the token indices (top_i only picks an element of log_probs).
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect

ALPHABET = "<>CNO()=1"


class Generator(nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.encoder = nn.Embedding(len(ALPHABET), hidden)
        self.rnn = nn.GRUCell(hidden, hidden)
        self.decoder = nn.Linear(hidden, len(ALPHABET))

    def forward(self, inp, hidden):
        hidden = self.rnn(self.encoder(inp.view(1)), hidden)
        return self.decoder(hidden), hidden


def char_tensor(s):
    return torch.tensor([ALPHABET.index(c) for c in s])


def policy_gradient(generator, trajectories, gamma=0.97):
    rl_loss = 0
    for trajectory in trajectories:
        discounted_reward = 1.0 + trajectory.count("C")
        tokens = char_tensor(trajectory)
        hidden = torch.zeros(1, 16)
        for p in range(len(trajectory) - 1):
            output, hidden = generator(tokens[p], hidden)
            log_probs = F.log_softmax(output, dim=1)
            top_i = tokens[p + 1]
            rl_loss -= log_probs[0, top_i].item() * discounted_reward
            discounted_reward = discounted_reward * gamma
    rl_loss = torch.tensor(rl_loss / len(trajectories), requires_grad=True)
    rl_loss.backward()
    return rl_loss


def test_plain_lead_is_the_item_on_the_loss_line():
    """Plain: cut_by_python_value read at the .item() line; the token tensor is not blamed."""
    torch.manual_seed(0)
    generator = Generator()
    rl_loss = policy_gradient(generator, ["<CC(=O)N>", "<C1CC1O>"])
    assert generator.decoder.weight.grad is None
    e = gl.explain(generator.decoder.weight, rl_loss)
    expect(e, reasons=("cut_by_python_value",), op="item", line=".item() * discounted_reward",
           never=("char_tensor()",))


def test_an_index_is_not_followed_as_the_value():
    """A loss that keeps the tensor expression reaches the weights: no cut is claimed."""
    torch.manual_seed(0)
    generator = Generator()
    tokens = char_tensor("<CC>")
    output, _ = generator(tokens[0], torch.zeros(1, 16))
    loss = -F.log_softmax(output, dim=1)[0, tokens[1]]
    loss.backward()
    expect(gl.explain(generator.decoder.weight, loss), reason="grad_ok")


def test_traced_dates_the_new_leaf_at_its_own_line_and_names_the_item():
    """Traced: the leaf torch.tensor made inside policy_gradient is said at that line (not the block's call), and the .item() line is named."""
    torch.manual_seed(0)
    generator = Generator()
    with gl.trace() as tr:
        policy_gradient(generator, ["<CC(=O)N>", "<C1CC1O>"])
    expect(gl.explain(generator.decoder.weight, tr), reasons=("cut_by_python_value",), op="tensor",
           line="torch.tensor(rl_loss / len(trajectories), requires_grad=True)", says=(".item() * discounted_reward",))
