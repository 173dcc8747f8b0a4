"""One module per kind of page; a page imports sections, figures and below, never another page."""
