"""llama-cpp-python's OpenAI-compatible server (built from PyPI by `make test-llm`) serving the
tiny model, and a proxy in front of it that records what it sent back: each answer's text and
how it ended, as the server said it."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from devtools.processes import ChildProcess
from devtools.redis_server import free_port
from tests.helpers.processes import artifact
from tests.helpers.waiting import wait_for

MODEL = "tiny"


class LlamaServer(ChildProcess):
    """With its defaults, but for the window: `interrupt_requests` is on, as it is out of the
    box (a new request ends the stream being answered)."""

    def __init__(self, model: Path, *, context_tokens: int = 512, **options: str) -> None:
        self.port = free_port()
        flags = {"n_ctx": str(context_tokens), **options}
        argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(model)]
        argv += ["--model_alias", MODEL, "--host", "127.0.0.1", "--port", str(self.port)]
        argv += [part for name, value in flags.items() for part in (f"--{name}", value)]
        super().__init__(argv, env=dict(os.environ), log_path=artifact("llama-server"))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, ready_within: float = 60) -> LlamaServer:
        super().start()

        def answers() -> bool:
            assert self.alive(), f"llama server exited: {self.log_path.read_text()[-2000:]}"
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"{self.url}/v1/models", timeout=1).is_success
            return False

        wait_for(answers, timeout=ready_within, what="the llama server answers")
        return self


class RecordingProxy:
    """Passes every request to `upstream` and its answer back as it comes, byte for byte, and
    records each chat completion: `{"stream", "text", "finish_reason", "status", "asked"}`
    (`asked`: the request's body), and `"broken"` when the server dropped it before its end."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.answers: list[dict] = []
        self.lock = threading.Lock()
        self.barrier: threading.Barrier | None = None
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), proxy_handler(self))
        self.server.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> RecordingProxy:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def gather(self, requests: int) -> None:
        """Hold the next `requests` chat completions until all have come, then pass them on
        together: the server gets them within a millisecond of each other."""
        self.barrier = threading.Barrier(requests, timeout=30)

    def record(self, answer: dict) -> None:
        with self.lock:
            self.answers.append(answer)

    def streamed(self) -> list[dict]:
        with self.lock:
            return [answer for answer in self.answers if answer["stream"]]


def proxy_handler(proxy: RecordingProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # chunked, as the server sends it

        def log_message(self, format: str, *args) -> None:
            pass

        def do_GET(self) -> None:
            self.relay(None)

        def do_POST(self) -> None:
            self.relay(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        def relay(self, body: bytes | None) -> None:
            chat = self.path.startswith("/v1/chat/completions")
            asked = json.loads(body or b"{}") if chat else {}
            if chat and (barrier := proxy.barrier) is not None:
                with contextlib.suppress(threading.BrokenBarrierError):
                    if barrier.wait() == 0:
                        proxy.barrier = None
            headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
            answer = {"stream": bool(asked.get("stream")), "text": "", "finish_reason": None}
            received = b""
            with (
                httpx.Client(timeout=None) as http,
                http.stream(
                    self.command, proxy.upstream + self.path, content=body, headers=headers
                ) as upstream,
            ):
                answer["status"] = upstream.status_code
                self.send_response(upstream.status_code)
                self.send_header("Content-Type", upstream.headers.get("content-type", ""))
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")  # one request per connection
                self.end_headers()
                try:
                    for part in upstream.iter_raw():
                        received += part
                        self.chunk(part)
                    self.chunk(b"")
                except httpx.HTTPError:
                    # The server dropped its answer mid-body: so does the proxy, as abruptly.
                    answer["broken"] = True
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client left (Stop): closing upstream tells the server to stop
                self.close_connection = True
            if chat:
                told = read_answer(received, stream=answer["stream"])
                proxy.record({**answer, **told, "asked": asked})

        def chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler


def read_answer(received: bytes, *, stream: bool) -> dict:
    """The text and `finish_reason` of a chat completion, streamed (SSE) or not."""
    if not stream:
        with contextlib.suppress(ValueError, KeyError, IndexError):
            choice = json.loads(received)["choices"][0]
            return {"text": choice["message"]["content"], "finish_reason": choice["finish_reason"]}
        return {}
    text, finish = "", None
    for line in received.decode(errors="replace").splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for choice in json.loads(line[len("data: ") :]).get("choices") or []:
            text += (choice.get("delta") or {}).get("content") or ""
            finish = choice.get("finish_reason") or finish
    return {"text": text, "finish_reason": finish}
