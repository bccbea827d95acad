"""`tpuedge serve`: the OpenAI-compatible server over real builds, spoken to over real sockets
with the standard library's HTTP client. A cloud-tpu build decodes concurrent requests together
(continuous batching on XLA); an android build serves one at a time on LiteRT. Each must give
the tokens its artifact's own `generate` gives."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import tiny_lms
from cli_runner import run_cli

import tpuedge
from tpuedge.serve.server import open_server
from tpuedge.serve.text_stream import TextStream
from tpuedge.shared_ir.errors import UserError
from tpuedge.shared_ir.generative.tokenizer import Tokenizer

CACHE = 256
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_lms.write_folder(tmp_path_factory.mktemp("tiny-llama") / "tiny-llama")


@pytest.fixture(scope="module")
def cloud_build(folder, tmp_path_factory):
    from tpuedge.shared_ir.model_spec import load_program

    out = tmp_path_factory.mktemp("cloud") / "cloud-tpu"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TPUEDGE_LIBTPU", "off")  # the portable steps are what a server runs; no TPU memory plan
        load_program(str(folder), {"prefill_lengths": "8", "cache_length": CACHE}).lower("cloud-tpu").compile(out)
    return out


@pytest.fixture(scope="module")
def android_build(folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("android") / "android"
    code, _, err = run_cli(
        "build",
        str(folder),
        "--target",
        "android",
        "--quantize",
        "none",
        "--prefill-lengths",
        "8",
        "--cache-length",
        str(CACHE),
        "--out",
        str(out),
    )
    assert code == 0, err
    return out


class Running:
    """A server on a free port, serving from a background thread."""

    def __init__(self, build, **options):
        self.artifact = tpuedge.load(build)
        self.log: list[str] = []
        self.server = open_server(self.artifact, port=0, log=self.log.append, **options)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.close()
        self.thread.join(10)

    def connect(self, timeout: float = 60) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def call(self, method: str, path: str, body=None, raw: bytes | None = None) -> tuple[int, dict]:
        connection = self.connect()
        try:
            data = raw if raw is not None else None if body is None else json.dumps(body).encode()
            connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()

    def stream(self, path: str, body: dict) -> list:
        """The SSE events' data, parsed ('[DONE]' kept as the string)."""
        connection = self.connect()
        try:
            connection.request("POST", path, body=json.dumps({**body, "stream": True}))
            response = connection.getresponse()
            assert response.status == 200 and response.getheader("Content-Type") == "text/event-stream"
            events = []
            for line in response.read().decode().split("\n\n"):
                if line.startswith("data: "):
                    events.append(line[6:] if line == "data: [DONE]" else json.loads(line[6:]))
            return events
        finally:
            connection.close()


@pytest.fixture(scope="module")
def cloud(cloud_build):
    running = Running(cloud_build, slots=8)
    yield running
    running.close()


def expected(
    artifact, prompt, max_tokens: int, *, chat_messages=None, skip_special_tokens=True
) -> tuple[str, str, int, int]:
    """(text, finish_reason, prompt tokens, completion tokens) of the artifact's own greedy generate."""
    tokenizer = artifact.tokenizer
    ids = tokenizer.encode(tokenizer.render_chat(chat_messages)) if chat_messages else artifact.encode_prompt(prompt)
    generation = artifact.generate(ids, max_tokens).generation
    new = generation.new_ids
    text_ids = new[:-1] if generation.stopped_by == "eos" else new
    return (
        tokenizer.decode(text_ids, skip_special_tokens=skip_special_tokens),
        ("stop" if generation.stopped_by == "eos" else "length"),
        len(ids),
        len(new),
    )


