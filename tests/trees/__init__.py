"""A randomized test of trees of runs (sub-agents, approvals, events) under kills, dead
letters, redrives and cancels, on the in-memory engine with a driven clock."""
