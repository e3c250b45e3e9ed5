"""Data parallelism over a device mesh: torch's DistributedSampler, and a collective check of a
job's partition."""
