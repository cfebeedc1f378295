"""Job webhooks (Standard Webhooks): signing and the teams' secrets (signing.py), the deliverer of the
outbox rows (delivery.py; service/jobs/outbox.py writes them with each state change), one POST under its
total deadline (post.py), and the thread that delivers beside each reconcile loop (deliverer.py). Which
URLs are allowed is nbl/webhook_urls.py (the request schema and the settings read it too)."""
