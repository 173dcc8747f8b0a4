"""Files the site quotes besides the corpus: benchmark results (costs, referenced numbers)."""
