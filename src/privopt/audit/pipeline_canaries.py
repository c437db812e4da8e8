"""White-box canaries inside each estimator's own pipeline (issue 26, item 4).

One-run auditing (Steinke, Nasr & Jagielski 2023, Theorem 3.1; the f-DP test of Mahloujifar,
Melis & Chaudhuri 2024, :mod:`privopt.audit.one_run`) with m canaries per fit, each included by
a fair coin, scored on the **releases** the estimator's pipeline makes (the noisy clipped sums
or statistics, every one of which its accounting covers), not on the final model. Input
canaries scored on the model (:mod:`privopt.audit.input_one_run`) see only what survives
averaging, the solve and the private preprocessing: for DP-SGD-Gradient behind private quantile
bounds a single canary was invisible even with the noise / 100.

**Where the canaries enter** (monkeypatches of module functions, inside :class:`CanaryTap` only;
no algorithm code is edited). The audit's data leave ``m`` directions of the transformed rows
unused: their raw columns are 0 for every row, so the fit's rows ``Z`` span a subspace and the
canary directions ``u_1..u_m`` are an orthonormal basis of (part of) its orthogonal complement,
computed from ``Z`` by an SVD. Every other record's contribution to a linear statistic
(``z * scalar``: gradients, ``Z^T t``, ``Z^T Z``) is orthogonal to every ``u_i``, and so are the
other canaries', so ``<release, u_i>`` is canary i's contribution plus isotropic noise.

* Training core (DP-SGD, DP-SSGD, DP-AMBSSGD, DP-FTRL-Σ, DP-SGD-Gradient):
  :func:`privopt.training.execute` and :func:`privopt.training.iterate_rounds` are wrapped. The
  first ``m`` rows of the fit are canary slots: their own rows are left out of every clipped
  sum and replaced by the canary record's contribution, **computed by the fit's gradient model
  with the step's clip** (``model.batch_gradient_sum``: an oversize record ``(u_i, -/+1e6)`` for
  regression, ``(u_i, -/+1)`` with the hinge loss for classification, clipped to ``G_t u_i``),
  whenever the pipeline's own schedule puts the slot in the batch. The clip source's noise is
  the pipeline's; the release read is ``<sum + noise, u_i> / G_t``. The single-row kernel is
  switched off for the audit (:mod:`privopt.training.kernels` computes the same iteration to
  1e-12), so every step goes through the clip source and the gradient model.
* AdaSSP and noisy Newton: canary rows ``(2 R u_i, +-2 T)`` are appended to the transformed rows
  handed to :func:`~privopt.releases.adassp.adassp` /
  :func:`~privopt.releases.newton.dp_newton`, whose own clipping brings them to ``(R u_i, +-T)``;
  the noisy ``Z^T t``, ``Z^T Z`` and gradients are read from the release function (AdaSSP's
  ``info``; for noisy Newton its exact statistics and its ``gaussian_noise`` draws, paired in
  order). The estimator's blockwise Newton path is redirected to the equivalent in-memory one
  (``run_newton``, the same releases up to summation order).
* Output perturbation (DP-SGD-Output): a statistic canary at the release, ``+-Delta / 2`` along
  ``u_i`` added to the SGD average before its noise (equivalently after: the noise is additive),
  with ``Delta`` recomputed from Theorem 7's bound
  (:func:`privopt.theory.holder_stability.uas_bound_for_loss`) and the public schedule. A real
  record moves the average by about T / n visits where Delta allows a Chernoff count, so only a
  canary at Delta has power; this checks the noise and calibration against the stated Delta,
  not Delta's proof.

**Neighbours.** "Out" is the null record (zero-out: no contribution) or the same record with the
opposite target or label (replace-one: ``-G_t u_i``, the full ``2 G_t``), under the relation
the fit's report states. Canaries that enter only some releases (the slot's original row still
feeds the private bounds and DP-STAT's counts; the Gram is unchanged by a replace-one canary)
are partial records: each release's shift is within its sensitivity and the releases compose,
so the canary's privacy loss is at most the claim's.

**Scores** (higher = "in"): the log-likelihood ratio of "in" against "out" from the releases,
summed over the fit's releases, with the claimed noise (public) and unit signal at the clip:

* amplified claims (Poisson or uniform sampling, shuffling: the batches are secret): per step
  ``log(1 - q + q exp((a x - a^2/2) / s^2))`` (minus the same for the opposite canary under
  replace-one), q the sampling rate; a shuffled pass (each record exactly once, at a secret
  step): ``log mean_t exp((a x_t - a^2/2) / s^2)``. The participation pattern is not used,
  and s is the noise scale estimated from the releases (their median absolute deviation over
  every step and direction), which is the claimed one for a correct run;
* other claims (the rounds of DP-AMBSSGD, DP-FTRL-Σ's one pass, full-batch statistics): the
  Gaussian LLR with the canary's known pattern, whitened by the mechanism's noise correlation
  (``B B^T``, :meth:`~privopt.noise.Mechanism.decoder_matrix`: DP-FTRL-Σ's tree increments,
  whose whitened noise was checked to have unit variance). The
  accounting of these holds for every pattern, so knowing it is allowed.

The claim is the fit's reported epsilon (preprocessing and all), under the relation it reports.
Fits are pooled (disjoint canaries, independent coins and noise), which keeps each canary's
guarantee. Claims that rest on amplification (Poisson DP-SGD, DP-SSGD, DP-SGD-Gradient) are
tested with Steinke, Nasr & Jagielski's (epsilon, delta) bound, the others (Gaussian
compositions) against the Gaussian trade-off curve through the claim (Mahloujifar et al.).

The planted bug of the controls is :func:`~privopt.audit.input_one_run.scaled_noise`: every
Gaussian draw at ``factor`` times its calibrated std (noise / 3; a halved sensitivity is
noise / 2), the calibration and the report unchanged.
"""

