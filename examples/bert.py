"""BERT with a classification loss (Hugging Face transformers, a small config, no weights downloaded): one traced step."""

from __future__ import annotations

import torch

from _step import main

__all__ = ["build"]


def build(*, layers: int = 2, width: int = 64, heads: int = 4, vocab: int = 128, tokens: int = 16, classes: int = 3):
    """A ``BertForSequenceClassification`` of ``layers`` encoder layers and a step: the
    cross-entropy of its ``classes``-way prediction on a random batch of 2 padded sequences. Returns ``(model, step, inputs)``, the inputs by name for the diagram."""
    from transformers import BertConfig, BertForSequenceClassification, logging

    logging.set_verbosity_error()
    config = BertConfig(
        num_hidden_layers=layers, hidden_size=width, num_attention_heads=heads, intermediate_size=4 * width,
        vocab_size=vocab, max_position_embeddings=tokens, num_labels=classes,
    )
    model = BertForSequenceClassification(config)
    model.train()
    ids = torch.randint(1, vocab, (2, tokens))
    mask = torch.ones(2, tokens, dtype=torch.long)
    mask[1, tokens // 2:] = 0  # the second sequence is padded: attention masks its second half
    labels = torch.tensor([0, classes - 1])

    def step(model):
        return model(input_ids=ids, attention_mask=mask, labels=labels).loss

    return model, step, {"ids": ids, "mask": mask, "labels": labels}


if __name__ == "__main__":
    main("bert", build)
