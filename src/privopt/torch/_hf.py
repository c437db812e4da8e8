r"""Rules for Hugging Face ``transformers`` layers, used once ``transformers`` is imported.

``transformers.pytorch_utils.Conv1D(nf, nx)`` (GPT-2's attention and MLP projections) computes
``y = x W + b`` with ``W`` stored (nx, nf), i.e. a Linear layer whose weight is the transpose of
nn.Linear's (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners"). Its
per-example gradient is ``W_i = a_i^T g_i`` (nx x nf), the transpose of the Linear rule's
``g_i^T a_i``, so its squared norm and clipped sum are the Linear rule's (ghost norm
``<a_i a_i^T, g_i g_i^T>_F`` of Li et al. 2021, arXiv 2110.05679, or the materialised gradient;
book-keeping of Bu et al. 2022, arXiv 2210.00038) with the weight transposed back. The rule is
used for ``Conv1D`` and subclasses that keep its ``forward`` (anything else is replayed by the
checked ``torch.func`` fallback).

RMSNorm (Zhang & Sennrich 2019, arXiv 1910.07467) as Llama-style models write it (a class named
``...RMSNorm`` with one weight and ``variance_epsilon``; ``weight * x_hat`` with ``x_hat =
x / sqrt(mean(x^2) + eps)`` computed in float32 and cast back): weight_i = sum over positions
of x_hat_i * g_i, with x_hat recomputed and checked against the call's recorded output bit for
bit before the rule is used (else the ``torch.func`` replay, exact for any formula).

``transformers`` is never imported here: a model holding a ``Conv1D`` has imported it already,
and a process without it gets no extra rule.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from privopt.torch._layers import _Linear
from privopt.torch._rule import LayerRule, norm_dtype

__all__ = ["hf_layout", "hf_rules", "rms_rule"]


class _Conv1DRule(_Linear):
    """Hugging Face Conv1D: the Linear rule with the weight stored (in, out)."""

    transposed = True

    @staticmethod
    def features(module) -> tuple[int, int]:
        return int(module.nx), int(module.nf)


def hf_rules() -> dict[type, Any]:
    """Layer type -> rule for the ``transformers`` layers with a fast rule (empty when
    ``transformers`` has not been imported)."""
    utils = sys.modules.get("transformers.pytorch_utils")
    conv1d = getattr(utils, "Conv1D", None) if utils is not None else None
    return {conv1d: _Conv1DRule} if isinstance(conv1d, type) else {}


def _rms_like(module) -> bool:
    """A Hugging Face RMSNorm (LlamaRMSNorm, MistralRMSNorm, Qwen2RMSNorm, T5LayerNorm's
    kind): one 1-D ``weight``, a float ``variance_epsilon``, a class named ...RMSNorm."""
    names = [n for n, _ in module.named_parameters()]
    return (
        type(module).__name__.endswith("RMSNorm")
        and names == ["weight"]
        and module.weight.dim() == 1
        and isinstance(getattr(module, "variance_epsilon", None), float)
    )


def _rms_hat(module, x: torch.Tensor) -> torch.Tensor:
    """Llama's normalisation, operation for operation: in float32, x / sqrt(mean(x^2) + eps),
    cast back to x's dtype (the output is ``weight * x_hat``)."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + module.variance_epsilon)
    return h.to(x.dtype)


class _RMSNormRule(LayerRule):
    """weight_i = sum over positions of x_hat_i * g_i (materialised, B x D), x_hat recomputed
    by :func:`_rms_hat` (verified against the call's output before the rule is used)."""

    def per_example(self):
        if getattr(self, "_cached", None) is None:
            weight = 0
            for args, _, g in self.uses:
                a = args[0]
                self._check_batch(a)
                ndt = norm_dtype(g.dtype)
                prod = _rms_hat(self.module, a).to(ndt) * g.to(ndt)
                dims = tuple(range(1, a.dim() - 1))
                weight = weight + (prod.sum(dims) if dims else prod)
            self._cached = {"weight": weight}
        return self._cached


def rms_rule(module):
    """(rule, type) for a Hugging Face RMSNorm (see :func:`_rms_like`), else None."""
    return (_RMSNormRule, type(module)) if _rms_like(module) else None


def hf_layout(base: type, module, call, d: int) -> int | None:
    """The batch dimension a ``transformers`` rule can use for ``call`` (None: the fallback).

    An RMSNorm's rule is used only where ``weight * x_hat`` recomputed by :func:`_rms_hat`
    equals the call's recorded output bit for bit (a variant with another formula, e.g.
    Gemma's ``(1 + weight)``, or one run under a different precision, is replayed by
    ``torch.func`` instead, which is exact for any formula)."""
    x = call.inputs[0]
    if base in hf_rules():
        return d if d < x.dim() - 1 else None
    if _rms_like(module) and call.shared is None and d < x.dim() - 1:
        out = call.outputs[0]
        with torch.no_grad():
            same = module.weight * _rms_hat(module, x)
        return d if same.shape == out.shape and torch.equal(same, out) else None
    return None
