"""The package's one version string (`toolsearch.__version__`), in a module that imports nothing."""

__version__ = "0.1.0"
