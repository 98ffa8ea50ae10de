"""Runs every contract check (tests/contract.py) on every transform case, uint8 and float32."""
import pytest

from contract import CASES, CHECKS, DTYPES


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.replace("check_", ""))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_contract(case, check, dtype, device):
    check(case, dtype, device)
