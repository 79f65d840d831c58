#!/usr/bin/env python3
"""A steady sequence of reads with the stock Python gRPC client (grpcio), for as long as
asked, counting what failed: tests/it/service_config.rs runs it while it restarts the
server under it.

Usage: retry_client.py --addr HOST:PORT (--seconds S | --calls N) [--service-config FILE]

With --service-config the channel loads that JSON as its service config (gRPC's
`grpc.service_config` channel option, retries enabled), as a mesh client would; without
it the channel has none. --seconds: a call every 20 ms for that long; --calls: that many
calls back to back. Each call is ProjectService.ListProjects of org acme, encoded by
hand (one string field), with a 10 s deadline. Writes `first call answered` to stderr
after the first success, then at the end one line `SUMMARY {json}`: calls made, failed,
the failures' codes, and the slowest call in milliseconds.
"""

import argparse
import json
import sys
import time

import grpc

METHOD = "/memmachine.v2.ProjectService/ListProjects"


def field(number, text):
    data = text.encode()
    return bytes([number << 3 | 2, len(data)]) + data


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--addr", required=True)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--calls", type=int)
    parser.add_argument("--service-config")
    args = parser.parse_args()

    options = []
    if args.service_config:
        with open(args.service_config) as f:
            config = f.read()
        json.loads(config)  # a broken file fails here, not as a silently ignored option
        options = [("grpc.service_config", config), ("grpc.enable_retries", 1)]
    channel = grpc.insecure_channel(args.addr, options=options)
    call = channel.unary_unary(
        METHOD, request_serializer=lambda r: r, response_deserializer=lambda r: r
    )
    request = field(1, "acme")

    calls, failed, codes, slowest, announced = 0, 0, {}, 0.0, False
    end = time.monotonic() + (args.seconds or 0)

    def more():
        if args.calls is not None:
            return calls < args.calls
        return time.monotonic() < end

    begun = time.monotonic()
    while more():
        started = time.monotonic()
        calls += 1
        try:
            call(request, timeout=10)
            if not announced:
                print("first call answered", file=sys.stderr, flush=True)
                announced = True
        except grpc.RpcError as err:
            failed += 1
            name = err.code().name
            codes[name] = codes.get(name, 0) + 1
            if failed <= 5:
                print(f"call {calls} failed: {name}: {err.details()}", file=sys.stderr, flush=True)
        slowest = max(slowest, time.monotonic() - started)
        if args.calls is None:
            time.sleep(0.02)
    channel.close()
    summary = {
        "calls": calls,
        "failed": failed,
        "codes": codes,
        "slowest_ms": round(slowest * 1e3),
        "total_ms": round((time.monotonic() - begun) * 1e3),
    }
    print("SUMMARY " + json.dumps(summary), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
