"""tfclaims: an empirical harness that tests common claims about Transformers."""

__version__ = "0.1.0"
