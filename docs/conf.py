"""Sphinx configuration: MyST Markdown pages, autodoc/autosummary from the docstrings, furo.

``make docs`` builds the gallery's pictures first (``docs/gallery.py``); this file only writes
the gallery page, with the pictures that exist (``BATCHAUG_DOCS_GALLERY=skip`` builds the page
without them, as the test suite does).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import batchaug  # noqa: E402
import gallery  # noqa: E402

project = "batchaug"
author = "batchaug contributors"
copyright = "batchaug contributors"
release = version = batchaug.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx.ext.intersphinx",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 4

autosummary_generate = True
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": False}
# nn.Module's own members (forward's hooks, train, ...) are torch's, documented there
autodoc_inherit_docstrings = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
add_module_names = False
nitpicky = False
intersphinx_mapping = {}

html_theme = "furo"
html_title = f"batchaug {release}"
html_static_path = []
# class pages list the class's own members and those of its private bases (_Container, _RandomFlip,
# ...: the with_targets a container inherits is its own to a reader), not those of the public
# bases (documented on their pages) or the ~50 of nn.Module (the template names them)
templates_path = ["_templates"]

suppress_warnings = [
    # docstrings written for the terminal use RST emphasis and asterisks freely
    "autosummary.import_cycle",
]

gallery.write_page(HERE / "gallery.md", with_pictures=os.environ.get("BATCHAUG_DOCS_GALLERY") != "skip")
