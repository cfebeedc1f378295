"""The job. endpoints.py (HTTP, thin) calls submit.py and service.py (read, list, cancel); states.py
(finish, cancel, publishing) and lease.py (claim, heartbeat, requeue) are the one writer of status changes
with their events, and outbox.py of their webhook outbox rows; store.py is what the worker writes besides
(progress, scores, metrics, artifacts); the request body is nbl/request.py (JobCreate), responses.py the
answers, views.py builds them from rows; queue.py sends to the broker after the commit; reconciler.py makes
the broker agree with the database; stream.py is the event stream. jobs stands on estimates and webhooks,
and outputs on jobs (tests/test_layers.py)."""
