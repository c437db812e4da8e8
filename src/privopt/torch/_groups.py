r"""Per-user squared norms for user-level clipping, without a loop over users.

With the user as the privacy unit (``make_private(..., users=...)``), user u's contribution to a
step is the clipped sum of its examples' gradients,

    W_u = sum_{i in u} grad_i,      c_u = min(1, G / ||W_u||),      released sum_u c_u W_u,

(or with ``user_clipping="mean"`` the clipped mean: c_u = min(1, G n_u / ||W_u||) / n_u, so the
contribution c_u W_u is clip_G(W_u / n_u)). Since sum_u c_u W_u = sum_i c_{u(i)} grad_i, the sum
is contracted by each rule's own per-example machinery (:meth:`LayerRule.clipped_sums`) with the
example factors c_{u(i)}: only the norms ||W_u|| need per-user work.

**Ghost norms per user.** For a layer whose per-example gradient is W_i = sum_t g_it a_it^T
(Linear over T positions; a convolution with a_it the unfolded input patches: Bu, Mao & Xu
2022, "Scalable and Efficient Training of Large Convolutional Neural Networks with Differential
Privacy", arXiv:2205.10683, its ghost norm of a convolution), with rows r = (i, t),

    ||W_u||^2 + ||b_u||^2 = sum_{r, s of user u} (<a_r, a_s> + 1) <g_r, g_s>

(b_u the bias gradient sum_r g_r: the "+ 1" is a constant input column; Li, Tramer, Liang &
Hashimoto 2021, arXiv:2110.05679, sec. 4, for one example). Only the pairs of rows of one user
are needed, a block-diagonal Gram. :class:`Tiling` lays the users out in *tiles* of width L
examples (several small users share a tile; the products of rows of different users are
*selected* away, not multiplied by zero, so a non-finite row of one user never reaches another's
norm): one gather of the rows per layer (none when the tiles are already runs of the batch),
one batched Gram per side and class, one masked row sum per class, one ``index_add``. A tiling
has one or two classes (users of at most w records in tiles of width w, larger users in tiles
of the largest user's size; each tile opens with the largest user left and is filled with the
smallest), or is the whole batch as one tile in its own order (no gather: the "masked" Grams of
the batch).

====================  ==============================================================  ==========
rule                  ||W_u||^2 by                                                     cost
====================  ==============================================================  ==========
Linear (T positions)  ghost per user over tiles (above); or each user's gradient        tiles (L T)
                      sum_r g_r a_r^T, one user a tile (one batched matmul per class,   ^2 (D + p)
                      padding rows zeroed); or the materialised per-example gradients   | B T p D
                      summed by user (``index_add``)                                    (both)
Conv1d/2d             the same ghost over the unfolded input (one strided copy), or     as Linear
                      the rule's materialised per-example gradients (kept for its sum)  (T: output
                      summed by user (:mod:`privopt.torch._user_conv`)                  positions)
Embedding             the record-level (example, row) segment sums with the example
                      replaced by its user                                              O(B T D)
any other             the rule's per-example gradients (B, *shape) summed by user     materialise
====================  ==============================================================  ==========

The cheapest method (and tiling) is chosen per layer by a cost model in multiply-adds that also
counts memory traffic (``MEMORY_WEIGHT`` per element) and a fixed cost per class of tiles
(``CLASS_COST``: a handful of small operations, which dominate on a CPU at these sizes). The
choice reads the tensors' shapes and the batch's user sizes, never a data value; the user sizes
(like the physical batches of :mod:`privopt.torch._users`, which already depend on them) change
only the order of the floating-point sums and the step's time, and are never released. All
methods are exact (the same sums in another order): tests compare each with a float64 loop over
users. A rule without per-example gradients (none today) is refused naming the layer. The user
index of each example is host data (the loader built it): the tilings are built on the host and
copied to a CUDA device through pinned memory without waiting for it; nothing is read back.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import torch
from privopt.torch._rule import gram, norm_dtype

__all__ = ["Groups", "Tiling", "group_squared_norms", "pair_sums", "per_example"]

#: multiply-adds that writing one tensor element costs, in the cost model (as the conv rule's)
MEMORY_WEIGHT = 8
#: multiply-adds (of a large matmul) that one class of tiles costs beyond its arithmetic: about
#: ten small operations of ~6 us on a CPU core
CLASS_COST = 2e6


def _device(array: np.ndarray, device) -> torch.Tensor:
    """A host array on ``device``. On CUDA through pinned memory with a non-blocking copy: a
    copy from pageable memory would make the host wait for the queued backward (PyTorch's
    caching host allocator keeps the pinned block until the copy is done)."""
    t = torch.from_numpy(np.ascontiguousarray(array))
    device = torch.device(device)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t if device.type == "cpu" else t.to(device)


class _Class:
    """One class of tiles: ``tiles`` tiles of ``width`` examples, rows ``start`` .. of the
    tiling's gathered rows; ``single``: one user a tile and no padding (no mask needed)."""

    def __init__(self, width: int, tiles: int, start: int, owner: np.ndarray, size: int):
        self.width, self.tiles, self.start = width, tiles, start
        per_tile = owner.reshape(tiles, width)
        self.size, self.padded = size, int(owner.max()) >= size
        self.single = bool((per_tile == per_tile[:, :1]).all()) and not self.padded
        self._owner = per_tile
        self._masks: dict[Any, torch.Tensor] = {}

    def owners(self, device) -> torch.Tensor:
        """(tiles,): the user of each tile (tilings of one user a tile)."""
        if "owners" not in self._masks:
            self._masks["owners"] = _device(self._owner[:, 0], device)
        return self._masks["owners"]

    def padding(self, t: int, device) -> torch.Tensor:
        """(tiles, width T, 1): True for the padding rows."""
        if ("pad", t) not in self._masks:
            pad = self._owner >= self.size
            pad = np.repeat(pad, t, axis=1) if t > 1 else pad
            self._masks[("pad", t)] = _device(pad[:, :, None], device)
        return self._masks[("pad", t)]

    def off_user(self, t: int, device) -> torch.Tensor:
        """(tiles, width T, width T): True for the pairs of rows of different users (or
        padding), whose products are dropped."""
        if t not in self._masks:
            u = np.repeat(self._owner, t, axis=1) if t > 1 else self._owner
            self._masks[t] = _device(u[:, :, None] != u[:, None, :], device)
        return self._masks[t]


