"""Where the randomness of a private fit comes from: seeded for reproducibility, or secure.

A seeded ``numpy.random.Generator`` (``random_state``, ``--seed``, ``noise_seed``) makes a fit
reproducible, but the seed then *is* the noise: anyone who knows it regenerates the noise and
subtracts it, and two fits of related data with the same seed share their noise, so their
difference cancels it. The privacy report of a seeded fit therefore carries
:data:`SECRET_SEED_ASSUMPTION`.

``secure=True`` (``secure_mode=True`` on estimators, ``--secure`` on the CLI) draws a 256-bit key
from the operating system's CSPRNG (:mod:`secrets`) and generates every random number of the fit
with ChaCha20 (``randomgen.ChaCha``, 20 rounds), a cryptographic stream cipher: the noise cannot
be reproduced or predicted from earlier outputs, by anyone, including the caller. What it does
not protect against: attacks on the floating-point representation of the Gaussian sample itself
(Mironov 2012 for the Laplace mechanism; Jin et al. 2022 for Gaussian samplers), which depend on
the sampler's arithmetic, not on the quality of its random bits.
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np

__all__ = [
    "SECRET_SEED_ASSUMPTION",
    "SECURE_ASSUMPTION",
    "derived_seed",
    "gaussian_noise",
    "laplace_noise",
    "secure_generator",
]

#: Stated in the report of every fit whose noise comes from a caller-given seed or generator.
SECRET_SEED_ASSUMPTION = (
    "the random seed or generator that drew the noise is secret and used for this fit only "
    "(anyone who knows it can regenerate and subtract the noise; reusing it across fits lets "
    "their differences cancel the noise); use secure_mode=True / --secure to draw it from the OS"
)
#: Stated in the report of a fit run with ``secure=True``.
SECURE_ASSUMPTION = (
    "noise drawn with ChaCha20 keyed by 256 bits from the operating system's CSPRNG (secure "
    "mode); floating-point attacks on the Gaussian sampler are outside this guarantee"
)


def secure_generator() -> np.random.Generator:
    """A numpy Generator over ChaCha20 (20 rounds) keyed by 256 bits from the OS's CSPRNG.

    >>> g = secure_generator()
    >>> g.standard_normal(3).shape
    (3,)
    """
    from randomgen import ChaCha

    return np.random.Generator(ChaCha(seed=secrets.randbits(256), rounds=20))


def gaussian_noise(
    rng: np.random.Generator, std: float, size: int | tuple[int, ...] | None = None
) -> Any:
    """N(0, std^2) noise of shape ``size`` (a float when None): every privopt release that adds
    independent Gaussian noise outside a correlated stream draws it here, so that the sampler is
    defined (and can be hardened) in one place.

    >>> gaussian_noise(np.random.default_rng(0), 2.0, 3).shape
    (3,)
    """
    if not (std >= 0 and np.isfinite(std)):
        raise ValueError(f"Expected a finite noise std >= 0, got {std!r}.")
    if size is None:
        return float(rng.normal(0.0, std))
    return rng.normal(0.0, std, size=size)


def laplace_noise(
    rng: np.random.Generator, scale: float, size: int | tuple[int, ...] | None = None
) -> Any:
    """Laplace(0, scale) noise of shape ``size`` (a float when None); see :func:`gaussian_noise`."""
    if not (scale >= 0 and np.isfinite(scale)):
        raise ValueError(f"Expected a finite Laplace scale >= 0, got {scale!r}.")
    if size is None:
        return float(rng.laplace(0.0, scale))
    return rng.laplace(0.0, scale, size=size)


def derived_seed(seed: int, purpose: str) -> int:
    """A second 128-bit key from a secret seed (SeedSequence of the seed and ``purpose``), for a
    stream that must not share its noise sources with the seed's own stream."""
    words = np.random.SeedSequence([int(seed), *purpose.encode()]).generate_state(4, np.uint32)
    return int.from_bytes(np.asarray(words, dtype="<u4").tobytes(), "little")
