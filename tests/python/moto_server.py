"""moto's S3 server, as `python -m moto.server` runs it, less two costs that moto 5.2.5 pays on
every request and the tests do not need. The S3 tests (tests/s3/server.rs) start it as
`python tests/python/moto_server.py -H 127.0.0.1 -p PORT`; pytest's in-process server
(python/tests/s3server.py) calls `lighten()` before it starts.

Measured with cProfile over 900 requests (GET, LIST, HEAD), a quarter of the server's time went to
one line of moto's request dispatcher, `host in list_of_moto_modules()`: a generator that lists
moto's package directory and stats each of its entries, again for every request. The directory
does not change while the server runs, so the list is taken once. werkzeug's line per request
(sent to /dev/null by the tests) is not formatted at all. A boto3 loop of GET, LIST, HEAD and PUT
requests (800, twice, 2026-12-02, load average 3): 4.3 and 4.4 ms of the server's CPU per request
with `python -m moto.server`, 2.7 and 2.9 ms through this file."""

import logging
import sys

import moto.backends as backends


def lighten():
    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules
    logging.getLogger("werkzeug").setLevel(logging.ERROR)


if __name__ == "__main__":
    from moto.server import main

    lighten()
    main(sys.argv[1:])
