"""`memagent serve`: the page, a third front end beside the CLI and the MCP server, on the run layer.

A local web app (Starlette, served by uvicorn), its pages rendered on the server (Jinja2), what
changes sent as Server-Sent Events, and a little JavaScript of our own; it loads nothing from
outside the machine. page_settings.py holds what it serves with, gate.py what every request must
pass, asgi.py its routes, pages.py and views.py what each page shows, browse.py the folders it may
list, updates.py the events of a reading as it is recorded, evidence.py a quote's place drawn on its
page, readings.py the runs the page starts.
"""
