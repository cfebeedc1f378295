"""Job webhooks (Standard Webhooks): which URLs are allowed (urls.py), signing and the teams'
secrets (signing.py), the outbox and its deliverer (delivery.py, fed by service.jobs.states), one
POST under its total deadline (post.py), and the thread that delivers beside each reconcile loop
(deliverer.py)."""
