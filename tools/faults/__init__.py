"""``make faults``: the whole system under a seeded schedule of network partitions, kills and
pauses, one history of every operation, a checker over it and the final state, a report with a
timeline plot (docs/faults.md). Files by concern: ``cluster`` (the nodes, each on its own
loopback address), ``net`` (nftables partitions), ``nemesis`` (the schedule), ``workload``
(client processes writing the history), ``store`` (the fenced store the lock holders write
to), ``history``, ``checker``, ``report``; ``__main__`` runs them."""
