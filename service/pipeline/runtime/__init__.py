"""Running the files: levels, sessions, numerics, latency, agreement, attribution, per-tensor error."""
