"""The module's numbers this package names, defined once here and checked against the table
both client libraries share (``clients/protocol.txt``)."""

#: SECKILL.TRY: fewer than ``qty`` units left.
SOLD_OUT = -1
#: SECKILL.TRY: the user would go over LIMIT.
OVER_LIMIT = -2
#: SECKILL.TRY: before START.
NOT_STARTED = -3
#: SECKILL.TRY: at or after END.
ENDED = -4
#: SECKILL.TRY on a partition that is drained but not sealed: other partitions may lend it
#: units. The client borrows and tries again, so callers never see it.
DRAINED = -5
#: SECKILL.TRY on a sale with a waiting room (QUEUE): the user is not admitted (it waits, never
#: joined, or its window lapsed).
NOT_ADMITTED = -6
#: The oldest module this package works with, as ``INFO seckill`` gives it (major * 10 000 +
#: minor * 100 + patch): 0.12.0, the first with SECKILL.LEAVE, PRESENCE and WITHETA (which
#: ``wait_for_turn``'s reader uses); 0.11.0 was the first whose repeated attempt is covered by
#: a WAIT after it (see ``_durability``).
MIN_MODULE_VERSION = 1200
#: Most partitions one sale may have (``SECKILL.INIT ... PARTITIONS n``).
MAX_PARTITIONS = 16_384
