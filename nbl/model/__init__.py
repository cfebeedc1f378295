"""A model as its config.json describes it: what a job may ask of it (checks), its shape as the API lists it."""
