"""A small Vision Transformer in timm's layout, written here (timm imports torchvision, which fails on the CPU torch): one traced step."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from _step import main

__all__ = ["Attention", "Block", "VisionTransformer", "build"]


class PatchEmbed(nn.Module):
    """Cut the image into ``patch`` x ``patch`` squares and project each to ``width`` numbers."""

    def __init__(self, patch: int, width: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, width, patch, stride=patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)  # (batch, patches, width)


class Attention(nn.Module):
    """Multi-head self-attention with one ``qkv`` projection (timm's ``Attention``)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class Mlp(nn.Module):
    """Two linear layers with a GELU between them."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """A pre-norm transformer block: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = Mlp(width, 4 * width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    """ViT: patch embedding, a class token and learned positions, ``depth`` blocks, a final norm
    and a linear head on the class token."""

    def __init__(self, *, size: int = 32, patch: int = 8, width: int = 64, depth: int = 2, heads: int = 4, classes: int = 10) -> None:
        super().__init__()
        self.patch_embed = PatchEmbed(patch, width)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, width))
        self.pos_embed = nn.Parameter(torch.randn(1, 1 + (size // patch) ** 2, width) * 0.02)
        self.blocks = nn.Sequential(*[Block(width, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def build(*, size: int = 32, patch: int = 8, width: int = 64, depth: int = 2, heads: int = 4, classes: int = 10):
    """A ViT of ``depth`` blocks on ``size`` x ``size`` images in ``patch`` x ``patch`` patches, and
    a step: the cross-entropy of a batch of 2 random images. Returns ``(model, step, inputs)``, the inputs by name for the diagram."""
    model = VisionTransformer(size=size, patch=patch, width=width, depth=depth, heads=heads, classes=classes)
    images = torch.randn(2, 3, size, size)
    labels = torch.tensor([2, classes - 1])

    def step(model):
        return F.cross_entropy(model(images), labels)

    return model, step, {"images": images, "labels": labels}


if __name__ == "__main__":
    main("vit", build)
