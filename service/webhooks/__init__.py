"""Job webhooks (Standard Webhooks): which URLs are allowed, signing, the outbox and its deliverer."""
