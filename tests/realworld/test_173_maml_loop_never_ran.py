"""MAML with one inner update: the loop that would compute the last query loss with grad never runs, so the meta loss is the one summed under torch.no_grad().

Address: https://github.com/dragen1860/MAML-Pytorch/issues/40
Title: questions with respect to the no_grad()

What went wrong: with update_step = 1, Meta.forward raised "element 0 of tensors does not require
grad and does not have a grad_fn" at loss_q.backward(). The loop for k in range(1, update_step)
that adds the graph-carrying query losses never ran, so losses_q[-1] is losses_q[1], which was
accumulated inside the with torch.no_grad(): block that only measures accuracy.

Accepted answer (a user's reply the reporter confirmed): with update_step = 1 that loop is empty and
the meta loss comes from the no_grad block; compute the last query loss with grad on (or use
update_step >= 2).

Without a trace graphlens reads the code. The assignment in the loop body is the textually last one,
but the loop never ran: its variable k is unbound in the frame. A lead about the inner
torch.autograd.grad call (in that loop) would send the user to fix code that never executed.
"""

import torch
from torch import nn, optim
from torch.nn import functional as F

import graphlens as gl
from _helpers import explained, expect


class Learner(nn.Module):
    def __init__(self, n_in=4, n_hid=8, n_way=3):
        super().__init__()
        self.vars = nn.ParameterList([
            nn.Parameter(torch.randn(n_hid, n_in) * 0.1), nn.Parameter(torch.zeros(n_hid)),
            nn.Parameter(torch.randn(n_way, n_hid) * 0.1), nn.Parameter(torch.zeros(n_way)),
        ])

    def forward(self, x, vars=None):
        w1, b1, w2, b2 = self.vars if vars is None else vars
        return F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)


class Meta(nn.Module):
    def __init__(self, update_step=1):
        super().__init__()
        self.update_lr = 0.4
        self.update_step = update_step
        self.net = Learner()
        self.meta_optim = optim.Adam(self.net.parameters(), lr=1e-3)

    def forward(self, x_spt, y_spt, x_qry, y_qry):
        task_num = x_spt.size(0)
        losses_q = [0 for _ in range(self.update_step + 1)]
        for i in range(task_num):
            logits = self.net(x_spt[i])
            loss = F.cross_entropy(logits, y_spt[i])
            grad = torch.autograd.grad(loss, self.net.parameters())
            fast_weights = [p - self.update_lr * g for g, p in zip(grad, self.net.parameters())]
            with torch.no_grad():
                logits_q = self.net(x_qry[i], fast_weights)
                loss_q = F.cross_entropy(logits_q, y_qry[i])
                losses_q[1] += loss_q
            for k in range(1, self.update_step):
                logits = self.net(x_spt[i], fast_weights)
                loss = F.cross_entropy(logits, y_spt[i])
                grad = torch.autograd.grad(loss, fast_weights)
                fast_weights = [p - self.update_lr * g for g, p in zip(grad, fast_weights)]
                logits_q = self.net(x_qry[i], fast_weights)
                loss_q = F.cross_entropy(logits_q, y_qry[i])
                losses_q[k + 1] += loss_q
        loss_q = losses_q[-1] / task_num
        self.meta_optim.zero_grad()
        loss_q.backward()
        self.meta_optim.step()


def maml_one_update():
    torch.manual_seed(0)
    maml = Meta(update_step=1)
    x_spt, y_spt = torch.randn(2, 6, 4), torch.randint(0, 3, (2, 6))
    x_qry, y_qry = torch.randn(2, 6, 4), torch.randint(0, 3, (2, 6))
    maml(x_spt, y_spt, x_qry, y_qry)


def test_plain_answer_reads_the_no_grad_block_not_the_loop_that_never_ran():
    """explain_error(exc): the lead is the no_grad block's losses_q[1] += loss_q, never the autograd.grad of the empty loop."""
    expect(explained(maml_one_update, "plain"), reason="no_grad_fn", reasons=("cut_by_no_grad",),
           not_reasons=("grad_without_create_graph",), line="losses_q[1] += loss_q",
           says=("torch.no_grad()",), never=("create_graph",), never_fix=("create_graph=True",))


def test_traced_answer_sees_the_no_grad_region():
    """explain_error(exc, tr): cut_by_no_grad, from the ops the trace saw run."""
    expect(explained(maml_one_update, "traced"), reason="no_grad_fn", reasons=("cut_by_no_grad",),
           never_fix=("create_graph=True",))
