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

``transformers`` is never imported here: a model holding a ``Conv1D`` has imported it already,
and a process without it gets no extra rule.
"""

from __future__ import annotations

import sys
from typing import Any

from privopt.torch._layers import _Linear

__all__ = ["hf_rules"]


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
