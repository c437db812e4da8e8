"""A synthetic next-token corpus with heterogeneous users, and the small model trained on it.

StackOverflow (the paper's user-level benchmark) cannot be downloaded here, so the federated
reproduction draws a corpus whose structure is the one that matters: users write different
amounts, in different styles, over one shared language.

* Language: a vocabulary of V tokens; a shared bigram transition matrix P_0 with rows drawn
  from Dirichlet(0.3), so every token has a few likely successors.
* Topics: ``topics`` groups; topic k favours its own ``V / topics`` tokens: its transition
  matrix Q_k has every row drawn from Dirichlet(1) over topic k's tokens (zero elsewhere).
* Users: user u has a topic k_u (uniform) and writes one Markov chain with the transition
  matrix ``(1 - h) P_0 + h Q_{k_u}`` (h = ``heterogeneity``), from a uniform first token. Its
  number of examples is ``min_examples`` plus a geometric count with mean ``mean_extra``,
  capped at ``max_examples``: a few users write a lot, most write little.
* Examples: the ``context`` previous tokens of each position, and the token (next-token
  prediction). Test users are fresh users from the same language and topics: accuracy is
  measured on people who did not train the model (a held-out set of users).

The language comes from ``seed``, the users from ``user_seed``; nothing here is private.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privopt._validate import check_count, check_probability

__all__ = ["Corpus", "next_token_model", "synthetic_corpus"]


@dataclass(frozen=True)
class Corpus:
    """Train users' examples and fresh test users' examples (numpy int64 arrays)."""

    contexts: np.ndarray  # (examples, context)
    targets: np.ndarray  # (examples,)
    users: np.ndarray  # (examples,) the user id of each example
    test_contexts: np.ndarray
    test_targets: np.ndarray
    vocab: int

    @property
    def num_users(self) -> int:
        return len(np.unique(self.users))


def _language(rng: np.random.Generator, vocab: int, topics: int):
    base = rng.dirichlet(np.full(vocab, 0.3), size=vocab)
    per_topic = max(1, vocab // topics)
    favoured = np.zeros((topics, vocab, vocab))
    for k in range(topics):
        tokens = np.arange(k * per_topic, min(vocab, (k + 1) * per_topic))
        favoured[k][:, tokens] = rng.dirichlet(np.ones(len(tokens)), size=vocab)
    return base, favoured


def _users(rng, base, favoured, count, *, heterogeneity, context, lengths):
    """Examples of ``count`` users (a vectorised Markov chain per user)."""
    vocab = base.shape[0]
    topic = rng.integers(0, len(favoured), size=count)
    cumulative = np.cumsum((1 - heterogeneity) * base + heterogeneity * favoured[topic], axis=2)
    cumulative[..., -1] = 1.0  # guard against rounding
    steps = int(lengths.max()) + context
    tokens = np.empty((count, steps), dtype=np.int64)
    tokens[:, 0] = rng.integers(0, vocab, size=count)
    rows = np.arange(count)
    for t in range(1, steps):
        u = rng.random(count)
        tokens[:, t] = (cumulative[rows, tokens[:, t - 1]] < u[:, None]).sum(axis=1)
    keep = np.arange(steps - context)[None, :] < lengths[:, None]  # (users, positions)
    windows = np.stack([tokens[:, i : steps - context + i] for i in range(context + 1)], axis=2)
    chosen = windows[keep]
    users = np.broadcast_to(rows[:, None], keep.shape)[keep]
    return chosen[:, :context], chosen[:, context], users


def synthetic_corpus(
    num_users: int,
    *,
    vocab: int = 32,
    topics: int = 8,
    heterogeneity: float = 0.6,
    context: int = 2,
    min_examples: int = 4,
    mean_extra: float = 16.0,
    max_examples: int = 128,
    test_users: int = 400,
    seed: int = 0,
    user_seed: int | None = None,
) -> Corpus:
    """The corpus of the module docstring (train users' examples, fresh test users'): the
    language and topics from ``seed``, the users from ``user_seed`` (default ``seed``), so
    another ``user_seed`` draws other people writing the same language."""
    num_users = check_count("num_users", num_users)
    vocab = check_count("vocab", vocab, minimum=2)
    topics = min(check_count("topics", topics), vocab)
    heterogeneity = check_probability("heterogeneity", heterogeneity)
    context = check_count("context", context)
    rng = np.random.default_rng(seed)
    base, favoured = _language(rng, vocab, topics)
    if user_seed is not None:
        rng = np.random.default_rng([check_count("user_seed", user_seed, minimum=0), 1])

    def lengths(count: int) -> np.ndarray:
        extra = rng.geometric(1.0 / (1.0 + mean_extra), size=count) - 1
        return np.minimum(min_examples + extra, max_examples)

    opts = {"heterogeneity": heterogeneity, "context": context}
    x, y, users = _users(rng, base, favoured, num_users, lengths=lengths(num_users), **opts)
    tx, ty, _ = _users(rng, base, favoured, check_count("test_users", test_users),
                       lengths=lengths(test_users), **opts)  # fmt: skip
    return Corpus(x, y, users, tx, ty, vocab)


def next_token_model(vocab: int, context: int = 2, width: int = 16, seed: int = 0):
    """Embedding (V x width) of each context token, concatenated, then a linear layer to the V
    logits: a small model whose forward ``torch.func.vmap`` batches over users."""
    import torch
    from torch import nn

    class NextToken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.out = nn.Linear(context * width, vocab)

        def forward(self, tokens):
            return self.out(self.embed(tokens).flatten(-2))

    torch.manual_seed(seed)
    return NextToken()
