"""Runs every contract check (tests/contract.py) on every transform case, uint8 and float32."""
import pytest

from contract import CASE_CHECKS, CASES, CHECKS, DTYPES


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.replace("check_", ""))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_contract(case, check, dtype, device):
    check(case, dtype, device)


@pytest.mark.parametrize("check", CASE_CHECKS, ids=lambda c: c.__name__.replace("check_", ""))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_contract_once_per_case(case, check):
    """Gradients, compile, export with a dynamic batch and every input dtype: CPU, once a case."""
    check(case)
