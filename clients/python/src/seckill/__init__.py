"""seckill: flash sales on the seckill module, from redis-py (sync here, asyncio in
``seckill.asyncio``, the same classes and names).

``Sale`` is one ``SECKILL.INIT`` key. ``PartitionedSale`` spreads one sale over a Redis
Cluster: a sale of ``stock`` units is P ordinary seckill sale keys (``{name/0}`` .. ``{name/P-1}``,
each its own hash tag, so Redis Cluster spreads them over its masters and moves them when it
reshards) and a manifest hash ``name``. A user always buys in the partition given by a hash of
the user id, so LIMIT and dedup stay exact; a drained partition borrows units from the others
with escrow transfers, so the sale sells out completely.
"""

#: The package's version: the module's and the Rust crate's too (one version for all three).
__version__ = "0.12.0"

from .errors import (
    ArgumentTypeError,
    BadManifestError,
    ContendedError,
    InvalidArgumentError,
    LockLost,
    LockTimeout,
    ModuleMissingError,
    ModuleTooOldError,
    NoHoldsError,
    NoQueueError,
    NoSaleError,
    NotReplicatedError,
    OutcomeUnknownError,
    SaleExistsError,
    SeckillError,
    UnavailableError,
    WrongTypeError,
)
from ._health import NotSentError
from .flash_sale import FlashSale
from .lock import Lock, LockGuard
from .info import Buyer, ClientStats, PartitionInfo, SaleEvent, SaleInfo
from .partitioned import CREATE_CLAIM_MS, DEFAULT_SEAL_MS, PartitionedSale, partition_of
from .protocol import ENDED, MAX_PARTITIONS, MIN_MODULE_VERSION, NOT_ADMITTED, NOT_STARTED, OVER_LIMIT, SOLD_OUT
from .retry import RetryPolicy, is_retryable
from .sale import Sale
from ._waiting import Place
from .spec import SaleSpec

__all__ = [
    "ArgumentTypeError",
    "BadManifestError",
    "WrongTypeError",
    "CREATE_CLAIM_MS",
    "FlashSale",
    "MIN_MODULE_VERSION",
    "ModuleMissingError",
    "ModuleTooOldError",
    "Sale",
    "NoHoldsError",
    "NoQueueError",
    "NOT_ADMITTED",
    "Place",
    "OutcomeUnknownError",
    "RetryPolicy",
    "is_retryable",
    "Buyer",
    "ClientStats",
    "ContendedError",
    "DEFAULT_SEAL_MS",
    "ENDED",
    "InvalidArgumentError",
    "Lock",
    "LockGuard",
    "LockLost",
    "LockTimeout",
    "MAX_PARTITIONS",
    "NOT_STARTED",
    "NoSaleError",
    "NotReplicatedError",
    "NotSentError",
    "OVER_LIMIT",
    "PartitionInfo",
    "PartitionedSale",
    "SOLD_OUT",
    "SaleEvent",
    "SaleExistsError",
    "SaleInfo",
    "SaleSpec",
    "SeckillError",
    "UnavailableError",
    "partition_of",
]
