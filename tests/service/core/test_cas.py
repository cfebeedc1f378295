"""service/core/cas.py: the one compare-and-set of every state change (jobs, dispatch claims, webhook
claims). Its contract on a real SQLite file: the winner's transaction stays open or commits, the loser's
is rolled back whole."""

from __future__ import annotations

from sqlalchemy import Column, Integer, MetaData, Table, create_engine, insert, select, update
from sqlalchemy.orm import Session

from service.core.cas import cas


def test_cas_changes_one_row_or_rolls_back_the_whole_transaction(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'cas.db'}")
    rows = Table("rows", MetaData(), Column("id", Integer, primary_key=True), Column("v", Integer))
    rows.metadata.create_all(engine)
    with Session(engine) as s:
        s.execute(insert(rows).values(id=1, v=0))
        s.commit()

        def move(seen: int, to: int, **kw) -> bool:
            return cas(s, update(rows).where(rows.c.id == 1, rows.c.v == seen).values(v=to), **kw)

        assert move(0, 1)  # won: still in the transaction, so a rollback undoes it
        s.rollback()
        assert s.scalar(select(rows.c.v)) == 0
        s.commit()

        s.execute(insert(rows).values(id=2, v=0))  # written before a set that loses: it goes too
        assert not move(5, 6)
        assert s.scalar(select(rows.c.id).where(rows.c.id == 2)) is None
        s.commit()

        assert move(0, 1, commit=True)
        assert not move(0, 2, commit=True)  # the row moved on: the second writer changes nothing
    with Session(engine) as other:
        assert other.scalar(select(rows.c.v)) == 1
