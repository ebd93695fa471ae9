"""The package version (a ground module: the disk cache's and the tuning store's keys read it
without importing the package's front end)."""

__version__ = "0.1.0"
