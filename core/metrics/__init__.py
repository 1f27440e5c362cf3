"""Numbers of one run: ProjectScylla's metric formulas, llm-tool-test's interaction
metrics, onetool's per-call metrics, tokens, prices and per-run limits. Pure.
"""
