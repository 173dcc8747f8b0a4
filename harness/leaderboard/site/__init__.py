"""The site as a whole: which pages exist and where they go, the mkdocs hook, README numbers, versions."""