from __future__ import annotations

import contextlib
import math
import sys
from dataclasses import dataclass, field, replace
from typing import Any
from unittest import mock

import numpy as np
from scipy.linalg import cholesky, solve_triangular
from scipy.special import logsumexp

__all__ = ["CanaryTap", "canary_directions"]

#: an oversize target: the clip, not the data, sets the canary's contribution
_BIG_TARGET = 1e6


def canary_directions(Z: np.ndarray, wanted: int) -> np.ndarray:
    """(p, m) orthonormal directions orthogonal to every row of ``Z``, m <= ``wanted``: the
    axes of ``wanted`` all-zero columns if there are so many, else a basis of the rows'
    orthogonal complement (SVD)."""
    Z = np.asarray(Z, dtype=float)
    p = Z.shape[1]
    if Z.shape[0] == 0:
        return np.eye(p)[:, :wanted]
    zero = np.flatnonzero(~np.any(Z, axis=0))
    if zero.size >= wanted:  # columns no row uses: coordinate axes (a Gram entry is one draw)
        return np.eye(p)[:, zero[:wanted]]
    _, s, vt = np.linalg.svd(Z, full_matrices=Z.shape[0] < p)  # every right vector, cheaply
    tol = max(Z.shape) * np.finfo(float).eps * (s[0] if s.size else 0.0) * 10.0
    rank = int(np.count_nonzero(s > tol))
    basis = vt[rank:].T
    return basis[:, :wanted]


_FACTORS: dict[tuple[str, int], np.ndarray] = {}


def _describe(value: Any, depth: int = 0) -> str:
    """A value's description from its type and fields (recursively), without addresses."""
    state = getattr(value, "__dict__", None)
    if state is None or depth > 4:
        return repr(value)
    fields = ", ".join(f"{k}={_describe(v, depth + 1)}" for k, v in sorted(state.items()))
    return f"{type(value).__name__}({fields})"


def _noise_factor(mechanism: Any, steps: int) -> np.ndarray:
    """Cholesky factor of ``B B^T`` (the steps' noise correlation), cached per mechanism
    description and length: a public quantity that every fit of an audit shares."""
    key = (_describe(mechanism), steps)
    if " at 0x" in key[0]:
        b = mechanism.decoder_matrix(steps)
        return cholesky(b @ b.T, lower=True)
    if key not in _FACTORS:
        b = mechanism.decoder_matrix(steps)
        _FACTORS.clear()  # one length at a time: T x T floats
        _FACTORS[key] = cholesky(b @ b.T, lower=True)
    return _FACTORS[key]


def _slot_signs(coins: np.ndarray, relation: str) -> np.ndarray:
    """+1 for an included canary; -1 (replace-one: the opposite record) or 0 (zero-out)."""
    return np.where(coins, 1.0, -1.0 if relation == "replace-one" else 0.0)


