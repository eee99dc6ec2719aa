"""A diffusion model built with only 10 timesteps: its rescaled beta schedule passes 1, and the buffer sqrt(alphas_cumprod) holds NaN from the moment the module is built.

Address: https://github.com/lucidrains/imagen-pytorch/issues/161
Title: NaN error with low number of timesteps

What went wrong: the linear schedule scales the betas by 1000 / timesteps; with 10 steps the largest beta
is 2, alphas_cumprod turns negative and register_buffer("sqrt_alphas_cumprod", sqrt(alphas_cumprod))
stores NaN. Every batch that samples those timesteps has a NaN loss.

Accepted answer: (the maintainer) use enough timesteps (or cap the scale) so that the betas stay below 1.

The NaN is in a tensor the module keeps, made in its __init__, not in the data: the answer must say so
and point at where the buffer is computed, not tell the user to clean the data (nan_to_num would hide a
broken schedule).
"""

import torch
import torch.nn.functional as F
from torch import nn

import graphlens as gl
from _helpers import expect


class GaussianDiffusion(nn.Module):
    def __init__(self, timesteps):
        super().__init__()
        scale = 1000 / timesteps
        betas = torch.linspace(scale * 0.0001, scale * 0.02, timesteps, dtype=torch.float64)
        alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
        self.register_buffer("sqrt_alphas_cumprod", torch.sqrt(alphas_cumprod).float())
        self.register_buffer("sqrt_one_minus_alphas_cumprod", torch.sqrt(1.0 - alphas_cumprod).float())

    def q_sample(self, x_start, t, noise):
        a = self.sqrt_alphas_cumprod[t].view(-1, 1, 1, 1)
        b = self.sqrt_one_minus_alphas_cumprod[t].view(-1, 1, 1, 1)
        return a * x_start + b * noise


def test_traced_says_the_module_buffer_held_nan_before_the_step():
    """Traced: nonfinite_input on diffusion.sqrt_alphas_cumprod, a tensor the module keeps; the fix looks where it is computed, not at the data."""
    torch.manual_seed(0)
    diffusion, unet = GaussianDiffusion(timesteps=10), nn.Conv2d(3, 3, 3, padding=1)
    images, t = torch.rand(4, 3, 8, 8) * 2 - 1, torch.tensor([1, 4, 7, 9])
    with gl.trace() as tr:
        noise = torch.randn_like(images)
        loss = F.mse_loss(unet(diffusion.q_sample(images, t, noise)), noise)
        loss.backward()
    assert torch.isnan(loss)
    e = gl.explain(loss, tr)
    expect(e, reasons=("nonfinite_input",), says=("diffusion.sqrt_alphas_cumprod", "module", "__init__"),
           fix=("register_buffer('sqrt_alphas_cumprod'",), never_fix=("where the data is loaded",))


def test_enough_timesteps_give_a_finite_schedule():
    """With 1000 timesteps (the maintainer's advice) the buffers are finite."""
    d = GaussianDiffusion(timesteps=1000)
    assert torch.isfinite(d.sqrt_alphas_cumprod).all() and torch.isfinite(d.sqrt_one_minus_alphas_cumprod).all()


def test_built_inside_a_trace_the_buffer_names_the_root_of_a_negative():
    """What the fix suggests: the module built inside a trace, the buffer's answer is sqrt of a negative alphas_cumprod, at its line."""
    with gl.trace() as tr:
        diffusion = GaussianDiffusion(timesteps=10)
    expect(gl.explain(diffusion.sqrt_alphas_cumprod, tr), reasons=("invalid_domain",), op="sqrt", line="torch.sqrt(alphas_cumprod)",
           says=("alphas_cumprod",))
