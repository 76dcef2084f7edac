"""shardopt: embedding-table sharding as min-max partitioning — one IR, interchangeable solvers, plans judged on
one cost definition."""

__version__ = "0.1.0"
