"""``kubectl agentrun ui``: a web UI for runs, slots and attempts, on 127.0.0.1, as the person.

:mod:`.store` keeps what it shows current from watches, :mod:`.pages` builds each page's
content (pure, from the plugin's own views), ``templates/`` render it (Jinja2, escaped),
:mod:`.server` serves it (aiohttp) with its token, origin checks and live streams, and
:mod:`.assets` records the vendored htmx files in ``static/``. Its design is
``docs/design/web-ui.md``.
"""
