"""A supervised contrastive loss on features that were not L2-normalised: every exp of a row's shifted logits underflows or is masked, its sum is 0, log(0) = -inf, NaN loss.

Address: https://github.com/HobbitLong/SupContrast/issues/104
Title: Why the func returns "nan"?

What went wrong: the README's test code returned a NaN loss. A user found the logits were about
-9000: the features were not normalised, so their dot products divided by a temperature of 0.07 are
huge; after the row maximum is subtracted, every other logit is far below 0 and its exp is 0, the
self term is masked out, exp_logits.sum(1) is 0 and the log of it is -inf.

Accepted answer (the thread's consensus): the loss expects L2-normalised features (F.normalize, as
the README does); a log-sum-exp form would not underflow.

The sum runs over exp(logits) * logits_mask, not over exp itself: the rule that knows log(sum(exp))
must see through the mask.
"""

import torch
from torch import nn

import graphlens as gl
from _helpers import expect


def sup_con_loss(features, labels, temperature=0.07):
    """SupConLoss's forward (contrast_mode 'all'), as in the repository before its fix."""
    batch_size, contrast_count = features.shape[0], features.shape[1]
    mask = torch.eq(labels.view(-1, 1), labels.view(1, -1)).float()
    contrast_feature = torch.cat(torch.unbind(features, dim=1), dim=0)
    anchor_dot_contrast = torch.div(torch.matmul(contrast_feature, contrast_feature.T), temperature)
    logits_max, _ = torch.max(anchor_dot_contrast, dim=1, keepdim=True)
    logits = anchor_dot_contrast - logits_max.detach()
    mask = mask.repeat(contrast_count, contrast_count)
    logits_mask = torch.scatter(torch.ones_like(mask), 1, torch.arange(batch_size * contrast_count).view(-1, 1), 0)
    mask = mask * logits_mask
    exp_logits = torch.exp(logits) * logits_mask
    log_prob = logits - torch.log(exp_logits.sum(1, keepdim=True))
    mean_log_prob_pos = (mask * log_prob).sum(1) / mask.sum(1)
    return (-mean_log_prob_pos).view(contrast_count, batch_size).mean()


def unnormalised_supcon():
    torch.manual_seed(0)
    bsz, dim = 4, 16
    encoder = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, dim))
    images = torch.randn(2 * bsz, 10) * 5
    labels = torch.tensor([0, 1, 2, 3])
    with gl.trace() as tr:
        f = encoder(images)
        f1, f2 = torch.split(f, [bsz, bsz], dim=0)
        features = torch.cat([f1.unsqueeze(1), f2.unsqueeze(1)], dim=1)  # (no F.normalize)
        loss = sup_con_loss(features, labels)
        loss.backward()
    return loss, tr


def test_names_the_log_of_a_sum_of_underflowed_or_masked_exps():
    """explain(loss, tr): log at the log_prob line, every exp in the sum underflowed or masked (underflow), never a plain 'log of 0, add eps'."""
    loss, tr = unnormalised_supcon()
    assert torch.isnan(loss)
    expect(gl.explain(loss, tr), reason="nonfinite_forward", reasons=("log_of_zero", "underflow"), op="log",
           line="torch.log(exp_logits.sum(1, keepdim=True))", says=("underflowed", "masked out"))


def test_fix_is_logsumexp_and_the_scale_of_the_features():
    """The fix is logsumexp (masked logits set to -inf), and it points at the scale of the inputs (normalised features)."""
    loss, tr = unnormalised_supcon()
    expect(gl.explain(loss, tr), fix=("logsumexp", "normalised"), never_fix=("x + eps",))
