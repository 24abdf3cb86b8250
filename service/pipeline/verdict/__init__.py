"""What the report concludes: decisions, lints, gates, platform notes."""
