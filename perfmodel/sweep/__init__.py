"""`perfmodel sweep`: enumerate candidate plans (space), prune by rules and memory, simulate, rank (run, ranking),
emit plans, cache results (cache). The API's function is `perfmodel.api.sweep`."""
