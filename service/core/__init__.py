"""What every domain of the service shares: settings, the database (models, sessions, migrations,
retries), domain errors, secrets at rest, the Celery configuration, Prometheus metrics and paths."""
