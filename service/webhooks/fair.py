"""Which team's webhook a deliverer's free slot sends next: fair shares of the slots, by team.

A deliverer has a few slots (POSTs in flight at once), and a receiver that answers slowly holds a
slot for the whole deadline of each attempt. Taken oldest first, one team with many deliveries to
a trickling receiver held every slot, and every other team's webhooks waited behind all of its
rows (issue 24, red-team pass: 128 s instead of 4 s after 400 jobs, and growing with them).

So a free slot serves the team with the fewest POSTs in flight in this deliverer (then the team
whose oldest due delivery is oldest), and no team holds more than `per_team` slots (half of them by
default): another team's delivery finds a free slot at once, whatever one team has queued. Within
a team, deliveries go oldest first. Pure: the caller reads what is due and claims the rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime


class Share:
    def __init__(self, per_team: int):
        if per_team < 1:
            raise ValueError("per_team must be at least 1")
        self.per_team = per_team
        self.in_flight: Counter[int] = Counter()

    @property
    def busy(self) -> int:
        """POSTs in flight now, all teams together."""
        return sum(self.in_flight.values())

    def pick(self, due: Mapping[int, datetime]) -> int | None:
        """The team a free slot serves next, from {team: its oldest due delivery's time}; None when
        nothing is due or every team that has something due holds its share already."""
        open_ = [
            (self.in_flight[team], oldest, team) for team, oldest in due.items() if self.in_flight[team] < self.per_team
        ]
        return min(open_)[2] if open_ else None

    def begin(self, team: int) -> None:
        self.in_flight[team] += 1

    def end(self, team: int) -> None:
        self.in_flight[team] -= 1