class Tiling:
    """The users of a batch laid out in tiles (module docstring), built by
    :meth:`Groups.tiling`: ``classes`` of :class:`_Class`, whose rows are gathered together
    (``rows``: a slice when already contiguous in the batch, else an index tensor; padding rows
    take row 0) and ``users``: each gathered row's user slot (padding: the spare slot U)."""

    def __init__(self, classes: list[_Class], take: np.ndarray, owner: np.ndarray, groups):
        self.classes = classes
        real = int(owner.max()) < groups.size  # no padding
        if real and int(take[-1]) - int(take[0]) == len(take) - 1 and _increasing(take):
            self.rows: Any = slice(int(take[0]), int(take[-1]) + 1)  # a view, no copy
        else:
            self.rows = _device(take, groups.device)
        self.users = _device(owner, groups.device)

    def take(self, value: torch.Tensor) -> torch.Tensor:
        """(B, T, k) -> (rows, T, k)."""
        rows = self.rows
        return value[rows] if isinstance(rows, slice) else value.index_select(0, rows)


def _increasing(take: np.ndarray) -> bool:
    return bool((take[1:] > take[:-1]).all())


def _pack(sizes: list[int], width: int) -> tuple[list[int], list[int]]:
    """(tile, offset in the tile) of each user, sizes in decreasing order: each tile opens with
    the largest user left and is filled with the smallest that fit."""
    n = len(sizes)
    tile, offset = [0] * n, [0] * n
    lo, hi, t = 0, n - 1, 0
    while lo <= hi:
        fill = sizes[lo]
        tile[lo], offset[lo] = t, 0
        lo += 1
        while lo <= hi and fill + sizes[hi] <= width:
            tile[hi], offset[hi] = t, fill
            fill += sizes[hi]
            hi -= 1
        t += 1
    return tile, offset


