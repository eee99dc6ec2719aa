"""SMAPE masks the NaN of 0/0 after the division, yet anomaly mode stops at DivBackward0's NaN gradient.

Address: https://github.com/pytorch/pytorch/issues/22820
Title: RuntimeError 'DivBackward0' nan values in its 0th output, but works when tensors loaded from disk?

What went wrong: the reporter's SMAPE loss divides |model_outputs - target_outputs| by
|model_outputs| + |target_outputs|, drops the NaN results with a mask (elementwise_smape[~nan_mask]) and
averages; with torch.autograd.set_detect_anomaly(True) on, loss.backward() fails with "Function
'DivBackward0' returned nan values in its 0th output": where both values are 0 the denominator is 0,
and the division's backward computes 0 / 0 there although the forward's NaN was masked out.

Accepted answer: the standard one for this NaN (as in pytorch/pytorch#16317): masking after the
division does not stop its gradient; keep the zero denominators out of the division itself, e.g.
divide by torch.where(denominator == 0, torch.ones_like(denominator), denominator), then mask.

The failed backward's graph shows the division, its result's variable and its denominator, whose zeros
graphlens reads; a trace gives the forward line directly.
"""

import warnings

import pytest
import torch

from _helpers import HOW, expect, explained


def anomaly_nan_masked_division():
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        model.weight[0].zero_()  # the first output is 0 for every input
    x = torch.randn(1, 2)
    model_outputs = model(x)[0]
    target_outputs = torch.tensor([0.0, 1.5, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (anomaly mode warns with the forward's traceback)
        with torch.autograd.set_detect_anomaly(True):
            numerator = torch.abs(model_outputs - target_outputs)
            denominator = torch.abs(model_outputs) + torch.abs(target_outputs)
            elementwise_smape = torch.div(numerator, denominator)
            nan_mask = torch.isnan(elementwise_smape)
            loss = elementwise_smape[~nan_mask].mean()
            loss.backward()


@pytest.mark.parametrize("how", HOW)
def test_names_the_division_and_its_line(how):
    """explain_error is anomaly_nan on DivBackward0, the division elementwise_smape = torch.div(numerator, denominator)."""
    expect(explained(anomaly_nan_masked_division, how), reason="anomaly_nan", op="DivBackward0", tensor="elementwise_smape",
           line="torch.div(numerator, denominator)")


@pytest.mark.parametrize("how", HOW)
def test_says_the_denominator_is_zero_and_the_mask_does_not_help(how):
    """The answer reads the zero in denominator and says the mask after the division does not stop the NaN."""
    expect(explained(anomaly_nan_masked_division, how), says=("denominator", "0 at 1", "masked"),
           fix=("torch.where(denominator == 0",), never_fix=("out-of-place", "inplace", "retain_graph"))
