"""Sphinx configuration of the course's static site (`make site`, scripts/build_site.py).

scripts/build_site.py lays the pages out in site/_build/src (the lessons, the exercise sets'
student versions, the guides, a home page) and runs sphinx-build with this folder as its
configuration. Nothing is executed: every output is the committed notebooks' own.
"""

project = "Transformer Roots"
author = "Transformer Roots"
copyright = "Transformer Roots"

extensions = ["myst_nb"]

# The committed outputs are the lessons' outputs (make test checks them against a fresh run):
# the site shows them as they are, so a build takes seconds and needs no kernel.
nb_execution_mode = "off"
# Notebooks and guides write math as $...$ and $$...$$.
myst_enable_extensions = ["dollarmath", "amsmath", "deflist"]
# A lesson's headings are its sections in the right-hand "contents" column; anchors for links.
myst_heading_anchors = 3
# The lessons store each widget's output as a static HTML picture (text/html), which MyST-NB shows
# before text/plain, and no widget state: so MyST-NB loads no widget manager (it would come from a
# CDN, which fails offline). tests/test_site.py checks every page for a request that leaves.

# MathJax comes with the site (scripts/build_site.py copies it from npm's mathjax@3 into _static),
# so math renders with no network. A relative path is read from _static.
mathjax_path = "mathjax/tex-chtml-full.js"

html_theme = "sphinx_book_theme"
html_title = "Transformer Roots"
# site/_static: the course's CSS. _build/vendor: MathJax, copied there by scripts/build_site.py.
html_static_path = ["_static", "_build/vendor"]
# Light, always: the lessons' figures are drawn on white. (Without a default the theme logs a
# console error, "Got invalid theme mode", on a reader's first visit.)
html_context = {"default_mode": "light"}
html_css_files = ["course.css"]
html_theme_options = {
    "show_toc_level": 2,
    "home_page_in_toc": True,
    # The page's own "download" menu offers the notebook as the site shows it; each page also
    # links the committed notebook itself (its first lines).
    "use_download_button": True,
    # No repository, issue or launch buttons: the site does not know where the course is hosted.
    "use_repository_button": False,
    "use_issues_button": False,
    "use_edit_page_button": False,
    # pydata-sphinx-theme 0.20 puts a second search box in a header above the page; the sidebar has one.
    "navbar_persistent": [],
}
# Search lists the pages without a snippet of each: a snippet is fetched from the page, which a
# browser refuses for a site opened from disk (file://), with an error per result.
html_show_search_summary = False
html_last_updated_fmt = None
html_copy_source = True

# _originals/ holds the committed notebooks for download ({download} links), not pages.
exclude_patterns = ["_originals/**", "**/.ipynb_checkpoints"]
# A warning is a broken page (a missing image, a link to nothing): the build fails on it.
suppress_warnings = ["myst.header"]
