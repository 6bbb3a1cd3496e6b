"""A local S3-compatible server for the tests: moto's threaded server (installed by
scripts/setup.sh) on a free loopback port, started once per test session and stopped after."""

import os
import socket
import sys
import uuid

from moto.server import ThreadedMotoServer

# The Rust S3 tests' moto launcher: lighten() spares the server two costs per request.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "python"))
from moto_server import lighten  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3:
    def __init__(self):
        lighten()
        self.port = free_port()
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        # The keys pylance's storage_options takes; nothing comes from the environment.
        self.options = {
            "aws_endpoint": self.endpoint,
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "aws_region": "us-east-1",
            "allow_http": "true",
        }

    def bucket(self):
        """A fresh bucket; its ``s3://`` prefix."""
        import urllib.request

        name = f"la-py-{uuid.uuid4().hex[:12]}"
        req = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(req) as r:
            assert r.status == 200, r.status
        return f"s3://{name}"

    def stop(self):
        self.server.stop()
