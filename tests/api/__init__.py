"""The public surface: exported names, argument types, where the exceptions live, and the import graph (no circle)."""
