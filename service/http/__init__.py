"""The HTTP plumbing the domains' routes stand on, below every domain (it imports only service/core and the
keys a request is authenticated by; tests/test_layers.py):

    deps.py        request dependencies: settings, a session per request, the caller's team, the Celery app
    hops.py        a request's transaction ends in the threadpool hop that began it (OneHopRoute)
    problems.py    every error as RFC 9457 problem+json
    nul.py         NUL and lone surrogates refused anywhere in a request
    query.py       query parameters a route does not declare refused
    limits.py      request bodies over the size limit refused before parsing
    admission.py   a team's requests and streams in flight, limited (key_teams.py: whose key; credential.py:
                   the key a request carries)
    pagination.py  the cursors of paged lists (`after`, `next_cursor`)

The routes stay in their domains (service/jobs, estimates, outputs, catalog, ui); service/api, the
composition root, builds the app from them.
"""
