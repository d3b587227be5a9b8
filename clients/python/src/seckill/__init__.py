"""seckill: one flash sale spread over a Redis Cluster, on the seckill module.

A sale of ``stock`` units is P ordinary seckill sale keys (``{name/0}`` .. ``{name/P-1}``,
each its own hash tag, so Redis Cluster spreads them over its masters and moves them when it
reshards) and a manifest hash ``name``. A user always buys in the partition given by a hash of
the user id, so LIMIT and dedup stay exact; a drained partition borrows units from the others
with escrow transfers, so the sale sells out completely.
"""

#: The package's version: the module's and the Rust crate's too (one version for all three).
__version__ = "0.7.0"

from .errors import (
    BadManifestError,
    ContendedError,
    InvalidArgumentError,
    ModuleMissingError,
    NoHoldsError,
    NoSaleError,
    OutcomeUnknownError,
    SaleExistsError,
    SeckillError,
)
from .protocol import ENDED, MAX_PARTITIONS, NOT_STARTED, OVER_LIMIT, SOLD_OUT
from .retry import RetryPolicy, is_retryable
from .sale import (
    CREATE_CLAIM_MS,
    DEFAULT_SEAL_MS,
    Buyer,
    ClientStats,
    PartitionedSale,
    PartitionInfo,
    SaleEvent,
    SaleInfo,
    SaleSpec,
    partition_of,
)

__all__ = [
    "BadManifestError",
    "CREATE_CLAIM_MS",
    "ModuleMissingError",
    "NoHoldsError",
    "OutcomeUnknownError",
    "RetryPolicy",
    "is_retryable",
    "Buyer",
    "ClientStats",
    "ContendedError",
    "DEFAULT_SEAL_MS",
    "ENDED",
    "InvalidArgumentError",
    "MAX_PARTITIONS",
    "NOT_STARTED",
    "NoSaleError",
    "OVER_LIMIT",
    "PartitionInfo",
    "PartitionedSale",
    "SOLD_OUT",
    "SaleEvent",
    "SaleExistsError",
    "SaleInfo",
    "SaleSpec",
    "SeckillError",
    "partition_of",
]