def test_a_completion_is_the_artifacts_greedy_text_with_its_usage(cloud):
    text, finish, prompt_tokens, new_tokens = expected(cloud.artifact, PROMPT, 24)
    status, body = cloud.call(
        "POST",
        "/v1/completions",
        {"model": "tiny-llama", "prompt": PROMPT, "max_tokens": 24, "temperature": 0, "user": "ignored"},
    )
    assert status == 200, body
    assert body["object"] == "text_completion" and body["model"] == "tiny-llama"
    assert body["choices"][0]["text"] == text and body["choices"][0]["finish_reason"] == finish
    assert body["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": new_tokens,
        "total_tokens": prompt_tokens + new_tokens,
    }
    ids = cloud.artifact.encode_prompt(PROMPT)
    status, by_ids = cloud.call("POST", "/v1/completions", {"prompt": ids, "max_tokens": 24, "temperature": 0})
    assert status == 200 and by_ids["choices"][0]["text"] == text
    # special tokens' text is left out unless asked for (this random model says <|end|> 12 tokens on)
    with_special = expected(cloud.artifact, "Once upon a time", 16, skip_special_tokens=False)[0]
    assert "<|end|>" in with_special
    assert with_special.replace("<|end|>", "") == expected(cloud.artifact, "Once upon a time", 16)[0]
    status, body = cloud.call(
        "POST",
        "/v1/completions",
        {"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0, "skip_special_tokens": False},
    )
    assert status == 200 and body["choices"][0]["text"] == with_special
    status, models = cloud.call("GET", "/v1/models")
    assert status == 200 and [m["id"] for m in models["data"]] == ["tiny-llama"]


def test_a_stream_gives_the_same_text_in_pieces_ending_with_done(cloud):
    text, finish, prompt_tokens, new_tokens = expected(cloud.artifact, PROMPT, 24)
    events = cloud.stream(
        "/v1/completions",
        {"prompt": PROMPT, "max_tokens": 24, "temperature": 0, "stream_options": {"include_usage": True}},
    )
    assert events[-1] == "[DONE]"
    chunks, usage = events[:-2], events[-2]
    assert len(chunks) > 3 and all(c["object"] == "text_completion" for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == text
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == finish
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == new_tokens


def test_eight_concurrent_clients_each_get_the_tokens_they_get_alone(cloud):
    prompts = [
        PROMPT,
        "Once upon a time",
        "tpuedge builds one model for",
        "a",
        "The weights are stored once",
        "Hello",
        "Quantization is a transform of the IR, and",
        "x y z",
    ]
    wanted = [expected(cloud.artifact, p, 20 + i) for i, p in enumerate(prompts)]
    got: list = [None] * len(prompts)
    start = threading.Barrier(len(prompts))

    def client(i):
        start.wait()
        body = {"prompt": prompts[i], "max_tokens": 20 + i, "temperature": 0}
        if i % 2:
            events = cloud.stream("/v1/completions", body)
            got[i] = "".join(e["choices"][0]["text"] for e in events[:-1])
        else:
            got[i] = cloud.call("POST", "/v1/completions", body)[1]["choices"][0]["text"]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert got == [w[0] for w in wanted]
    assert cloud.server.driver.peak_active >= 4  # they decoded together, not one after another


def test_a_client_that_leaves_mid_stream_frees_its_row(cloud):
    connection = cloud.connect()
    connection.request(
        "POST",
        "/v1/completions",
        body=json.dumps({"prompt": PROMPT, "max_tokens": 240, "temperature": 0, "ignore_eos": True, "stream": True}),
    )
    response = connection.getresponse()
    assert response.readline().startswith(b"data: ")  # the first two events arrive...
    response.readline()
    assert response.readline().startswith(b"data: ")
    connection.close()  # ...and the client hangs up
    driver = cloud.server.driver
    deadline = time.monotonic() + 10
    while driver.active_count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert driver.active_count == 0
    left = [r for r in driver.finished if r.max_new_tokens == 240][-1]
    assert left.stopped_by == "cancelled" and len(left.new_ids) < 240
    status, body = cloud.call("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 4, "temperature": 0})
    assert status == 200 and body["usage"]["completion_tokens"] == 4


def test_bad_requests_get_a_clear_400_or_404_and_the_server_keeps_serving(cloud):
    status, body = cloud.call("POST", "/v1/completions", {"prompt": [5] * 300, "max_tokens": 4})
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    assert "300 tokens" in body["error"]["message"] and "--cache-length 256" in body["error"]["message"]
    room = CACHE - len(cloud.artifact.encode_prompt(PROMPT))
    status, body = cloud.call("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": room + 1})
    assert status == 400 and body["error"]["param"] == "max_tokens"
    assert f"max_tokens at most {room}" in body["error"]["message"]
    status, body = cloud.call("POST", "/v1/completions", raw=b'{"prompt": "x",')
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    for request, param in (
        ({"prompt": PROMPT, "n": 2}, "n"),
        ({"prompt": PROMPT, "top_p": 0.9}, "top_p"),
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"prompt": [1, 10_000]}, "prompt"),
        ({"max_tokens": 3}, "prompt"),
    ):
        status, body = cloud.call("POST", "/v1/completions", request)
        assert status == 400 and body["error"]["param"] == param, body
    status, body = cloud.call(
        "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}
    )
    assert status == 400 and "text" in body["error"]["message"]
    assert cloud.call("GET", "/v1/nothing")[0] == 404
    assert cloud.call("GET", "/v1/completions")[0] == 405
    text = expected(cloud.artifact, PROMPT, 6)[0]
    status, body = cloud.call("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 6, "temperature": 0})
    assert status == 200 and body["choices"][0]["text"] == text


def test_chat_renders_the_messages_with_the_models_template(cloud):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    text, finish, prompt_tokens, _ = expected(cloud.artifact, None, 16, chat_messages=messages)
    status, body = cloud.call(
        "POST", "/v1/chat/completions", {"messages": messages, "max_tokens": 16, "temperature": 0}
    )
    assert status == 200, body
    assert body["object"] == "chat.completion" and body["choices"][0]["message"] == {
        "role": "assistant",
        "content": text,
    }
    assert body["choices"][0]["finish_reason"] == finish and body["usage"]["prompt_tokens"] == prompt_tokens
    events = cloud.stream("/v1/chat/completions", {"messages": messages, "max_completion_tokens": 16, "temperature": 0})
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(e["object"] == "chat.completion.chunk" for e in events[:-1])
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1]) == text


