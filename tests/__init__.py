"""batchaug's tests. One package per part of the library (see each __init__.py); shared
settings in conftest.py, the transform contract and its helpers in tests/contract/."""
