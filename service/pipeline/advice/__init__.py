"""Advice: the changes the blockers point to, re-run for real and measured within the extras' budget."""
