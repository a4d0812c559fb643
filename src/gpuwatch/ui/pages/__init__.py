"""One module per Dash page."""
