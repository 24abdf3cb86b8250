"""What the report concludes: decisions, lints, gates, advice, platform notes."""
