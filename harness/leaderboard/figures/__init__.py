"""SVG charts and the data files behind them, in one chart style (`figures.style`)."""
