"""quantcompare client (placeholder until the clients issue lands)."""
