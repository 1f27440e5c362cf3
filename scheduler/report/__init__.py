"""Rendering an ExperimentReport: `render` (table, markdown, json, csv, html) in render.py,
the tables every format shares in sections.py, the HTML page and its SVG charts."""
