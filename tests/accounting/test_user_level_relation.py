"""The privacy unit on the ledger and the report: a user-level ledger names its relation
"user-level zero-out" / "user-level replace-one" and says the unit is the user, with the same
numbers as the record-level ledger of the same events; record-level reports are unchanged."""

from __future__ import annotations

import json

import pytest

from privopt.accounting import GaussianEvent, Neighbouring, PrivacyLedger, PrivacyUnit


def _ledgers(relation: str):
    record, user = PrivacyLedger(relation), PrivacyLedger(relation, unit="user")
    for ledger in (record, user):
        ledger.record(GaussianEvent(sensitivity=1.0, std=2.0, count=10, label="step"))
    return record, user


@pytest.mark.parametrize("relation", ["zero-out", "replace-one"])
def test_user_level_report_names_the_user_and_keeps_the_numbers(relation):
    record, user = _ledgers(relation)
    a, b = record.report(1e-5), user.report(1e-5)
    assert b.neighbouring == f"user-level {relation}" and b.privacy_unit == "user"
    assert "all the records of one user" in b.neighbouring_description
    assert "number of users N" in b.neighbouring_description
    assert (a.epsilon, a.rho, a.mu, a.accountant) == (b.epsilon, b.rho, b.mu, b.accountant)
    assert json.loads(b.to_json())["privacy_unit"] == "user"
    assert "all of one person's records" in b.summary()
    assert "privacy unit" in str(b) and "user-level" in str(b)


def test_record_level_report_is_unchanged():
    record, _ = _ledgers("zero-out")
    report = record.report(1e-5)
    assert report.neighbouring == "zero-out" and report.privacy_unit == "record"
    assert report.neighbouring_description == Neighbouring.ZERO_OUT.description
    assert "privacy unit" not in str(report)
    assert "one person's record is blanked out" in report.summary()


def test_units_do_not_mix_and_bad_units_are_refused():
    record, user = _ledgers("zero-out")
    with pytest.raises(ValueError, match="privacy unit is the user"):
        record.extend(user)
    with pytest.raises(ValueError, match="'record' or 'user'"):
        PrivacyLedger("zero-out", unit="household")
    assert PrivacyUnit.parse("USER") is PrivacyUnit.USER
    assert PrivacyUnit.USER.relation_name("replace-one") == "user-level replace-one"
