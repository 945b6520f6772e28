"""A support desk built on ackloop: its agents, their tools and their offline scripts."""
