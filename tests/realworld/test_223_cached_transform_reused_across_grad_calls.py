"""An HMC integrator asks for the potential's gradient twice at the same point: the exp transform (cache_size=1) hands back the value it cached, with the first call's freed graph.

Address: https://github.com/pyro-ppl/pyro/pull/2283
Title: Patch Transform to unset cache on call to backward

What went wrong: scale = t(x) with t = ExpTransform(cache_size=1); the potential's gradient is asked at
x0 for the initial energy and again at the very same x0 object when the first leapfrog step starts.
The transform sees the same x and returns its cached y, whose graph the first
torch.autograd.grad freed: "Trying to backward through the graph a second time".

Accepted answer: (the PR by a pyro maintainer) clear the transform's cache after backward; on the
user's side, build the transform with cache_size=0 (or recompute y) when the same x is
differentiated again.

The cache is a private attribute of an object the program holds (t._cached_x_y): it is what carries
the old graph, not the potential pe (the failing call's own output, which the answer once named and
told to detach).
"""

import pytest
import torch
from torch.distributions import HalfCauchy, Normal
from torch.distributions.transforms import ExpTransform

from _helpers import HOW, expect, explained_in


def program(ctx, cache_size=1):
    torch.manual_seed(0)
    data = torch.randn(20) * 2.0
    t = ExpTransform(cache_size=cache_size)
    prior = HalfCauchy(1.0)

    def potential_fn(x):
        scale = t(x)
        return -(Normal(0.0, scale).log_prob(data).sum() + prior.log_prob(scale) + t.log_abs_det_jacobian(x, scale))

    def potential_grad(x):
        pe = potential_fn(x)
        (grad,) = torch.autograd.grad(pe, x)
        return grad, pe.detach()

    x0 = torch.tensor(0.3, requires_grad=True)
    with ctx:
        potential_grad(x0)  # (the initial energy)
        x, r = x0, torch.randn(())
        grad, _ = potential_grad(x)  # (the integrator asks again at x0)
        for _ in range(2):
            r = r - 0.05 * grad
            x = (x + 0.1 * r).detach().requires_grad_()
            grad, _ = potential_grad(x)


@pytest.mark.parametrize("how", HOW)
def test_names_the_transform_cache_and_turns_it_off(how):
    """Both ways: the old graph is reached through t._cached_x_y; the fix turns the cache off; pe is never told to detach."""
    e = explained_in(program, how)
    expect(e, reason="graph_freed", says=("t._cached_x_y", "torch.autograd.grad(pe"), fix=("cache_size=0",),
           never_fix=("pe = pe.detach()",))


def test_without_the_cache_it_runs():
    """cache_size=0: every call recomputes y with its own graph."""
    import contextlib

    program(contextlib.nullcontext(), cache_size=0)
