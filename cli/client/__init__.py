"""The client commands of `nbl` (submit, wait, jobs, logs, download, models, usage) over nbl_client."""
