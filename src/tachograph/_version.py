"""The one version string of tachograph (pyproject reads it from here)."""

__version__ = "0.1.0"
