"""Compare-and-set on a row: one UPDATE whose WHERE states what the writer read (the status, the lease,
a NULL still NULL), so of two writers racing on one row one wins and the other changes nothing. Every
state change of a job, a dispatch claim and a webhook claim is one (the job's walk stays correct with
two workers, two API calls or two reconcilers on it at once).
"""

from __future__ import annotations

from sqlalchemy import Update
from sqlalchemy.orm import Session


def cas(session: Session, statement: Update, *, commit: bool = False) -> bool:
    """Run `statement` (an UPDATE matching at most one row). True: it changed the row; the transaction is
    left open for what goes with the change (an event, an outbox row), or committed with `commit`. False:
    it matched nothing (another writer won, or the row moved on) and the transaction is rolled back, so
    nothing written before it in the transaction stays either."""
    res = session.execute(statement.execution_options(synchronize_session=False))
    if res.rowcount != 1:
        session.rollback()
        return False
    if commit:
        session.commit()
    return True
