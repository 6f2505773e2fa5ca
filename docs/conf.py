"""Sphinx configuration of the API reference; scripts/docs.sh builds it (warnings are errors).

The Python reference is autodoc of the built package (PYTHONPATH=build/python, Debian's
python3), so the extension must be built first. The C++ reference is Doxygen's HTML, which
scripts/docs.sh generates into the output's cpp/ folder; cpp.rst links to it. Nothing is
fetched from the network (no intersphinx).
"""

import importlib
import inspect
import os
import sys

from sphinx.util import logging

import mmnpz

project = "mmnpz"
author = "the mmnpz authors"
copyright = "the mmnpz authors, MIT license"
release = mmnpz.__version__
version = release

extensions = ["sphinx.ext.autodoc"]
root_doc = "index"
exclude_patterns = ["_build", "Doxyfile"]
html_theme = "alabaster"
html_static_path = []
html_theme_options = {"nosidebar": False}
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the signatures come from the sources; types are in the .pyi stubs
autoclass_content = "class"
nitpicky = True
# numpy's and torch's objects are named in docstrings but not documented here (no intersphinx):
nitpick_ignore_regex = [
    ("py:.*", r"(numpy|np|torch)\..*"),
]

# The public Python API: every name here must have a docstring, and so must every public
# attribute (method, property) of the classes among them. A missing one is a warning, and the
# docs build treats warnings as errors.
PUBLIC = {
    "mmnpz": list(mmnpz.__all__),
    "mmnpz.torch": ["ExcerptBatches", "loader"],
    "mmnpz.pack": ["InputError", "SizeError", "Input", "Result", "Progress", "parse_size",
                   "find_inputs", "read_wave", "read_soundfile", "read_audio", "decode", "run",
                   "main"],
}


def undocumented():
    """Qualified public names without a docstring of their own."""
    missing, seen = [], set()
    for module_name, names in PUBLIC.items():
        module = importlib.import_module(module_name)
        if not inspect.getdoc(module):
            missing.append(module_name)
        for name in names:
            obj = getattr(module, name)
            if id(obj) in seen:  # an alias (mmnpz.load is NpzReader)
                continue
            seen.add(id(obj))
            if not (obj.__doc__ or "").strip():
                missing.append(f"{module_name}.{name}")
            if not inspect.isclass(obj):
                continue
            for attr, value in vars(obj).items():
                if attr.startswith("_"):
                    continue
                if isinstance(value, (staticmethod, classmethod)):
                    value = value.__func__
                if callable(value) or isinstance(value, property):
                    if not (value.__doc__ or "").strip():
                        missing.append(f"{module_name}.{name}.{attr}")
    return missing


def check_docstrings(app):
    log = logging.getLogger(__name__)
    for name in undocumented():
        log.warning(f"public Python name without a docstring: {name}")


def setup(app):
    app.connect("builder-inited", check_docstrings)
