"""A job as a worker leaves it, written through the real functions: created by the jobs service (as
POST /v1/jobs does), then claimed, staged, scored, measured and finished by service/jobs/lease.py, store.py
and states.py. Used by the dashboard's unit tests and its browser test."""

from __future__ import annotations

import time

from nbl.request import JobCreate
from service.jobs import lease, states, store
from service.jobs.submit import create_job
from service.keys.auth import authenticate

LAYERS = 8
# Per-layer scores: attention is near-linear in the middle (low CCA bound), as in the paper.
CCA = [2.9, 1.2, 0.4, 0.3, 0.5, 0.9, 1.6, 3.1]


def layer_rows() -> list[dict]:
    rows = []
    for i, c in enumerate(CCA):
        rows.append(
            {
                "layer": i,
                "attn": {
                    "cca_bound": c,
                    "nmse": c / 10,
                    "cosine": 0.99 - c / 50,
                    "cond": 10.0 + i,
                    "heldout_nmse": c / 9,
                    "loss_rise": c / 100 - 0.004,
                },
                "block": {
                    "cca_bound": c * 2,
                    "nmse": c / 5,
                    "cosine": 0.95 - c / 40,
                    "cond": 20.0 + i,
                    "heldout_nmse": c / 4,
                    "loss_rise": None,
                },
            }
        )
    return rows


def lowest(k: int) -> list[int]:
    return sorted(sorted(range(LAYERS), key=lambda i: CCA[i])[:k])


def seed_job(
    sessions,
    settings,
    key: str,
    *,
    ks=(2, 4),
    model="HuggingFaceTB/SmolLM2-135M-Instruct",
    metadata=None,
    finish: str | None = "succeeded",
    error_message: str | None = None,
    error_type: str = "user",
    published: bool = True,
    ppl_shift: float = 0.0,
    pause: float = 0.0,
    gate: float | None = None,
    files: dict[str, bytes] | None = None,
    compression: dict | None = None,
    logs: int = 0,
) -> str:
    """A job of the key's team; `finish=None` leaves it running in the evaluate stage. `pause`
    seconds between stages give the timeline visible widths (the browser test's screenshots).
    `files` are published as each k's local output by the worker's own local publisher (the API
    serves them); without them the artifact rows point nowhere. `compression`: more of that section
    (mode, form, ...). `logs`: that many calibration log events, as a real job writes hundreds. `published=False`:
    no artifact rows (a job that failed before publishing)."""
    compression = {"k": list(ks), **(compression or {})}
    spec = JobCreate.model_validate(
        {
            "model": {"id": model},
            "compression": compression,
            "calibration": {"num_samples": 16, "seq_len": 256},
            "metadata": metadata or {},
        }
    )
    with sessions() as s:
        who = authenticate(s, f"Bearer {key}")
        s.commit()
        job, _ = create_job(s, who, spec, None, settings)
        job_id = job.id
    with sessions() as s:
        token = lease.claim_job(s, job_id, 120)
        for stage in ("load", "calibrate", "score"):
            store.set_progress(s, job_id, stage, 0.0, lease_token=token)
            for i in range(logs if stage == "calibrate" else 0):
                store.add_event(s, job_id, "log", f"calibrating: batch {i + 1} of {logs}", stage="calibrate")
            time.sleep(pause)
        store.save_layer_scores(s, job_id, layer_rows(), lease_token=token)
        store.set_selected_layers(
            s,
            job_id,
            [{"k": k, "mode": compression.get("mode", "attn"), "layers": lowest(k)} for k in ks],
            lease_token=token,
        )
        store.set_progress(s, job_id, "evaluate", 0.5, eta=42, lease_token=token)
        store.add_event(s, job_id, "warning", "evaluation.limit unset: all of WikiText-2", stage="evaluate")
        store.save_metrics(
            s,
            job_id,
            "base",
            {"perplexity/wikitext2/ppl": 20.52, "tasks/arc_easy/acc": 0.61, "perplexity/wikitext2/tokens": 287644},
        )
        for k in ks:
            store.save_metrics(
                s,
                job_id,
                f"k{k}",
                {
                    "perplexity/wikitext2/ppl": 20.52 + k * 0.7 + ppl_shift,
                    "tasks/arc_easy/acc": 0.61 - k * 0.01,
                    "perplexity/wikitext2/tokens": 287644,
                },
            )
            if published and files is None:
                store.save_artifact(s, job_id, k, "model", f"/v1/jobs/{job_id}/outputs/{k}/files", lease_token=token)
            elif published:
                uri = _publish(settings, who.team_name, job_id, k, len(ks) > 1, files)
                store.save_artifact(s, job_id, k, "local", uri, lease_token=token)
        if gate is not None:  # +gate relative WikiText-2 perplexity, checked as the worker checks it
            from nbl.recipe import Gates
            from service.core.models import Job
            from worker import gates

            stored = s.get(Job, job_id).metrics  # {"base": {...}, "k2": {...}}: what the worker's check reads
            found = gates.checks(Gates(max_ppl_increase={"wikitext2": gate}), stored, [f"k{k}" for k in ks])
            store.save_gates(s, job_id, gates.summary(found), lease_token=token)
        time.sleep(pause)
        if finish == "failed":
            states.finish(s, job_id, token, "failed", error_type, error_message)
        elif finish is not None:
            states.finish(s, job_id, token, finish)
    return job_id


def _publish(settings, team: str, job_id: str, k: int, several: bool, files: dict[str, bytes]) -> str:
    from worker.publish.local import LocalDir

    staged = settings.home / "seed-staged" / job_id / f"k{k}"
    for name, data in files.items():
        (staged / name).parent.mkdir(parents=True, exist_ok=True)
        (staged / name).write_bytes(data)
    settings.publish_dir.mkdir(parents=True, exist_ok=True)
    return LocalDir(settings.publish_dir, team, f"seed-{job_id[-8:]}", job_id).publish(staged, k, several).uri
