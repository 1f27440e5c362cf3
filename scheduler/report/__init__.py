"""Rendering an ExperimentReport: `render` (table, markdown, json, csv, html) in
scheduler.report.render; the tables every format shares in scheduler.report.sections (which
assembles them from .headline, .verdicts, .metric_tables and .noise, written as
.formatting says) and .compare; the HTML page and its SVG charts."""
