#!/usr/bin/env python3
"""A gRPC server and client (Python grpcio) for examples/grpc.toml and trafik's gRPC tests.

Messages are raw bytes (no .proto to compile): the service kargo.Takip has one method of each
kind, and the server also answers grpc.health.v1.Health/Check, SERVING unless the file named
by --health-file says "down".

  kargo_grpc.py serve PORT [--health-file FILE]
  kargo_grpc.py call TARGET SCENARIO     (prints one JSON line per event)

Scenarios: unary, server-stream, client-stream, bidi, deadline, watch (a slow server stream:
prints each message as it comes, then the call's end, for a test to kill the server meanwhile).
"""

import json
import sys
import time
from concurrent import futures

import grpc

SERVICE = "kargo.Takip"


def serve(port, health_file):
    def ask(request, context):
        return b"yanit:" + request

    def watch(request, context):
        if request == b"slow":
            for i in range(600):
                yield b"olay-%d" % i
                time.sleep(0.1)
            return
        for i in range(int(request)):
            yield b"olay-%d" % i

    def gather(requests, context):
        return b",".join(requests)

    def chat(requests, context):
        for request in requests:
            yield b"duydum:" + request

    def slow(request, context):
        time.sleep(5)
        return b"gec"

    def health(request, context):
        down = False
        if health_file:
            try:
                with open(health_file) as f:
                    down = f.read().strip() == "down"
            except OSError:
                pass
        # HealthCheckResponse { status = SERVING (1) | NOT_SERVING (2) }
        return b"\x08\x02" if down else b"\x08\x01"

    handlers = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Sor": grpc.unary_unary_rpc_method_handler(ask),
            "Izle": grpc.unary_stream_rpc_method_handler(watch),
            "Topla": grpc.stream_unary_rpc_method_handler(gather),
            "Sohbet": grpc.stream_stream_rpc_method_handler(chat),
            "Yavas": grpc.unary_unary_rpc_method_handler(slow),
        },
    )
    health_handlers = grpc.method_handlers_generic_handler(
        "grpc.health.v1.Health",
        {"Check": grpc.unary_unary_rpc_method_handler(health)},
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    server.add_generic_rpc_handlers((handlers, health_handlers))
    server.add_insecure_port("127.0.0.1:%d" % port)
    server.start()
    print("serving on %d" % port, flush=True)
    server.wait_for_termination()


def say(**event):
    print(json.dumps(event), flush=True)


def call(target, scenario):
    channel = grpc.insecure_channel(target)
    method = lambda kind, name: getattr(channel, kind)("/%s/%s" % (SERVICE, name))
    try:
        if scenario == "unary":
            answer = method("unary_unary", "Sor")(b"TR-1", timeout=10)
            say(answer=answer.decode())
        elif scenario == "server-stream":
            answers = [m.decode() for m in method("unary_stream", "Izle")(b"5", timeout=10)]
            say(answers=answers)
        elif scenario == "client-stream":
            parts = iter([b"a", b"b", b"c", b"d"])
            answer = method("stream_unary", "Topla")(parts, timeout=10)
            say(answer=answer.decode())
        elif scenario == "bidi":
            # One message out, its answer back, then the next: each answer needs the stream
            # to flow both ways through the proxy while the call is open.
            import queue

            outgoing = queue.Queue()
            replies = method("stream_stream", "Sohbet")(iter(outgoing.get, None), timeout=10)
            answers = []
            for word in ["bir", "iki", "uc"]:
                outgoing.put(word.encode())
                answers.append(next(replies).decode())
            outgoing.put(None)
            answers.extend(m.decode() for m in replies)
            say(answers=answers)
        elif scenario == "deadline":
            method("unary_unary", "Yavas")(b"", timeout=0.5)
            say(answer="none expected")
        elif scenario == "watch":
            for message in method("unary_stream", "Izle")(b"slow", timeout=60):
                say(message=message.decode())
            say(ended="ok")
        else:
            raise SystemExit("unknown scenario " + scenario)
    except grpc.RpcError as error:
        say(code=error.code().name, details=error.details())


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        health_file = None
        if "--health-file" in sys.argv:
            health_file = sys.argv[sys.argv.index("--health-file") + 1]
        serve(int(sys.argv[2]), health_file)
    else:
        call(sys.argv[2], sys.argv[3])
