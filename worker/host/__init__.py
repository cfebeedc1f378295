"""The worker process around its jobs: devices and capacity, the Celery pool, leases, caches, retention."""
