"""A scripted OpenAI-compatible endpoint for MemMachine's own server in the differential
comparison: deterministic embeddings (hashed words) and a chat model that extracts
nothing. MemMachine needs both to turn semantic memory on; no paid service is reached.

    python3 fake_openai.py PORT
"""

import hashlib
import json
import math
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DIMENSIONS = 64


def embed(text):
    vector = [0.0] * DIMENSIONS
    for word in text.lower().split():
        digest = hashlib.sha256(word.encode()).digest()
        vector[digest[0] % DIMENSIONS] += 1.0 if digest[1] % 2 else -1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    if norm == 1.0 and not any(vector):
        vector[0] = 1.0
    return [v / norm for v in vector]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        if self.path.endswith("/embeddings"):
            inputs = request.get("input")
            inputs = [inputs] if isinstance(inputs, str) else inputs or []
            body = {
                "object": "list",
                "model": request.get("model", "fake"),
                "data": [
                    {"object": "embedding", "index": i, "embedding": embed(str(text))}
                    for i, text in enumerate(inputs)
                ],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }
        elif self.path.endswith("/chat/completions"):
            body = {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": 0,
                "model": request.get("model", "fake"),
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": '{"commands": []}'},
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
