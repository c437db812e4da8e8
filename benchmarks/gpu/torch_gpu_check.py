"""Accuracy of privopt.torch's device code paths against float64 on the CPU.

The CPU tests pin ``clipped_grad_sum`` to a float64 per-example loop; some paths exist only on
CUDA (TF32 per-example convolution gradients following ``torch.backends.cudnn.allow_tf32``,
``bmm(out_dtype=float32)`` Grams of bf16 tensors, TF32 Grams of exact 16-bit values). This
check runs a narrow ResNet-18-GN (every convolution method forced in turn) and a small token
MLP on the device, fp32 and bf16 autocast, clip at the median per-example norm (float64), and
reports ``max |clipped_grad_sum - loop| / max |loop|`` per parameter, the worst, where ``loop``
is a per-example loop on the same device under the same autocast (bf16 itself moves a deep
ResNet's gradients by tens of percent from float64 at initialisation, so float64 is the wrong
yardstick there; the loop's own distance to float64 is reported too). Expected: below 1e-2 in
fp32 (TF32 products, as the non-private cuDNN gradients), about 1e-2 in bf16.
"""

from __future__ import annotations

import contextlib
import copy

import torch


def _loop(model, loss_fn, x, y, clip, cast):
    """(clipped sum, norms) by a per-example loop, each example's forward under ``cast``."""
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    params = [p for p in model.parameters() if p.requires_grad]
    total = {
        n: torch.zeros_like(p, dtype=torch.float64) for n, p in zip(names, params, strict=True)
    }
    norms = []
    for i in range(len(y)):
        with cast():
            loss = loss_fn(model(x[i : i + 1]), y[i : i + 1]).sum()
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        grads = [
            torch.zeros_like(p) if g is None else g for g, p in zip(grads, params, strict=True)
        ]
        norm = float(sum((g.double() ** 2).sum() for g in grads)) ** 0.5
        norms.append(norm)
        for n, g in zip(names, grads, strict=True):
            total[n] += min(1.0, clip / norm) * g.double()
    return total, norms


def _error(got, ref) -> float:
    return max(
        float((got[k].double().cpu() - v.cpu()).abs().max() / v.abs().max()) for k, v in ref.items()
    )


def check(device: torch.device, resnet, token_mlp, image_loss, token_loss) -> dict:
    from privopt.torch import clipped_grad_sum
    from privopt.torch._conv import METHODS, ConvRule

    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    cases = [
        (
            "resnet18_gn_w16",
            resnet(16),
            torch.randn(6, 3, 32, 32, generator=gen),
            torch.randint(0, 10, (6,), generator=gen),
            image_loss,
            METHODS,
        ),
        (
            "token_mlp_small",
            token_mlp(vocab=512, d=64, hidden=256, depth=2),
            torch.randint(0, 512, (6, 16), generator=gen),
            torch.randint(0, 512, (6, 16), generator=gen),
            token_loss,
            (None,),
        ),
    ]
    out: dict = {}
    for name, model, x, y, loss_fn, methods in cases:
        model = model.double()
        xd = x.double() if x.is_floating_point() else x
        plain = contextlib.nullcontext
        _, norms = _loop(model, loss_fn, xd, y, 1e300, plain)
        clip = sorted(norms)[len(norms) // 2]
        exact, _ = _loop(model, loss_fn, xd, y, clip, plain)
        dev = copy.deepcopy(model).float().to(device)
        xs, ys = (x.float() if x.is_floating_point() else x).to(device), y.to(device)
        for dtype in (None, torch.bfloat16):
            cast = (
                (lambda d=dtype: torch.autocast(device.type, dtype=d))
                if dtype
                else (lambda: torch.autocast(device.type, enabled=False))
            )
            loop, _ = _loop(dev, loss_fn, xs, ys, clip, cast)
            tag = f"{name}_{'bf16' if dtype else 'fp32'}"
            out[f"{tag}_loop_vs_float64"] = _error(loop, exact)
            for method in methods:
                ConvRule.method_override = method
                try:
                    with cast():
                        got = clipped_grad_sum(dev, loss_fn, xs, ys, clip)
                finally:
                    ConvRule.method_override = None
                key = tag + (f"_{method}" if method else "")
                out[key] = _error(got, loop)
                print(
                    f"check {key}: max relative error {out[key]:.2e} against the per-example "
                    f"loop on the device (that loop against float64: "
                    f"{out[tag + '_loop_vs_float64']:.2e})",
                    flush=True,
                )
    return out
