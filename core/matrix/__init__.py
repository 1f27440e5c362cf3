"""The experiment as the user wrote it: matrix.yaml's models (tiers, scenarios,
evaluation, judge, budget, report options), its assertions, and reading a YAML file
into them. Pure: no broker, no HTTP, no subprocess (import-linter holds it so).
"""
