"""The dashboard's forms as a browser fills them: the hidden CSRF token read from the page, the
cookies kept by the client. Used by the dashboard's tests (test_ui.py, test_ui_csrf.py, ...)."""

from __future__ import annotations

import re

CSRF_COOKIE = "nbl_ui_csrf"


def csrf_field(html: str) -> str:
    """The value of a form's hidden `csrf` field in a page."""
    return re.search(r'name="csrf" value="([^"]*)"', html).group(1)


def ui_login(client, key: str, target: str | None = None, **headers):
    """GET the login form, POST it with its token (not following the redirect); the response."""
    form = client.get("/ui/login", headers=headers)
    assert form.status_code == 200, form.text
    if CSRF_COOKIE in form.cookies:  # set Secure over https: the test client may talk http
        client.cookies.set(CSRF_COOKIE, form.cookies[CSRF_COOKIE], path="/ui")
    data = {"key": key, "csrf": csrf_field(form.text)} | ({"next": target} if target else {})
    return client.post("/ui/login", data=data, headers=headers, follow_redirects=False)