def _gaussian_llr(x: np.ndarray, a: np.ndarray, var: np.ndarray, relation: str) -> np.ndarray:
    """Per-canary LLR of mean +a against -a (replace-one) or 0 (zero-out), variance ``var``."""
    if relation == "replace-one":
        return 2.0 * a * x / var
    return (a * x - 0.5 * a * a) / var


@dataclass
class _CoreRun:
    """What the wrapped training loop saw of one ``execute``: public projections only."""

    plan: Any
    relation: str
    directions: np.ndarray
    slots: int
    released: list[np.ndarray] = field(default_factory=list)  # <r_t, u_i> / G_t per step
    pattern: list[np.ndarray] = field(default_factory=list)  # slots in step t's batch
    largest: float = 0.0  # largest canary contribution / G_t (must be <= 1)


class _CanaryRows:
    """Proxy of :class:`~privopt.training.thresholds.RowData`: slots replaced by canaries."""

    def __init__(
        self, inner: Any, run: _CoreRun, canaries: tuple, wanted: int, coins: np.ndarray
    ) -> None:
        self.inner, self.run, self.canaries, self.wanted = inner, run, canaries, wanted
        self.signs = _slot_signs(coins[: run.slots], run.relation)
        self.pending: np.ndarray | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def gradient_sum(self, w, rows, clip, count):
        rows = np.asarray(rows, dtype=np.intp).ravel()
        fill = rows[rows >= self.wanted]  # the first `wanted` rows never contribute themselves
        if fill.size:
            total, fraction = self.inner.gradient_sum(w, fill, clip, int(fill.size))
        else:
            total, fraction = np.zeros_like(w), 0.0
        m = self.run.slots
        present = np.zeros(m, dtype=bool)
        slots = rows[rows < m]
        present[slots] = True
        total = np.array(total, dtype=float)
        model = self.inner.model
        for sign, X, y, prepared in self.canaries:
            chosen = slots[self.signs[slots] == sign]
            if chosen.size:
                part, _ = model.batch_gradient_sum(w, X, y, chosen, clip, prepared)
                if clip:
                    sizes = np.abs(self.run.directions.T @ part) / clip
                    self.run.largest = max(self.run.largest, float(np.max(sizes)))
                total = total + part
        self.run.pattern.append(present)
        self.pending = total
        return total, fraction


class _TappedSource:
    """Proxy of a clip source: records ``<sum + noise, u_i> / G_t`` after each step's noise."""

    def __init__(self, inner: Any, rows: _CanaryRows) -> None:
        self.inner, self.rows = inner, rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def threshold(self, step, w, data, stat_rows):
        return self.inner.threshold(step, w, data, stat_rows)

    def noise(self, stream, clip):
        noise = self.inner.noise(stream, clip)
        release = self.rows.pending + noise
        scale = float(clip) if clip else 1.0
        self.rows.run.released.append(self.rows.run.directions.T @ release / scale)
        return noise

    def after_step(self, step, rows, fraction):
        return self.inner.after_step(step, rows, fraction)


