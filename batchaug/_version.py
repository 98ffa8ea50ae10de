"""The package version, alone in a module so that any module can read it without a circle."""
__version__ = "0.1.0"