def test_a_stop_string_ends_the_text_before_it(cloud):
    full = expected(cloud.artifact, PROMPT, 24)[0]
    stop = full[8:10]
    status, body = cloud.call(
        "POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 24, "temperature": 0, "stop": [stop]}
    )
    assert status == 200 and body["choices"][0]["text"] == full[: full.index(stop)]
    assert body["choices"][0]["finish_reason"] == "stop" and body["usage"]["completion_tokens"] < 24
    events = cloud.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 24, "temperature": 0, "stop": stop})
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == full[: full.index(stop)]


def test_sampling_with_a_seed_repeats_and_differs_from_greedy(cloud):
    body = {"prompt": PROMPT, "max_tokens": 16, "temperature": 1.5, "top_k": 50, "seed": 7}
    first, second = (cloud.call("POST", "/v1/completions", body)[1]["choices"][0]["text"] for _ in range(2))
    greedy = expected(cloud.artifact, PROMPT, 16)[0]
    assert first == second != greedy
    # values at the edges are read, not passed on to fail inside the shared decode step
    assert cloud.call("POST", "/v1/completions", {**body, "temperature": 1e-9})[1]["choices"][0]["text"] == greedy
    for edge in ({"top_k": 100_000}, {"seed": -3}):
        assert cloud.call("POST", "/v1/completions", {**body, **edge})[0] == 200


def test_text_pieces_hold_back_split_characters_and_stop_prefixes():
    tokenizer = Tokenizer(tiny_lms.tokenizer_json(), eos_token_ids=(0,))
    text = "déjà vu: 3€ — naïve ✓ END tail"
    ids = tokenizer.encode(text)
    stream = TextStream(tokenizer)
    pieces = [stream.push(i) for i in ids] + [stream.finish()]
    assert "".join(pieces) == tokenizer.decode(ids) and not any("\ufffd" in p for p in pieces)
    stopping = TextStream(tokenizer, ("END",))
    pieces = [stopping.push(i) for i in ids] + [stopping.finish()]
    assert "".join(pieces) == text[: text.index("END")] and stopping.stopped


def test_an_android_build_serves_one_request_at_a_time_with_litert_generates_tokens(android_build):
    android = Running(android_build, slots=8)
    try:
        assert android.server.driver.slots == 1
        prompts = [PROMPT, "Once upon a time", "Hello"]
        wanted = [expected(android.artifact, p, 12)[0] for p in prompts]
        got = [None] * 3

        def client(i):
            got[i] = android.call(
                "POST", "/v1/completions", {"prompt": prompts[i], "max_tokens": 12, "temperature": 0}
            )[1]

        threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [g["choices"][0]["text"] for g in got] == wanted
        assert android.server.driver.peak_active == 1
    finally:
        android.close()


def test_the_command_serves_until_ctrl_c_and_refuses_what_it_cannot_serve(android_build, folder):
    code, _, err = run_cli("serve", str(folder))
    assert code == 2 and "Traceback" not in err
    with socket.socket() as holder:  # a port someone else holds
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        code, _, err = run_cli("serve", str(android_build), "--port", str(holder.getsockname()[1]))
    assert code == 2 and "choose another --port" in err
    child = subprocess.Popen(
        [sys.executable, "-m", "tpuedge.cli", "serve", str(android_build), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        line = ""
        while "serving" not in line:
            line = child.stdout.readline()
            assert line, child.stderr.read()[-3000:]
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request("POST", "/v1/completions", body=json.dumps({"prompt": PROMPT, "max_tokens": 3}))
        assert connection.getresponse().status == 200
        connection.close()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)  # a loaded 2-core machine exits slowly
    finally:
        child.kill() if child.poll() is None else None
    assert child.returncode == 0, err[-3000:]
    assert "stopped" in out and "Traceback" not in err


def test_a_chat_template_that_refuses_the_messages_says_so():
    template = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversations must start with a user turn') }}{% endif %}"
    tokenizer = Tokenizer(tiny_lms.tokenizer_json(), chat_template=template + tiny_lms.CHAT_TEMPLATE)
    assert (
        tokenizer.render_chat([{"role": "user", "content": "hi"}])
        == tokenizer.chat_prompt("hi")
        == "<|user|>hi<|end|><|assistant|>"
    )
    with pytest.raises(UserError, match="must start with a user turn"):
        tokenizer.render_chat([{"role": "assistant", "content": "hi"}])
