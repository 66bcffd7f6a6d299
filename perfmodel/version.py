"""The package's version, at the bottom of the layers: the CLI, the sweep cache's fingerprint and the report read
it without importing the package's API."""

__version__ = "0.1.0"
