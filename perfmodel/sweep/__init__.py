"""`perfmodel sweep`: enumerate candidate plans, prune by rules and memory, simulate, rank, emit plans."""
