"""Runs into a report: aggregation per tier and per tier x scenario, comparisons
between tiers, judge noise, and the adaptive stopping rule. Pure.
"""
