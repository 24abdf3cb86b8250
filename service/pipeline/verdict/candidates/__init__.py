"""What a candidate of advice gains (expected_gain) and how to make it outside the service (recipe)."""
