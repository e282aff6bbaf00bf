"""The package version, importable from anywhere inside the package without importing its front door."""

__version__ = "0.1.0"
