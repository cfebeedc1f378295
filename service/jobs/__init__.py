"""The job. endpoints.py (HTTP, thin) calls service.py (submit, read, list, cancel); states.py is the
one writer of status changes with their events and webhook outbox rows (claim, heartbeat, finish,
cancel, requeue); store.py is what the worker writes besides (progress, scores, metrics, artifacts);
schemas.py and responses.py are the bodies, views.py builds the responses from rows; queue.py sends
to the broker after the commit; reconciler.py makes the broker agree with the database."""
