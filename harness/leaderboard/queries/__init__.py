"""DuckDB over the corpus: boards, samples, comparisons, summaries, and the data exports (downloads, releases)."""
