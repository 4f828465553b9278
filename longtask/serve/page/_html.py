"""The two web pages' HTML: a list of threads, and one thread's live view, around the
stylesheet and scripts that sit beside this module as files of their own (read once, when
this module is imported).

Data reaches the DOM only through ``textContent`` (never ``innerHTML``), and the pages run
under a nonce Content-Security-Policy, so a step's output cannot become script.
"""

from __future__ import annotations

import html
import json
import secrets
from importlib import resources
from typing import Any

from longtask.runtime._control import STEP_PAUSES
from longtask.serve._stream import FINAL_KINDS
from longtask.store import FINAL_STATUSES, THREAD_STATUSES
from longtask.store._kinds import EVENT_KINDS as ALL_EVENT_KINDS

#: every event kind the Runner writes; EventSource only delivers named events to listeners
#: registered for that name, so the page subscribes to each
EVENT_KINDS = list(ALL_EVENT_KINDS)

_ASSETS = resources.files("longtask.serve.page")


def _asset(name: str) -> str:
    return (_ASSETS / name).read_text(encoding="utf-8")


#: the pages' icon (also served at /favicon.ico, which browsers ask for by themselves); the
#: file's last newline is no part of the picture
FAVICON = (_ASSETS / "favicon.svg").read_bytes().rstrip(b"\n")
CSS = _asset("page.css")
#: what both pages' scripts share: the config, the token, ``api`` fetches, formatting
COMMON_JS = _asset("common.js")
INDEX_JS = _asset("index.js")
#: the thread's page: its view, and the card of an effect cut off mid-call
THREAD_JS = _asset("thread.js") + "\n" + _asset("effect_card.js")


def _config_json(config: dict[str, Any]) -> str:
    # Inside <script>, "</" would end the element: escape what HTML could read as markup.
    text = json.dumps(config, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _document(title: str, body: str, script: str, config: dict[str, Any]) -> tuple[str, str]:
    nonce = secrets.token_urlsafe(16)
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<link rel="icon" href="/favicon.ico" type="image/svg+xml">
<style nonce="{nonce}">
{CSS}</style></head>
<body>{body}
<script type="application/json" id="config">{_config_json(config)}</script>
<script nonce="{nonce}">
{COMMON_JS}
{script}</script>
</body></html>
"""
    return page, nonce


TOKEN_FIELD = """<label>API token <input id="token" type="password" autocomplete="off"
 placeholder="bearer token" size="18"></label>"""


def index_page(*, reads_need_token: bool, db_option: str = "") -> tuple[str, str]:
    """The list of threads; returns the HTML and its CSP nonce. ``db_option``: the
    ``--db URL`` the commands a page shows carry (see ``_hints``)."""
    body = f"""<header><h1>longtask threads</h1>{TOKEN_FIELD}</header>
<main><section><p id="message" class="error"></p>
<p><label>status <select id="status-filter"><option value="">all</option></select></label></p>
<table><thead><tr><th>thread</th><th>task</th><th>status</th>
<th><a href="?sort=cost" data-sort="cost" title="most expensive first">cost</a></th>
<th><a href="?sort=age" data-sort="age" title="oldest first">age</a></th>
<th><a href="?" data-sort="" title="most recently updated first">updated</a></th></tr></thead>
<tbody id="threads"></tbody></table><p id="empty" class="muted" hidden>no threads</p>
</section>
<section id="schedules-section" hidden><h2>Schedules</h2>
<table><thead><tr><th>schedule</th><th>task</th><th>cron</th><th>next fire</th>
<th>last thread</th></tr></thead><tbody id="schedules"></tbody></table></section>
</main>"""
    config = {
        "readsNeedToken": reads_need_token,
        "statuses": list(THREAD_STATUSES),
        "dbOption": db_option,
    }
    return _document("longtask", body, INDEX_JS, config)


def _not_found(name: str, reads_need_token: bool) -> str:
    """What the page says of a thread the API answered 404 for: where reads need a token,
    that answer is the same for a thread that exists and the token may not see, so the page
    does not say it is missing from the database."""
    if reads_need_token:
        return f"no thread {name} for this token: there is none, or it may not see it."
    return f"no such thread: {name} is not in this database."


def thread_page(
    thread_id: str, reads_need_token: bool, missing: bool = False, db_option: str = ""
) -> tuple[str, str]:
    """The live view of one thread (``missing``: say there is no such thread); returns the
    HTML and its CSP nonce. ``db_option`` as for ``index_page``."""
    name = html.escape(thread_id)
    body = f"""<header><h1><a href="/">threads</a> / {name}</h1>
<span id="live" class="muted">connecting…</span>{TOKEN_FIELD}</header>
<main>
<section><h2><span id="task">…</span> <span id="status" class="badge">loading</span></h2>
<div class="bar"><div id="bar"></div></div><div id="progress" class="muted"></div>
<div id="schedule" class="muted" hidden></div>
<p id="not-found" hidden>{_not_found(name, reads_need_token)}
<a href="/">See the threads</a>.</p>
<p id="error" hidden></p><p id="load-error" class="error"></p>
<p id="message" role="status"></p></section>
<section id="pending-section" hidden><h2>Waiting for</h2><div id="pending"></div></section>
<section id="actions-section" class="actions" hidden><h2>Take over</h2><div id="actions"></div>
</section>
<section id="results-section" hidden><h2>Results</h2><div id="results"></div></section>
<section id="artifacts-section" hidden><h2>Artifacts</h2><ul id="artifacts"></ul></section>
<section><h2>Steps</h2><ul id="tree" class="tree"></ul></section>
<section id="cost-section" hidden><h2>Cost</h2><p id="cost-total"></p>
<p><a id="report" download>report (HTML, one file to attach to a ticket)</a></p>
<p id="budget-left" class="muted"></p>
<table><thead><tr><th>step</th><th class="num">wall time</th><th class="num">attempts</th>
<th class="num">tokens</th><th class="num">cost</th><th class="num">model calls</th>
<th class="num">tool calls</th></tr></thead><tbody id="cost-steps"></tbody></table></section>
<section><h2>Latest events</h2><ol id="events"></ol></section>
</main>"""
    config = {
        "thread": thread_id,
        "readsNeedToken": reads_need_token,
        "kinds": EVENT_KINDS,
        "missing": missing,
        "finalStatuses": list(FINAL_STATUSES),
        "stepPauses": list(STEP_PAUSES),
        "finalKinds": sorted(FINAL_KINDS),
        "dbOption": db_option,
    }
    return _document(f"longtask · {thread_id}", body, THREAD_JS, config)
