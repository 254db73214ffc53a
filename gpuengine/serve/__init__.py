"""Serving language models: an OpenAI-compatible HTTP server (app.py) over one Engine whose worker thread
interleaves the decode steps of many sessions (scheduler.py), and a Ray Serve deployment of it (ray_app.py).
Needs the `serve` extra (FastAPI, uvicorn); Ray Serve the `ray` extra."""
