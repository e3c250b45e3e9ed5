"""Data parallelism over a device mesh: torch's DistributedSampler, and a collective check of a
job's partition (``verify_data_parallel``) with its pure checks (``check_items``)."""

from dataorder.parallel.checks import check_items
from dataorder.parallel.distributed import DistributedSampler
from dataorder.parallel.verify import DataParallelError, DataParallelReport, verify_data_parallel

__all__ = [
    "DataParallelError",
    "DataParallelReport",
    "DistributedSampler",
    "check_items",
    "verify_data_parallel",
]
