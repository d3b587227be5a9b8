"""A flash-sale shop on seckill: a countdown, a fair waiting room followed live over
Server-Sent Events, a hold, a payment against a provider, an order paid exactly once.
See docs/shop.md."""
