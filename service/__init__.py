"""nbl-service, the service side: HTTP API, settings, database, schemas, auth, enqueue, store.

Never imports torch or transformers (tests/service/api/test_service_no_torch.py checks): the heavy code lives
in worker/, which the API reaches only by task name through the broker.
"""
