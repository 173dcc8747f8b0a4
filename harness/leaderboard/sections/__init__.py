"""Parts of pages that more than one page shows (costs, curves, overlap, the cross-task table)."""
