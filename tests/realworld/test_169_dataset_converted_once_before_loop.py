"""A 1-D dataset passed through a Conv1d once, before the training loop: the second step's backward goes through the conv's graph again.

Address: https://github.com/lucidrains/denoising-diffusion-pytorch/issues/109
Title: RuntimeError: Trying to backward through the graph a second time

What went wrong: running the 1-D diffusion trainer, the first loss.backward() worked and the second
step raised "Trying to backward through the graph a second time". The user had converted their
one-channel data to the network's four channels with an nn.Conv1d, once, outside the training loop:
every batch drawn from that dataset carries the conv's graph, which the first backward freed.

Accepted answer (the reporter's own finding, on which the issue was closed): the conversion done
outside the loop was the cause. Make it without a graph (torch.no_grad(), or .detach() the converted
data) or do it inside the model, each step.

Nothing is carried from one iteration to the next (data = next(self.dl) each step): an answer that
says a state is "carried from the previous iteration" would be wrong. A trace sees where the freed
part was made: the conv's line, run once.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from _helpers import expect, explained_in


class Dataset1D(Dataset):
    def __init__(self, tensor):
        super().__init__()
        self.tensor = tensor.clone()

    def __len__(self):
        return len(self.tensor)

    def __getitem__(self, idx):
        return self.tensor[idx].clone()


def cycle(dl):
    while True:
        for data in dl:
            yield data


class Trainer1D:
    def __init__(self, model, dataset, train_batch_size=2, train_num_steps=3):
        self.model = model
        self.dl = cycle(DataLoader(dataset, batch_size=train_batch_size, shuffle=True))
        self.opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        self.train_num_steps = train_num_steps
        self.step = 0

    def train(self):
        while self.step < self.train_num_steps:
            data = next(self.dl)
            loss = F.mse_loss(self.model(data), torch.zeros_like(data))
            loss.backward()
            self.opt.step()
            self.opt.zero_grad()
            self.step += 1


def converted_once(ctx):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(4, 8, 3, padding=1), nn.SiLU(), nn.Conv1d(8, 4, 3, padding=1))
    with ctx:
        raw = torch.randn(6, 1, 16)
        conv1D = nn.Conv1d(1, 4, kernel_size=1)
        training_seq = conv1D(raw)  # done once, outside the training loop
        dataset = Dataset1D(training_seq)
        trainer = Trainer1D(model, dataset)
        trainer.train()


def test_traced_answer_names_the_line_that_ran_once():
    """explain_error(exc, tr): graph_built_once at the conv line (training_seq = conv1D(raw)), never a state carried from the previous iteration."""
    expect(explained_in(converted_once, "traced"), reason="graph_freed", reasons=("graph_built_once",), not_reasons=("carried_state",),
           says=("line", "training_seq = conv1D(raw)", "ran once"), never=("previous iteration",))


def test_traced_fix_makes_the_converted_data_without_a_graph():
    """The traced fix detaches (or no_grads) training_seq where it is made, or moves the conv into the loop."""
    expect(explained_in(converted_once, "traced"), fix=("training_seq = training_seq.detach()", "torch.no_grad()", "inside the loop"),
           never_fix=("retain_graph=True", "for an LSTM"))


def test_plain_answer_says_nothing_is_fed_back_and_hedges():
    """explain_error(exc) without a trace: not carried_state (the loop never feeds data back); the built-once reading is said as a condition."""
    expect(explained_in(converted_once, "plain"), reason="graph_freed", not_reasons=("carried_state",), tensor="data",
           says=("does not feed data back", "if so"), never=("previous iteration into this one",),
           fix=("torch.no_grad()",), never_fix=("for an LSTM",))
