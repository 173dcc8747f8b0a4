"""What you do outside the committed grids: runs on your own data, scoring a backbone beside a board, and
publishing a trained probe head."""
