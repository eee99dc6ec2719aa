"""GPT-2 (Hugging Face transformers, a small config, no weights downloaded): one traced training step."""

from __future__ import annotations

import torch

from _step import main

__all__ = ["build"]


def build(*, layers: int = 2, width: int = 64, heads: int = 4, vocab: int = 128, tokens: int = 16):
    """A ``GPT2LMHeadModel`` of ``layers`` blocks (``wte`` and ``lm_head`` tie, as in GPT-2) and a
    step: next-token loss on a random batch of 2 sequences of ``tokens`` tokens. Returns ``(model, step, inputs)``, the inputs by name for the diagram."""
    from transformers import GPT2Config, GPT2LMHeadModel, logging

    logging.set_verbosity_error()  # transformers' notes about the small config are not this example's subject

    config = GPT2Config(
        n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab, n_positions=tokens,
        bos_token_id=0, eos_token_id=0,
    )
    model = GPT2LMHeadModel(config)
    model.train()  # dropout on: the traced and plain steps draw the same masks from the same seed
    ids = torch.randint(0, vocab, (2, tokens))

    def step(model):
        return model(input_ids=ids, labels=ids).loss

    return model, step, {"ids": ids}


if __name__ == "__main__":
    main("gpt2", build)
