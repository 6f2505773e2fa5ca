# Kept equal to include/mmnpz/version.hpp (a test checks).
__version__ = "0.1.0"
