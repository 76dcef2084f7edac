"""Measured judges: each device's shards timed as one fused embedding kernel on generated index traces."""
