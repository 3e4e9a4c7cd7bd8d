"""The example function of deploy/compose.yaml: a webhook endpoint that
prints one JSON line per delivery keyhook makes and answers 204.

It verifies nothing (no signature check, no deduplication): it stands in
for your own function, which should at least deduplicate on webhook-id.
"""

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HEADERS = (
    "webhook-id",
    "keyhook-attempt",
    "keyhook-subscription",
    "keyhook-topic",
    "keyhook-partition",
    "keyhook-offset",
    "keyhook-key",
    "keyhook-key-base64",
    "traceparent",
)


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        line = {h: self.headers[h] for h in HEADERS if h in self.headers}
        line["path"] = self.path
        line["bytes"] = len(body)
        line["body"] = body[:200].decode("utf-8", "replace")
        print(json.dumps(line), flush=True)
        self.send_response(204)
        self.end_headers()

    def do_GET(self):
        # The compose healthcheck.
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, format, *args):
        # The JSON line above is the log; skip the default access line.
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("0.0.0.0", 8000), Hook).serve_forever()
