"""Serving a plan as the deployment will: the cores it gets, the requests in flight at once, the
settings each runtime offers to trade latency for throughput (options), a thread-safe pool of
sessions or infer requests that serves them (pool), and closed-loop load that measures
throughput and latency percentiles (load)."""