class CanaryTap:
    """Context manager: canaries ``coins`` (True = in) injected into every release path of a fit.

    ``kind`` is ``"regression"`` or ``"classification"`` (how a canary record forces its
    gradient to the clip); after the fit, :meth:`scores` gives one LLR score per canary and
    :attr:`used` the number of canaries the fit's rows left room for.
    """

    def __init__(self, coins: np.ndarray, kind: str) -> None:
        self.coins = np.asarray(coins, dtype=bool)
        self.wanted = self.coins.size
        self.kind = kind
        self.core: list[_CoreRun] = []
        self.evidence: list[np.ndarray] = []  # per-canary LLRs of non-core releases
        self.used: int | None = None
        self._stack: contextlib.ExitStack | None = None

    # -- bookkeeping ---------------------------------------------------------------------------
    def _use(self, m: int) -> int:
        self.used = m if self.used is None else min(self.used, m)
        return self.used

    def _add(self, llr: np.ndarray) -> None:
        self.evidence.append(np.asarray(llr, dtype=float))

    def _canary_records(self, directions: np.ndarray, sign: float) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``u_i`` and targets whose clipped gradient is ``sign * G u_i``."""
        X = np.ascontiguousarray(directions.T)
        if self.kind == "classification":  # hinge: gradient -y z while the margin is below 1
            return X, np.full(X.shape[0], -sign)
        return X, np.full(X.shape[0], -sign * _BIG_TARGET)  # residual <z, w> - t ~ sign * 1e6

    # -- the training core -----------------------------------------------------------------------
    def _execute(self, original):
        tap = self

        def execute(plan, model, update, X, y, **kwargs):
            from privopt.training.gradients import as_model

            model = as_model(model)
            ledger = kwargs["ledger"]
            X = np.asarray(X)
            directions = canary_directions(X[tap.wanted :], tap.wanted)
            m = tap._use(directions.shape[1])
            run = _CoreRun(plan, ledger.neighbouring.value, directions[:, :m], m)
            tap.core.append(run)
            signs = _slot_signs(tap.coins[:m], run.relation)
            canaries = []
            for sign in (1.0, -1.0):
                if np.any(signs == sign):
                    Xc, yc = tap._canary_records(run.directions, sign)
                    canaries.append((sign, Xc, yc, model.prepare(Xc, yc)))
            tap._pending = (run, tuple(canaries))
            try:
                return original(plan, model, update, X, y, **kwargs)
            finally:
                tap._pending = None

        return execute

    def _iterate_rounds(self, original):
        tap = self

        def iterate_rounds(data, schedule, steps, stream, source, *args, **kwargs):
            pending = getattr(tap, "_pending", None)
            if pending is None:  # a loop outside a wrapped execute (not a fit's release)
                return original(data, schedule, steps, stream, source, *args, **kwargs)
            run, canaries = pending
            rows = _CanaryRows(data, run, canaries, tap.wanted, tap.coins)
            return original(
                rows, schedule, steps, stream, _TappedSource(source, rows), *args, **kwargs
            )

        return iterate_rounds

    def _core_scores(self, run: _CoreRun) -> np.ndarray:
        """Per-canary LLR of one training run (module docstring)."""
        from privopt.accounting.events import GaussianEvent
        from privopt.training.batching import FixedBatches, PoissonSampling

        plan, m = run.plan, run.slots
        x = np.vstack(run.released) if run.released else np.zeros((0, m))
        s2 = (plan.noise_std / plan.clip_norm) ** 2
        secret = plan.participation is None or not isinstance(plan.event(), GaussianEvent)
        if secret:
            # the noise scale estimated from the releases themselves (a robust spread over
            # every step and direction: a canary touches few steps), a function of the output
            # like the rest of the score; it equals the claimed scale for a correct run and
            # sharpens the score when the noise is smaller than claimed
            spread = 1.4826 * float(np.median(np.abs(x - np.median(x)))) if x.size else 0.0
            if spread > 0.0:
                s2 = spread**2
            n = plan.num_records
            if isinstance(plan.batches, FixedBatches):  # a shuffled pass: each record once
                up = logsumexp((x - 0.5) / s2, axis=0)
                if run.relation == "replace-one":
                    return up - logsumexp((-x - 0.5) / s2, axis=0)
                return up - math.log(x.shape[0])
            if isinstance(plan.batches, PoissonSampling):
                q = plan.batches.sample_rate
            else:
                q = plan.batches.rows_per_step / n
            low = math.log1p(-q) if q < 1 else -np.inf
            up = np.logaddexp(low, math.log(q) + (x - 0.5) / s2).sum(axis=0)
            if run.relation == "replace-one":
                return up - np.logaddexp(low, math.log(q) + (-x - 0.5) / s2).sum(axis=0)
            return up
        g = np.vstack(run.pattern).astype(float)  # (T, m): unit signal where the slot took part
        if plan.mechanism.name != "independent":
            lower = _noise_factor(plan.mechanism, x.shape[0])
            g = solve_triangular(lower, g, lower=True)
            x = solve_triangular(lower, x, lower=True)
        gx = np.sum(g * x, axis=0) / s2
        gg = np.sum(g * g, axis=0) / s2
        if run.relation == "replace-one":
            return 2.0 * gx
        return gx - 0.5 * gg

    # -- AdaSSP --------------------------------------------------------------------------------
    def _adassp(self, original):
        tap = self

        def adassp(Z, t, *, row_bound, target_bound, ledger, **kwargs):
            relation = ledger.neighbouring.value
            R, T = row_bound, target_bound
            U = canary_directions(Z, 2 * tap.wanted)
            axes = bool(np.all(np.isclose(np.abs(U).max(axis=0), 1.0)))
            if relation == "replace-one" and axes and U.shape[1] >= 2:
                # paired canary: "in" (R u_i, T), "out" (R v_i, -T). The Gram moves by
                # R^2 (u u^T - v v^T), its whole replace-one sensitivity sqrt(2) R^2, and
                # Z^T t by R T (u + v); a pair (R u, +-T) would leave the Gram unchanged
                m = tap._use(U.shape[1] // 2)
                u, v = U[:, 0 : 2 * m : 2], U[:, 1 : 2 * m : 2]
                coins = tap.coins[:m]
                Zc = 2.0 * R * np.where(coins[None, :], u, v).T  # clipped by AdaSSP to R
                tc = 2.0 * T * np.where(coins, 1.0, -1.0)  # clipped to +-T
                w, info = original(
                    np.vstack([Z, Zc]), np.concatenate([t, tc]), row_bound=R,
                    target_bound=T, ledger=ledger, **kwargs,
                )  # fmt: skip
                moment, gram = info["moment"], info["gram"]
                xm = u.T @ moment + v.T @ moment
                tap._add(R * T * xm / info["moment_std"] ** 2)
                xg = np.einsum("pi,pq,qi->i", u, gram, u) - np.einsum("pi,pq,qi->i", v, gram, v)
                tap._add(R * R * xg / info["gram_std"] ** 2)
                return w, info
            m = tap._use(U.shape[1])
            U = U[:, :m]
            signs = _slot_signs(tap.coins[:m], relation)
            live = signs != 0
            Zc = 2.0 * R * U.T[live]  # clipped by AdaSSP to R u_i
            tc = 2.0 * T * signs[live]  # clipped to +-T
            w, info = original(
                np.vstack([Z, Zc]), np.concatenate([t, tc]), row_bound=R, target_bound=T,
                ledger=ledger, **kwargs,
            )  # fmt: skip
            x = U.T @ info["moment"]
            tap._add(_gaussian_llr(x, np.full(m, R * T), info["moment_std"] ** 2, relation))
            if relation == "zero-out":  # the Gram moves too: R^2 u u^T for an included canary
                xg = np.einsum("pi,pq,qi->i", U, info["gram"], U)
                var = info["gram_std"] ** 2 * (2.0 - np.sum(U**4, axis=0))
                tap._add(_gaussian_llr(xg, np.full(m, R * R), var, relation))
            return w, info

        return adassp

    # -- noisy Newton --------------------------------------------------------------------------
    def _newton(self, original_newton, newton_module):
        tap = self

        def dp_newton(Z, t, *, row_bound, target_bound, ledger, **kwargs):
            relation = ledger.neighbouring.value
            U = canary_directions(Z, tap.wanted)
            m = tap._use(U.shape[1])
            U = U[:, :m]
            signs = _slot_signs(tap.coins[:m], relation)
            live = signs != 0
            Zc = 2.0 * row_bound * U.T[live]
            tc = -2.0 * target_bound * signs[live]  # residual <z, w> - t ~ sign * T: at the clip
            record: dict[str, Any] = {"draws": [], "gradients": [], "clips": []}
            original_draw = newton_module.gaussian_noise
            original_release = newton_module.newton_release

            def draw(rng, std, size=None):
                out = original_draw(rng, std, size)
                record["draws"].append((float(std), np.array(out, dtype=float)))
                return out

            class Statistics:
                def __init__(self, inner):
                    self.inner = inner

                def __getattr__(self, name):
                    return getattr(self.inner, name)

                def clipped_gradient(self, w, rho):
                    out = self.inner.clipped_gradient(w, rho)
                    record["gradients"].append(np.array(out, dtype=float))
                    record["clips"].append(float(rho))
                    return out

            def release(gram_upper, statistics, **kw):
                record["gram"] = np.triu(np.asarray(gram_upper, dtype=float))
                return original_release(gram_upper, Statistics(statistics), **kw)

            with (
                mock.patch.object(newton_module, "gaussian_noise", draw),
                mock.patch.object(newton_module, "newton_release", release),
            ):
                w, info = original_newton(
                    np.vstack([Z, Zc]),
                    np.concatenate([t, tc]),
                    row_bound=row_bound,
                    target_bound=target_bound,
                    ledger=ledger,
                    **kwargs,
                )
            R = row_bound
            draws = record["draws"]
            p = Z.shape[1]
            gram_std, gram_noise = draws[0]
            noise = np.zeros((p, p))
            noise[np.triu_indices(p)] = gram_noise
            gram = record["gram"] + noise
            gram = gram + np.triu(gram, 1).T
            if relation == "zero-out":
                xg = np.einsum("pi,pq,qi->i", U, gram, U)
                var = gram_std**2 * (2.0 - np.sum(U**4, axis=0))
                tap._add(_gaussian_llr(xg, np.full(m, R * R), var, relation))
            for (std, noise_k), exact, rho in zip(
                draws[1:], record["gradients"], record["clips"], strict=True
            ):
                x = U.T @ (exact + noise_k)
                tap._add(_gaussian_llr(x, np.full(m, R * rho), std**2, relation))
            return w, info

        return dp_newton

    # -- output perturbation -------------------------------------------------------------------
    def _output(self, original):
        tap = self

        def dp_sgd_output(X, y, loss, **kwargs):
            from privopt.theory.holder_stability import uas_bound_for_loss

            fit = original(X, y, loss, **kwargs)
            relation = fit.report.neighbouring
            U = canary_directions(X, tap.wanted)
            m = tap._use(U.shape[1])
            U = U[:, :m]
            n = np.asarray(X).shape[0]
            delta_sens = uas_bound_for_loss(
                fit.info["loss"] if isinstance(loss, str) else loss,
                x_bound=kwargs["x_bound"],
                y_bound=kwargs.get("y_bound"),
                radius=kwargs.get("radius"),
                eta=kwargs["eta"],
                steps=kwargs["steps"],
                n=n,
                failure_probability=kwargs["delta"] / 2.0,
                tight=True,
            )
            signs = _slot_signs(tap.coins[:m], relation)
            shift = (delta_sens / 2.0 if relation == "replace-one" else delta_sens) * signs
            coef = fit.coef + U @ shift
            x = U.T @ coef
            a = np.full(m, delta_sens / 2.0 if relation == "replace-one" else delta_sens)
            tap._add(_gaussian_llr(x, a, fit.info["sigma"] ** 2, relation))
            return replace(fit, coef=coef)

        return dp_sgd_output

    # -- context -------------------------------------------------------------------------------
    def __enter__(self) -> CanaryTap:
        import privopt.estimators._holder as holder
        import privopt.estimators._regression_methods as methods
        import privopt.estimators.linear_regression as linear_regression
        import privopt.releases.adassp  # noqa: F401
        import privopt.releases.newton as newton_module
        from privopt.training import loop

        stack = contextlib.ExitStack()
        stack.__enter__()
        self._stack = stack
        self._pending = None
        originals = {"execute": loop.execute, "iterate_rounds": loop.iterate_rounds}
        wrapped = {
            "execute": self._execute(loop.execute),
            "iterate_rounds": self._iterate_rounds(loop.iterate_rounds),
        }
        for name, module in list(sys.modules.items()):
            if not name.startswith("privopt") or module is None:
                continue
            for attr, original in originals.items():
                if getattr(module, attr, None) is original:
                    stack.enter_context(mock.patch.object(module, attr, wrapped[attr]))
        # every step through the clip source and the gradient model (the kernel is the same
        # iteration on floats, tested equal to 1e-12)
        stack.enter_context(mock.patch.object(loop, "single_row_rule", lambda *a, **k: None))
        stack.enter_context(mock.patch.object(methods, "adassp", self._adassp(methods.adassp)))
        stack.enter_context(
            mock.patch.object(methods, "dp_newton", self._newton(methods.dp_newton, newton_module))
        )

        def rows_in_memory(est, X, y, bounds, mu, rng, ledger, n_public):
            Z, t = bounds.transform(X, y)
            return methods.run_newton(est, Z, t, bounds, mu, rng, ledger, n_public)

        stack.enter_context(mock.patch.object(linear_regression, "run_newton_rows", rows_in_memory))
        stack.enter_context(
            mock.patch.object(holder, "dp_sgd_output", self._output(holder.dp_sgd_output))
        )
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._stack is not None
        self._stack.__exit__(*exc)
        self._stack = None

    def scores(self) -> np.ndarray:
        """One score per used canary: the sum of its LLRs over every tapped release."""
        m = self.used or 0
        total = np.zeros(m)
        for run in self.core:
            total += self._core_scores(run)[:m]
        for llr in self.evidence:
            total += llr[:m]
        return total
