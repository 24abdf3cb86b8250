"""What a file holds and what ORT made of it: inventory, graph summaries, rewrites, blockers."""
