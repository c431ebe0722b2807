"""`memagent serve`: the page, a third front end beside the CLI and the MCP server, on the run layer.

A local web app (Starlette, served by uvicorn), its pages rendered on the server (Jinja2), what
changes sent as Server-Sent Events, and a little JavaScript of our own; it loads nothing from
outside the machine. settings.py holds what it serves with, guard.py what every request must pass,
app.py its routes, pages.py what each page shows, live.py the events of a reading as it is recorded,
evidence.py a quote's place drawn on its page, readings.py the runs the page starts.
"""
