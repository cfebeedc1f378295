"""What a job request left to the defaults that will cost its submitter time: said at submit, not found
out hours later. Each is a `warning` event of the job (service.jobs.views lists them as JobOut.warnings,
beside the worker's own warnings), written in the transaction that creates the job.

Pure: the request as validated (pydantic's fields_set says what was given) and the job's estimate.
"""

from __future__ import annotations

from nbl import recipe as R

SLOW_S = 3600.0  # an estimate whose fast end passes an hour is worth a word before the job starts


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def _gb(n: float) -> str:
    return f"{n / 1e9:,.1f} GB"


def submit_warnings(spec, estimate: dict | None, stats_cache_max_bytes: int | None = None) -> list[str]:
    """`spec`: a schemas.JobCreate (not imported: schemas imports this package's recipe for its defaults);
    `stats_cache_max_bytes`: the deployment's cap on the statistics cache (NBL_STATS_CACHE_MAX_BYTES; 0 or
    None: no cache, nothing to say)."""
    out: list[str] = []
    given = spec.model_fields_set
    seconds = (estimate or {}).get("seconds") or None
    worker_class = (estimate or {}).get("worker_class")
    where = f" on {worker_class}" if worker_class else ""
    if "calibration" not in given:
        cost = f"; estimated {_hours(seconds[0])} to {_hours(seconds[1])}{where}" if seconds else ""
        out.append(
            f"calibration not given: the default is {R.NUM_SAMPLES} x {R.SEQ_LEN} = "
            f"{R.NUM_SAMPLES * R.SEQ_LEN:,} tokens of {R.DATASET}{cost}; give calibration.num_samples "
            "and calibration.seq_len to calibrate on less"
        )
    elif seconds and seconds[0] > SLOW_S:
        out.append(f"this job is estimated to take {_hours(seconds[0])} to {_hours(seconds[1])}{where}")
    if "evaluation" not in given:
        out.append(
            f"evaluation not given: the default is {', '.join(R.PERPLEXITY)} perplexity on the whole test "
            "set, for the base and for every output; give evaluation.max_tokens to score fewer tokens, or "
            'evaluation: {"perplexity": []} for none'
        )
    stats = ((estimate or {}).get("disk") or {}).get("stats_cache")
    if stats_cache_max_bytes and stats and stats > stats_cache_max_bytes:
        out.append(
            f"this job's calibration statistics ({_gb(stats)}) are over the statistics cache's cap "
            f"({_gb(stats_cache_max_bytes)}, NBL_STATS_CACHE_MAX_BYTES): they will not be kept after the "
            "job, so a later job on the same model and calibration calibrates again; raise the cap on the "
            "workers (and their disk) to keep them"
        )
    return out
