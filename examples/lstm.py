"""An LSTM language model (embedding, 2-layer LSTM, decoder tied to the embedding): one traced step."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from _step import main

__all__ = ["LSTMLanguageModel", "build"]


class LSTMLanguageModel(nn.Module):
    """``encoder`` (embedding) -> ``rnn`` (LSTM of ``layers`` layers) -> ``decoder`` (linear,
    its weight the embedding's when ``tie``)."""

    def __init__(self, vocab: int, width: int, layers: int, *, dropout: float = 0.2, tie: bool = True) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(vocab, width)
        self.rnn = nn.LSTM(width, width, layers, dropout=dropout)
        self.decoder = nn.Linear(width, vocab)
        if tie:
            self.decoder.weight = self.encoder.weight

    def forward(self, tokens: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None):
        output, state = self.rnn(self.drop(self.encoder(tokens)), state)
        return self.decoder(self.drop(output)), state


def build(*, vocab: int = 100, width: int = 32, layers: int = 2, steps: int = 20, batch: int = 4):
    """The model and a step: next-token cross-entropy on a random (``steps``, ``batch``) batch of
    token ids; the final ``(h, c)`` state is returned by the model and not used by the loss. Returns ``(model, step, inputs)``, the inputs by name for the diagram."""
    model = LSTMLanguageModel(vocab, width, layers)
    tokens = torch.randint(0, vocab, (steps + 1, batch))

    def step(model):
        logits, (h, c) = model(tokens[:-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[1:].reshape(-1))

    return model, step, {"tokens": tokens}


if __name__ == "__main__":
    main("lstm", build)
