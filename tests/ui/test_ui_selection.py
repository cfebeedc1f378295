"""The /ui job page of a measured selection (issue 13 §1): the criterion that won, the selection data and
its tokens, and every layer set measured with its selection perplexity, the kept one marked."""

from __future__ import annotations

from sqlalchemy import update
from testkit.ui_seed import seed_job

from service.core.models import Job

SELECTION = {
    "criterion": "greedy",
    "k": 2,
    "tokens": 2040,
    "base_ppl": 28.84,
    "data": {"source": "selection dataset", "in_distribution": False, "path": "wikitext2", "split": "validation"},
    "chosen": [{"k": 2, "criterion": "greedy", "layers": [6, 7]}],
    "tried": [
        {"k": 2, "criterion": "cca", "layers": [28, 29], "heldout_ppl": 36.47},
        {"k": 2, "criterion": "greedy", "layers": [6, 7], "heldout_ppl": 31.05},
    ],
    "greedy_steps": [],
}


def test_job_page_shows_the_selection_table(client, team_key, sessions, settings):
    alpha = team_key("alpha")
    job = seed_job(sessions, settings, alpha["Authorization"].split()[1], ks=(2,))
    html = client.get(f"/ui/jobs/{job}", headers=alpha).text
    assert '<table class="selection">' not in html  # a per-layer criterion: no table
    with sessions() as s:
        s.execute(update(Job).where(Job.id == job).values(selection=SELECTION))
        s.commit()
    html = client.get(f"/ui/jobs/{job}", headers=alpha).text
    assert "<h2>Selection: greedy, k=2</h2>" in html and "2040 tokens" in html and "<code>wikitext2</code>" in html
    rows = html.split('<table class="selection">')[1].split("</table>")[0].split("<tr>")[2:]
    assert [("cca" in r, "✔" in r) for r in rows] == [(True, False), (False, True)], rows
    assert "36.47" in rows[0] and "31.05" in rows[1]
