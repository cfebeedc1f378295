"""Templates and the headers every page carries. Autoescape is on for every template (not only
*.html): a model name or metadata value of `<script>` shows as text. The SVG chart, the one piece
of markup made in Python, escapes its own text (chart.py) and is marked safe there."""

from __future__ import annotations

from importlib.resources import files

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from . import csrf

_env = Environment(
    loader=FileSystemLoader(str(files("service.ui") / "templates")),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)

# Scripts and styles only from our own files (no inline script, no eval), connections (the job page's
# event stream) and forms only to ourselves, never framed.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def page(request: Request, template: str, code: int = 200, **context) -> HTMLResponse:
    context.setdefault("who", None)
    context.setdefault("csrf", csrf.token(request) or "")  # every form's hidden field (service.ui.csrf)
    html = _env.get_template(template).render(request=request, static="/ui/static", **context)
    return HTMLResponse(html, status_code=code, headers=HEADERS)
