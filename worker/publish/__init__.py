"""Publishing a compressed output, one idea per file:

card.py       the model card (README.md) from plain data: front matter, recipe, scores, evaluation
plot.py       the per-layer score plot (PNG) the card shows
loadcheck.py  the saved directory reloaded in a fresh process must generate and match logits
destination.py  where an output goes: a local directory or a Hub repo, fed the same staged folder
local.py      the local directory destination (NBL_PUBLISH_DIR/<name>)
hub.py        the Hub destination: create the repo, commit once (a retry adopts the marked commit)
"""
