"""AWD-LSTM's WeightDropout stores a dropped copy of a weight in the LSTM's _parameters: after a training forward, model.parameters() yields that non-leaf and the optimizer refuses it.

Address: https://github.com/fastai/fastai/issues/2591
Title: AWD LSTM dropout makes 'weight_hh_l0' a leaf Parameter rather a non-leaf Tensor

What went wrong: WeightDropout._setweights writes F.dropout(weight_hh_l0_raw) into
module._parameters['weight_hh_l0']; building an optimizer from model.parameters() after a training
forward raises "can't optimize a non-leaf Tensor" (the same code is in pytorch/pytorch#38198).

Accepted answer (the issue): the dropped weight is an intermediate result computed from the raw
parameter weight_hh_l0_raw, which is the tensor to train; it must not be registered as a parameter.

The answer must name the entry the optimizer was given (model.module.weight_hh_l0), the dropout's
multiply that made it, and the raw parameter as the leaf (a parameter of a module the frame holds),
never that no variable holds it.
"""

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from _helpers import HOW, expect, explained


class WeightDropout(nn.Module):
    def __init__(self, module, weight_p, layer_names=("weight_hh_l0",)):
        super().__init__()
        self.module, self.weight_p, self.layer_names = module, weight_p, list(layer_names)
        self.idxs = [] if hasattr(self.module, "_flat_weights_names") else None
        for layer in self.layer_names:
            w = getattr(self.module, layer)
            self.register_parameter(f"{layer}_raw", nn.Parameter(w.data))
            self.module._parameters[layer] = F.dropout(w, p=self.weight_p, training=False)
            if self.idxs is not None:
                self.idxs.append(self.module._flat_weights_names.index(layer))
        self.module.flatten_parameters = self._do_nothing

    def _setweights(self):
        for i, layer in enumerate(self.layer_names):
            raw_w = getattr(self, f"{layer}_raw")
            self.module._parameters[layer] = F.dropout(raw_w, p=self.weight_p, training=self.training)
            if self.idxs is not None:
                self.module._flat_weights[self.idxs[i]] = self.module._parameters[layer]

    def forward(self, *args):
        self._setweights()
        return self.module.forward(*args)

    def _do_nothing(self):
        return


def optimizer_after_a_training_forward():
    torch.manual_seed(0)
    model = WeightDropout(nn.LSTM(3, 5, batch_first=True), 0.5)
    model.train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the LSTM warns that its weights are not contiguous in memory)
        model(torch.randn(2, 4, 3))
    torch.optim.Adam(model.parameters(), lr=1e-3)


@pytest.mark.parametrize("how", HOW)
def test_names_the_entry_and_the_raw_parameter(how):
    """explain(err): model.module.weight_hh_l0 is made by the dropout's multiply from the leaf model.weight_hh_l0_raw."""
    expect(explained(optimizer_after_a_training_forward, how), reason="optimizer_nonleaf", tensor="model.module.weight_hh_l0",
           op="MulBackward0", says=("model.weight_hh_l0_raw",), fix=("model.weight_hh_l0_raw",),
           never=("no variable graphlens can see",))
