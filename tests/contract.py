"""The shared transform contract: every transform in CASES gets the common checks.

Adding a transform means adding one entry to CASES.
"""
# --- basic transform cases ---
# --- warp transform cases ---
