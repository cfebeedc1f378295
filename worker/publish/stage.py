"""The pipeline's last stage: each output's card written, then the outputs handed to their Destination.

    cards        each output's README.md rewritten with the evaluation and the quoted request (scratch only)
    space        the outputs fit where they go (a local folder: the team's disk quota; QuotaExceeded else)
    begin        a job's sink records that publishing began (service.jobs.states.begin_publish): a cancel
                 that came first stops the job here, with nothing published; any later one is refused (409)
    publish      each output to the destination, recorded as soon as it is there; then the root card
                 over several outputs

Nothing reaches a place the API or the Hub serves before `begin`, so a job ends `cancelled` only with
nothing published, and a job that began publishing ends `succeeded` or `failed`.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Mapping, Protocol

from nbl.lru import tree_size

from ..engine.forms.saving import SCORES_FILE
from ..errors import RetryPolicy
from ..quant.card import copies as quant_copies
from ..run_warnings import RunWarnings
from .card import CardInfo, write_card
from .destination import Destination, Published
from .root_card import RootEntry, write_root_card


class PublishSink(Protocol):
    """What this stage reports to (worker.pipeline_io.Sink). A job's sink also has begin_publish(), which
    raises the pipeline's Cancelled when a cancel won the race to it."""

    def progress(self, stage: str, fraction: float, message: str) -> None: ...
    def output(self, k: int, layers: list[int], published: Published) -> None: ...


def publish(
    outputs: dict[int, Path],
    selected: dict[int, list[int]],
    destination: Destination,
    metrics: dict[str, dict],
    recipe: Mapping | None,
    sink: PublishSink,
    retry: RetryPolicy = RetryPolicy(),
    several: bool | None = None,
    caveats: RunWarnings | None = None,
    base_bytes: dict[str, float] | None = None,
    base_size: int | None = None,
) -> dict[int, Published]:
    """Rewrite each output's card with the evaluation and the recipe, then hand the folder to the
    destination; record each as soon as it is published. `recipe`: the request the card quotes;
    `several`: the job made several outputs (k{K} folders and a root card), even if its gates kept one;
    `caveats`: the run's warnings, listed on each card, which says how much a truncated evaluation scored;
    `base_bytes`: {scheme: bytes} of the base quantized alike (publish.quantize), and `base_size` the base's own,
    for the card's comparison."""
    several = len(outputs) > 1 if several is None else several
    caveats = caveats or RunWarnings()
    sink.progress("publish", 0.0, "publishing")
    for k, path in outputs.items():
        where, subfolder = destination.location(k, several)
        card_metrics = {"base": metrics.get("base") or {}, "compressed": metrics.get(f"k{k}") or {}}
        for v in metrics:  # the quantized copies' and bases' (publish.quantize): "k4+w4a16", "base+w4a16"
            who, plus, s = v.partition("+")
            if plus and who in ("base", f"k{k}"):
                card_metrics[f"{'base' if who == 'base' else 'compressed'}+{s}"] = metrics[v]
        write_card(
            path,
            CardInfo(
                report=json.loads((path / SCORES_FILE).read_text()),
                metrics=card_metrics,
                recipe=recipe,
                repo_id=where,
                subfolder=subfolder,
                warnings=caveats.for_k(k),
                scored=caveats.scored,
                quantized=quant_copies(path, card_metrics, base_bytes or {}, base_size),
            ),
        )
    destination.check_space(sum(tree_size(path) for path in outputs.values()))
    if hasattr(sink, "begin_publish"):  # a job's sink: from here on, no cancel
        sink.begin_publish()
    done: dict[int, Published] = {}
    for j, (k, path) in enumerate(outputs.items(), start=1):
        pub = retry.run(lambda: destination.publish(path, k, several), f"publishing k={k}")
        sink.output(k, selected[k], pub)
        done[k] = pub
        sink.progress("publish", j / len(outputs), f"k={k}: {_published(pub)}")
    if several:  # the Hub renders only the root README.md: a card over the k{K} folders
        entries = [
            RootEntry(k, json.loads((path / SCORES_FILE).read_text()), metrics.get(f"k{k}") or {})
            for k, path in outputs.items()
        ]
        with tempfile.TemporaryDirectory() as staged:
            write_root_card(
                Path(staged), entries, metrics.get("base") or {}, destination.location(entries[0].k, True), recipe
            )
            root = retry.run(lambda: destination.publish_root(Path(staged)), "publishing the root card")
            sink.progress("publish", 1.0, f"root card: {_published(root)}")
    sink.progress("publish", 1.0, "published")
    return done


def _published(pub: Published) -> str:
    return f"{'found already published' if pub.adopted else 'published'} at {pub.uri}" + (
        f" ({pub.revision}@{pub.commit_sha[:12]})" if pub.commit_sha else ""
    )
