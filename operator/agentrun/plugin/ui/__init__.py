"""``kubectl agentrun ui``: a web UI for runs, slots and attempts, on 127.0.0.1, as the person.

:mod:`.store` keeps what it shows current from watches, :mod:`.pages` builds each page's
content (pure, from the plugin's own views), ``templates/`` render it (Jinja2, escaped);
:mod:`.app` holds the UI's state (the store, the live streams, the token),
:mod:`.handlers` serves the pages, the live streams and the static files,
:mod:`.actions` the forms (the plugin's commands), and :mod:`.server` puts them together
behind its checks (the token, the Host, the Origin) and runs it; :mod:`.assets` records
the vendored htmx files in ``static/``. Its design is ``docs/design/web-ui.md``.
"""
