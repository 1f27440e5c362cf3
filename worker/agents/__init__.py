"""Agents evalfleet runs itself rather than as an external command."""
