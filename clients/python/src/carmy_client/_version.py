"""The package version (read by the build backend from this file)."""

__version__ = "0.1.0"
