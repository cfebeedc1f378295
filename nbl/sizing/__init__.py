"""A job's size from its model's config.json alone: memory per device, host and disk, and time, phase by
phase (model.py), spread over devices as the worker spreads it (spread.py), placed on worker classes
(classes.py); a job's Options from its Recipe and the estimate's stored form (job.py). Pure arithmetic: the
API's estimate, the worker's preflight and `nbl estimate` share it."""
