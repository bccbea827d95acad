"""`tpuedge serve DIR`: a built language model behind an OpenAI-compatible HTTP API.

- `server.py`: opens a build, warms its steps up and serves (`open_server`).
- `http_app.py`: the routes (`/v1/completions`, `/v1/chat/completions`, `/v1/models`), SSE streams.
- `openai_requests.py` / `openai_responses.py`: the API's request fields in, its JSON shapes out.
- `engine_driver.py`: the one thread that steps the continuous-batching engine.
- `completion_run.py` and `text_stream.py`: one request's tokens as text, as they come.
- `single_row_steps.py`: a batch-1 runtime (LiteRT) as steps the engine drives with one row.

The package imports only the standard library and numpy at the top; the runtimes load when a
build is opened.
"""

__all__: list[str] = []
