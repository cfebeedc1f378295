"""The rules of a local output folder (NBL_PUBLISH_DIR/<team>/<name>) that the API and the worker both
apply, so that the worker's publish needs nothing of service/outputs:

    quota.py     a team's disk quota: checked at submit (service/jobs/disk_quota.py) and at publish
                 (worker/publish/local.py)
    manifest.py  the folder's file manifest and its bookkeeping files: written at publish, served by the API
                 (service/outputs/files.py)

Plain os calls, no database: the API imports them without torch.
"""
