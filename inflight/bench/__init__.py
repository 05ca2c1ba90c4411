"""``inflight bench``: the closed-loop load generator, the concurrency sweep, the policy
comparison, result files, the Little's Law check and plots.
"""
