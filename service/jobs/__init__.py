"""The job: its request schema, HTTP endpoints, submission, state transitions, the worker-facing
store, the enqueue call and the reconciler that makes the broker agree with the database."""