class Groups:
    """The user slot (0 .. U-1) of each example of a batch, from a host array."""

    def __init__(self, slots: Any, batch: int, device: torch.device) -> None:
        if isinstance(slots, torch.Tensor):
            slots = slots.detach().cpu().numpy()
        slots = np.asarray(slots)
        if slots.shape != (batch,) or (slots.size and slots.dtype.kind not in "iu"):
            raise ValueError(
                f"Expected groups to hold one integer user slot per example ({batch}), got an "
                f"array of shape {slots.shape}."
            )
        slots = slots.astype(np.int64)
        if slots.size and slots.min() < 0:
            raise ValueError("Expected groups >= 0 (user slots 0 .. U - 1).")
        self.slots, self.batch, self.device = slots, batch, device
        self.size = int(slots.max()) + 1 if slots.size else 0  # U
        self.counts = np.bincount(slots, minlength=self.size)  # n_u
        self.longest = int(self.counts.max()) if slots.size else 0
        self.index = _device(slots, device)
        self._users_upto: list[int] = []  # per size v: the users of 1 .. v records
        self._rows_upto: list[int] = []  # and their records (host, for the estimates)
        self._tilings: dict[tuple, Tiling] = {}
        self._candidates: dict[tuple, list] | None = None
        self._user_candidates: dict[tuple, list] | None = None

    @property
    def count_tensor(self) -> torch.Tensor:
        """(U,) the users' numbers of examples, on the device (for the clipped mean)."""
        return _device(self.counts, self.device)

    def segment(self, value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """(B, ...) -> (U, ...): the rows of each user summed, in ``dtype``."""
        out = torch.zeros((self.size, *value.shape[1:]), dtype=dtype, device=value.device)
        return out.index_add_(0, self.index, value.to(dtype))

    def expanded(self, k: int) -> Groups:
        """The groups of (example, j) for j < k, example-major: slot u k + j."""
        slots = (self.slots[:, None] * k + np.arange(k)[None, :]).reshape(-1)
        return Groups(slots, self.batch * k, self.device)  # U k slots (empty users: norm 0)

    # -- tilings ---------------------------------------------------------------------------------
    def _estimate(self, lo: int, hi: int, width: int) -> tuple[int, int]:
        """(tiles, rows) of the users of lo < n_u <= hi in tiles of ``width`` (an estimate: the
        packing's lower bound, at least one tile per user of more than width / 2)."""
        users, rows, top = self._users_upto, self._rows_upto, self.longest
        lo, hi = min(lo, top), min(hi, top)
        if users[hi] == users[lo]:
            return 0, 0
        big = users[hi] - users[min(max(lo, width // 2), hi)]
        total = rows[hi] - rows[lo]
        return max(math.ceil(total / width), big), total

    def candidates(self) -> dict[tuple, list[tuple[int, int, bool]]]:
        """Tilings to consider: widths -> per class (width, tiles, gathered). Widths are powers
        of 2 (batched matmuls of such widths run several times faster than of odd ones): one
        class of the first power P >= the largest user (or 2 P), or users of at most w < P
        records in tiles of w and the others in tiles of P; ``()`` is the whole batch as one
        tile in its own order."""
        if self._candidates is not None:
            return self._candidates
        per_size = np.bincount(self.counts, minlength=self.longest + 1)
        per_size[0] = 0
        self._users_upto = np.cumsum(per_size).tolist()
        self._rows_upto = np.cumsum(per_size * np.arange(len(per_size))).tolist()
        self._candidates = out = {(): [(self.batch, 1, False)]}
        if self.longest == 0:
            return out
        top = 1 << (self.longest - 1).bit_length()  # the first power of 2 >= the largest user
        for width in (top, 2 * top):
            if width < self.batch:
                out[(width,)] = [(width, self._estimate(0, width, width)[0], True)]
        for w in (2**k for k in range((top - 1).bit_length())):  # the powers of 2 below top
            small, big = self._estimate(0, w, w), self._estimate(w, top, top)
            if small[0] and big[0]:
                out[(w, top)] = [(w, small[0], True), (top, big[0], True)]
        return out

    def user_candidates(self) -> dict[tuple, list[tuple[int, int, bool]]]:
        """Tilings of one user a tile to consider: widths -> per class (width, tiles,
        gathered); the widths of :meth:`candidates`."""
        if self._user_candidates is not None:
            return self._user_candidates
        self._user_candidates = out = {}
        for widths in self.candidates():
            classes, lower = [], 0
            for width in widths:
                users = self._users_upto
                tiles = users[min(width, self.longest)] - users[min(lower, self.longest)]
                if tiles:
                    classes.append((width, tiles, True))
                lower = width
            if classes:
                out[widths] = classes
        return out

    def tiling(self, widths: tuple, shared: bool = True) -> Tiling:
        """The users in tiles (module docstring), cached per ``widths``; ``shared=False``: one
        user a tile (for per-user gradients)."""
        key = (widths, shared)
        if key in self._tilings:
            return self._tilings[key]
        if not widths:
            whole = _Class(self.batch, 1, 0, self.slots, self.size)
            tiling = Tiling([whole], np.arange(self.batch), self.slots, self)
            self._tilings[key] = tiling
            return tiling
        counts = self.counts
        # per user: its class, tile and offset in the tile; then every example placed at once
        klass = np.full(self.size, -1, dtype=np.int64)
        place = np.zeros(self.size, dtype=np.int64)  # tile * width + offset, in its class
        widths_of, tiles_of, lower = [], [], 0
        for width in widths:  # the users of lower < n_u <= width
            users = np.flatnonzero((counts > lower) & (counts <= width))
            lower = width
            if not len(users):
                continue
            sizes = counts[users]
            if not shared:  # one user a tile, in order
                tile, offset = np.arange(len(users)), 0
            elif int(sizes.min()) == int(sizes.max()):  # one size n: width // n a tile, in order
                tile, offset = np.divmod(np.arange(len(users)), width // int(sizes[0]))
                offset = offset * int(sizes[0])
            else:
                users = users[np.argsort(-sizes, kind="stable")]  # largest first
                tile, offset = map(np.asarray, _pack(counts[users].tolist(), width))
            klass[users] = len(widths_of)
            place[users] = tile * width + offset
            widths_of.append(width)
            tiles_of.append(int(tile.max()) + 1)
        order = np.argsort(self.slots, kind="stable")  # examples user after user
        user = self.slots[order]
        rank = np.arange(self.batch) - (np.cumsum(counts) - counts)[user]  # rank in its user
        # classes in the order of their first examples: a batch whose classes are runs of rows
        # (a large user, then single records) needs no gather
        first = np.full(len(widths_of), self.batch, dtype=np.int64)
        np.minimum.at(first, klass[self.slots], np.arange(self.batch))
        ranks = np.argsort(first, kind="stable")
        sizes = np.array(widths_of, dtype=np.int64) * np.array(tiles_of, dtype=np.int64)
        starts = np.zeros(len(widths_of), dtype=np.int64)
        starts[ranks] = np.concatenate([[0], np.cumsum(sizes[ranks])[:-1]])
        total = int(sizes.sum())
        take = np.zeros(total, dtype=np.int64)
        owner = np.full(total, self.size, dtype=np.int64)
        at = starts[klass[user]] + place[user] + rank
        take[at], owner[at] = order, user
        classes = []
        for k in ranks.tolist():
            rows = owner[starts[k] : starts[k] + sizes[k]]
            classes.append(_Class(widths_of[k], tiles_of[k], int(starts[k]), rows, self.size))
        tiling = Tiling(classes, take, owner, self)
        self._tilings[key] = tiling
        return tiling


def _slowdown(rows: int) -> float:
    """How much slower a batched Gram of tiles of ``rows`` rows runs than a large matmul, per
    multiply-add (measured on a CPU core: about 6x for 2 rows, 3x for 8, 1.4x for 16; one row
    is a squared norm)."""
    return 1.0 if rows == 1 else (32 / min(32, rows)) ** 0.6  # 1 row: squared norms


def tiling_cost(classes: list, t: int, width: int) -> float:
    """Cost in multiply-adds (of a large matmul) of the ghost pair sums over ``classes``
    ((width, tiles, gathered) each) for rows of ``t`` positions and ``width`` = D + p + 1
    columns (both Grams)."""
    mw, total = MEMORY_WEIGHT, 0.0
    for w, tiles, gathered in classes:
        rows = tiles * w * t
        total += rows * w * t * (width * _slowdown(w * t) + 3 * mw) + CLASS_COST
        total += mw * rows * width if gathered else 0.0
    return total


def user_gradient_cost(classes: list, t: int, d: int, p: int) -> float:
    """Cost in multiply-adds (of a large matmul) of the per-user gradients (one user a tile,
    ``classes`` as in :func:`tiling_cost`), g^T a per tile, and their norms."""
    mw, total = MEMORY_WEIGHT, 0.0
    for w, tiles, gathered in classes:
        total += tiles * w * t * p * d * _slowdown(w * t) + mw * tiles * p * d + CLASS_COST
        total += mw * tiles * w * t * (d + p) if gathered else 0.0
    return total


def user_gradient_norms(
    a: torch.Tensor, g: torch.Tensor, tiling: Tiling, groups: Groups, ndt, bias: bool
) -> torch.Tensor:
    """||W_u||^2 [+ ||b_u||^2] from each user's gradient W_u = sum_r g_r a_r^T, one batched
    matmul per class of a tiling of one user a tile (the padding rows zeroed, both sides: a
    non-finite padding row must not reach the tile's user), (U,) in ``ndt``."""
    t = a.shape[1]
    a, g = tiling.take(a), tiling.take(g)
    total = torch.zeros(groups.size, dtype=ndt, device=g.device)
    for c in tiling.classes:
        rows = slice(c.start, c.start + c.tiles * c.width)
        a_c = a[rows].reshape(c.tiles, -1, a.shape[2])
        g_c = g[rows].reshape(c.tiles, -1, g.shape[2])
        if c.padded:  # gathered rows (a copy): zero the padding in place
            pad = c.padding(t, g.device)
            a_c, g_c = a_c.masked_fill_(pad, 0.0), g_c.masked_fill_(pad, 0.0)
        weight = torch.bmm(g_c.transpose(1, 2), a_c)  # (tiles, p, D)
        norms = torch.linalg.vector_norm(weight, dim=(1, 2), dtype=ndt).square()
        if bias:
            norms += torch.linalg.vector_norm(g_c.sum(1, dtype=ndt), dim=1).square()
        total.index_add_(0, c.owners(g.device), norms)
    return total


def _gram(x: torch.Tensor, ndt: torch.dtype) -> torch.Tensor:
    """x x^T per batch entry; :func:`privopt.torch._rule.gram` unless x is already ``ndt``."""
    return torch.bmm(x, x.transpose(1, 2)) if x.dtype == ndt else gram(x, ndt)


def pair_sums(
    a: torch.Tensor, g: torch.Tensor, tiling: Tiling, groups: Groups, ndt, bias: bool
) -> torch.Tensor:
    """sum over pairs (r, s) of rows of one user of (<a_r, a_s> [+ 1]) <g_r, g_s>, (U,) in
    ``ndt``, from a (B, T, D) and g (B, T, p) (module docstring)."""
    t = a.shape[1]
    a, g = tiling.take(a), tiling.take(g)  # (rows, T, D), (rows, T, p): one gather each
    classes, sums = tiling.classes, []
    for c in classes:
        if len(classes) > 1:
            rows = slice(c.start, c.start + c.tiles * c.width)
            a_c, g_c = a[rows], g[rows]
        else:
            a_c, g_c = a, g
        if c.width * t == 1:  # tiles of one row: the Grams are squared norms
            products = _squared(a_c.reshape(c.tiles, -1), ndt).view(-1, 1, 1)
            if bias:
                products += 1.0
            products *= _squared(g_c.reshape(c.tiles, -1), ndt).view(-1, 1, 1)
        else:
            products = _gram(a_c.reshape(c.tiles, -1, a.shape[2]), ndt)
            if bias:
                products += 1.0
            products *= _gram(g_c.reshape(c.tiles, -1, g.shape[2]), ndt)
        if not c.single:  # the pairs of rows of one user only (a select: no 0 * inf)
            products.masked_fill_(c.off_user(t, g.device), 0.0)
        sums.append(products.sum(2).view(-1))  # per row (tiles x width T)
    per_row = torch.cat(sums) if len(sums) > 1 else sums[0]
    per_row = per_row.view(-1, t).sum(1) if t > 1 else per_row
    total = torch.zeros(groups.size + 1, dtype=ndt, device=g.device)  # + the padding's slot
    return total.index_add_(0, tiling.users, per_row)[: groups.size].clamp_min(0)


def _squared(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.linalg.vector_norm(t.flatten(1), dim=1, dtype=dtype).square()


def ghost_choice(groups: Groups, t: int, width: int) -> tuple[tuple, float]:
    """(widths of the cheapest tiling, its cost) for rows of t positions, D + p = width."""
    costs = {k: tiling_cost(v, t, width) for k, v in groups.candidates().items()}
    best = min(costs, key=costs.__getitem__)
    return best, costs[best]


def _linear_costs(groups: Groups, b: int, t: int, d: int, p: int) -> dict[Any, float]:
    """Cost of each method: ``("tiles", widths)`` (ghost pair sums) for every candidate tiling,
    ``("users", widths)`` (per-user gradients, one user a tile), "materialised"."""
    costs: dict[Any, float] = {
        ("tiles", k): tiling_cost(v, t, d + p + 1) for k, v in groups.candidates().items()
    }
    if t > 1:  # with one position a user's gradient costs as much as its examples'
        for k, v in groups.user_candidates().items():
            costs[("users", k)] = user_gradient_cost(v, t, d, p)
    costs["materialised"] = b * t * p * d + 2 * MEMORY_WEIGHT * b * p * d + 2 * CLASS_COST
    return costs


def _linear(rule, groups: Groups, ndt: torch.dtype) -> torch.Tensor:
    weight, bias = "weight" in rule.params, "bias" in rule.params
    if not weight:
        rule._bias = rule.g.sum(1, dtype=ndt)  # reused by the rule's sum
        return _squared(groups.segment(rule._bias, ndt), ndt)
    b, t, d = rule.a.shape
    costs = _linear_costs(groups, b, t, d, rule.g.shape[2])
    method = min(costs, key=costs.__getitem__)
    if method[0] == "tiles":
        return pair_sums(rule.a, rule.g, groups.tiling(method[1]), groups, ndt, bias)
    if method[0] == "users":
        tiling = groups.tiling(method[1], shared=False)
        return user_gradient_norms(rule.a, rule.g, tiling, groups, ndt, bias)
    if t == 1:  # outer products (a bmm with an inner dimension of 1 is far slower)
        weight = rule.g.transpose(1, 2) * rule.a  # (B, p, D)
    else:
        weight = torch.bmm(rule.g.transpose(1, 2), rule.a)
    total = _squared(groups.segment(weight, ndt), ndt)
    if bias:
        rule._bias = rule.g.sum(1, dtype=ndt)  # reused by the rule's sum
        total += _squared(groups.segment(rule._bias, ndt), ndt)
    return total


def _embedding(rule, groups: Groups, ndt: torch.dtype) -> torch.Tensor:
    """The rule's (example, row) segment sums with the example replaced by its user."""
    n = rule.ids.shape[0]
    rows_per = rule.module.num_embeddings
    owner = groups.index[rule.example]
    keys = owner * rows_per + rule.ids
    ordered, order = torch.sort(keys)
    new = torch.ones(n, dtype=torch.long, device=keys.device)
    new[1:] = (ordered[1:] != ordered[:-1]).long()
    segment = torch.cumsum(new, 0) - 1
    of_token = torch.empty_like(segment).scatter_(0, order, segment)
    rows = torch.zeros(n, rule.g.shape[1], dtype=ndt, device=rule.g.device)
    rows.index_add_(0, of_token, rule.g.to(ndt))
    user = torch.zeros(n, dtype=torch.long, device=keys.device)
    user.scatter_(0, segment, ordered // rows_per)
    total = torch.zeros(groups.size, dtype=ndt, device=rule.g.device)
    return total.index_add_(0, user, _squared(rows, ndt))


def group_squared_norms(rule, groups: Groups, ndt: torch.dtype) -> torch.Tensor:
    """||W_u||^2 over the rule's parameters, (U,) in ``ndt`` (see the module)."""
    from privopt.torch._conv import ConvRule
    from privopt.torch._layers import _Embedding, _Linear
    from privopt.torch._user_conv import conv_group_norms

    if isinstance(rule, _Linear):
        return _linear(rule, groups, ndt)
    if isinstance(rule, _Embedding):
        return _embedding(rule, groups, ndt)
    if isinstance(rule, ConvRule):
        return conv_group_norms(rule, groups, ndt)
    total = torch.zeros(groups.size, dtype=ndt, device=groups.index.device)
    for value in per_example(rule).values():
        total += _squared(groups.segment(value, norm_dtype(value.dtype)), ndt)
    return total


def per_example(rule) -> dict[str, torch.Tensor]:
    """The rule's per-example gradients, or a refusal naming the layer."""
    try:
        return rule.per_example()
    except NotImplementedError:
        raise ValueError(
            f"{type(rule.module).__name__}: privopt.torch has no per-example gradients for "
            "this layer, so it cannot sum them per user exactly; user-level clipping "
            "(users=...) is refused for it."
        ) from None
