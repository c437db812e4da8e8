"""DP-SGD accounting through dp_accounting: golden values (peers.md §3.1–3.2) and calibration."""

import pytest

from privopt.accounting import calibrate_dpsgd_noise, dpsgd_epsilon


def test_golden_dpsgd_rdp():
    assert dpsgd_epsilon(1.0, 0.01, 1000, 1e-5, accountant="rdp") == pytest.approx(
        2.10137, abs=1e-3
    )
    # and to the digit of dp_accounting's default orders
    assert dpsgd_epsilon(1.0, 0.01, 1000, 1e-5, accountant="rdp") == pytest.approx(
        2.101366525420273, rel=1e-9
    )


def test_golden_dpsgd_pld():
    assert dpsgd_epsilon(1.0, 0.01, 1000, 1e-5, accountant="pld") == pytest.approx(
        1.82824, abs=1e-3
    )


def test_golden_opacus_config():
    # Opacus test configuration sigma=1.5, q=0.04, T=2250 (peers.md §3.2).
    assert dpsgd_epsilon(1.5, 0.04, 2250, 1e-5, "rdp") == pytest.approx(7.329335, abs=1e-3)


def test_pld_is_tighter_than_rdp():
    assert dpsgd_epsilon(1.0, 0.01, 1000, 1e-5, "pld") < dpsgd_epsilon(1.0, 0.01, 1000, 1e-5, "rdp")


def test_calibration_rdp_golden_and_round_trip():
    sigma = calibrate_dpsgd_noise(1.0, 1e-5, 0.01, 1000, accountant="rdp")
    assert sigma == pytest.approx(1.513123, rel=1e-4)
    assert dpsgd_epsilon(sigma, 0.01, 1000, 1e-5, "rdp") <= 1.0


def test_calibration_pld_round_trip():
    sigma = calibrate_dpsgd_noise(2.0, 1e-5, 0.05, 100, accountant="pld", rtol=1e-3)
    achieved = dpsgd_epsilon(sigma, 0.05, 100, 1e-5, "pld")
    assert achieved <= 2.0
    assert achieved == pytest.approx(2.0, rel=1e-2)


@pytest.mark.slow
def test_calibration_pld_golden():
    sigma = calibrate_dpsgd_noise(1.0, 1e-5, 0.01, 1000, accountant="pld")
    assert sigma == pytest.approx(1.414631, rel=1e-4)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"noise_multiplier": 0.0}, "noise_multiplier"),
        ({"sample_rate": 0.0}, "sample_rate"),
        ({"sample_rate": 1.5}, "sample_rate"),
        ({"sample_rate": float("nan")}, "sample_rate"),
        ({"steps": -1}, "steps"),
        ({"steps": 0}, "steps"),
        ({"steps": 2.5}, "steps"),
        ({"delta": 1.0}, "delta"),
        ({"accountant": "moments"}, "accountant"),
    ],
)
def test_bad_input(kwargs, name):
    args = {"noise_multiplier": 1.0, "sample_rate": 0.01, "steps": 10, "delta": 1e-5}
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        dpsgd_epsilon(**args)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_calibration_below_one_searches_toward_zero_without_leaving_the_positive_axis(accountant):
    # Large epsilon, tiny sample rate: the answer is below the starting point 1.0. The bracket
    # used to step linearly past 0 and fail with "noise_multiplier > 0, got 0.0".
    q, steps = 256 / 900_000, 17_579
    sigma = calibrate_dpsgd_noise(4.0, 1e-6, q, steps, accountant=accountant, rtol=1e-4)
    assert 0.3 < sigma < 1.0
    achieved = dpsgd_epsilon(sigma, q, steps, 1e-6, accountant)
    assert achieved <= 4.0
    assert achieved == pytest.approx(4.0, rel=1e-2)


def test_dp_accounting_excluded_order_notices_are_dropped_and_other_records_pass():
    import logging
    import math

    from privopt.accounting import subsampled

    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    absl = logging.getLogger("absl")
    handler = Collect(level=logging.DEBUG)
    absl.addHandler(handler)
    notice = next(f for f in absl.filters if isinstance(f, subsampled._ExcludedOrderNotice))
    try:
        # sigma = 1, q = 0.064: dp_accounting's series for orders near 1 do not converge
        absl.removeFilter(notice)
        subsampled.dpsgd_epsilon(1.0, 0.064451, 50, 1e-6, accountant="rdp")
        unfiltered = [m for m in seen if "Excluding this order" in m]
        seen.clear()
        absl.addFilter(notice)
        epsilon = subsampled.dpsgd_epsilon(1.0, 0.064452, 50, 1e-6, accountant="rdp")
        absl.warning("another notice")
    finally:
        absl.removeHandler(handler)
        if notice not in absl.filters:
            absl.addFilter(notice)
    assert unfiltered  # the case does produce the notices
    assert 0 < epsilon < math.inf
    assert not any("Excluding this order" in message for message in seen)
    assert "another notice" in seen
