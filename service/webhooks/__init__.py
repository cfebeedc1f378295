"""Job webhooks (Standard Webhooks): which URLs are allowed (urls.py), signing and the teams'
secrets (signing.py), the outbox and its deliverer (delivery.py, fed by service.jobs.states)."""
