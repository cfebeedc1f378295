"""The rows a job stores for its outputs' layers (jobs.selected_layers), read back by the result (nbl/result.py
job_result): each k's mode and layers, the criterion that chose it when a measured selection did, the base's
family (where the output runs depends on it: nbl/outputs/forms.runs_in) and the saved weights' dtype."""

from __future__ import annotations


def selection_rows(
    mode: str,
    selected: dict[int, list[int]],
    measured: dict | None = None,
    family: str | None = None,
    dtypes: dict[int, str] | None = None,
) -> list[dict]:
    won = {c["k"]: c["criterion"] for c in (measured or {}).get("chosen", [])}  # the criterion that chose each k
    return [
        {
            "k": k,
            "mode": mode,
            "layers": v,
            **({"criterion": won[k]} if k in won else {}),
            **({"family": family} if family else {}),
            **({"dtype": dtypes[k]} if k in (dtypes or {}) else {}),
        }
        for k, v in selected.items()
    ]
