"""The I/O of a cluster node (DESIGN.md section 8): membership upkeep against PostgreSQL on a thread
of its own (``node``), and ``sansmq cluster status`` (``cli``). Nothing here is on the message
path: the loop thread never waits for the database on behalf of the cluster. psycopg (the
'postgresql' extra) is imported only when a cluster is used."""
