"""An evaluator process that answers ``initialize`` properly and then misbehaves on purpose.

Usage: ``misbehave.py MODE [MARKER_FILE]``. Standard library only (fast to start). In mode
``ok`` it is a correct evaluator of sin(x0); every other mode breaks one rule of the
protocol on ``eval_batch`` (or on shutdown), so the host's handling of it can be tested.
"""

from __future__ import annotations

import json
import math
import os
import signal
import struct
import sys
import time

MODE = sys.argv[1]
OUT = sys.stdout.buffer
IN = sys.stdin.buffer
SHAPE = {"k": 0, "d": 1, "m": 1}


def read_frame() -> tuple[dict, bytes] | None:
    length, binary = None, 0
    while True:
        line = IN.readline()
        if not line:
            return None
        name, _, value = line.decode().strip().partition(":")
        if not name and length is not None:
            if MODE == "exit_unread" and binary:  # leaves the request in the pipe, unread
                os._exit(6)
            break
        if name.lower() == "content-length":
            length = int(value)
        elif name.lower() == "binary-length":
            binary = int(value)
    return json.loads(IN.read(length)), IN.read(binary)


def send(message: dict, blob: bytes = b"", json_length: int | None = None,
         names: tuple[str, str] = ("Content-Length", "Binary-Length")) -> None:
    body = json.dumps(message).encode()
    head = f"{names[0]}: {len(body) if json_length is None else json_length}\r\n"
    if blob:
        head += f"{names[1]}: {len(blob)}\r\n"
    OUT.write(head.encode() + b"\r\n" + body + blob)
    OUT.flush()


def values(params: dict, blob: bytes, value: float | None = None) -> bytes:
    n, k, d, m = params["nr_samples"], SHAPE["k"], SHAPE["d"], SHAPE["m"]
    xs = struct.unpack(f"<{n * d}d", blob[8 * n * k:])
    out = [value if value is not None else math.sin(xs[i * d]) for i in range(n) for _ in range(m)]
    return struct.pack(f"<{len(out)}d", *out)


def initialize(req: dict) -> None:
    if MODE == "init_exit":
        os._exit(5)
    if MODE == "init_remote":
        send({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32000,
                                                          "message": "no licence file"}})
        return
    if MODE == "init_refused":
        send({"jsonrpc": "2.0", "id": req["id"], "result": {"ok": False, "why": "no licence"}})
        return
    domain = req["params"]["domain"]
    if "continuous" in domain:
        SHAPE["d"] = domain["continuous"]["dims"]
    else:
        SHAPE["k"] = len(domain["rectangular"]["discrete_cardinalities"])
        SHAPE["d"] = domain["rectangular"]["continuous_dims"]
    SHAPE["m"] = len(req["params"].get("components") or ["value"])
    send({"jsonrpc": "2.0", "id": req["id"], "result": {"ok": True, "metadata": {"m": MODE}}})


def misbehave(req: dict, blob: bytes) -> None:
    rid, params = req["id"], req["params"]
    ok = {"jsonrpc": "2.0", "id": rid, "result": {}}
    if MODE in ("ok", "exit_after"):
        send(ok, values(params, blob))
        if MODE == "exit_after":
            sys.exit(0)
    elif MODE == "bad_header":
        OUT.write(b"Content-Length: abc\r\n\r\n{}")
        OUT.flush()
    elif MODE == "short_length":
        send(ok, values(params, blob), json_length=len(json.dumps(ok)) - 5)
    elif MODE == "long_length_exit":
        send(ok, json_length=len(json.dumps(ok)) + 100)
        sys.exit(0)
    elif MODE == "huge_json":
        OUT.write(b"Content-Length: 17000000\r\n\r\n")
        OUT.flush()
    elif MODE == "huge_binary":
        OUT.write(b"Content-Length: 2\r\nBinary-Length: 300000000\r\n\r\n{}")
        OUT.flush()
    elif MODE == "long_line":
        OUT.write(b"x" * 9000)
        OUT.flush()
    elif MODE in ("stray_small", "stray_flood"):
        for i in range(3 if MODE == "stray_small" else 1200):
            OUT.write(f"debug output line {i} written to stdout by mistake {'.' * 40}\n".encode())
        OUT.flush()
        send(ok, values(params, blob))
    elif MODE == "wrong_id":
        send({**ok, "id": rid + 1}, values(params, blob))
    elif MODE == "both":
        send({**ok, "error": {"code": -32000, "message": "also an error"}})
    elif MODE == "no_jsonrpc":
        send({"id": rid, "result": {}}, values(params, blob))
    elif MODE == "hang":
        time.sleep(120)
    elif MODE == "exit":
        sys.stderr.write("boom: something fatal happened in the integrand\n")
        sys.stderr.flush()
        os._exit(3)
    elif MODE == "crash_once":
        if not os.path.exists(sys.argv[2]):
            open(sys.argv[2], "w").close()
            os._exit(4)
        send(ok, values(params, blob))
    elif MODE == "nan":
        send(ok, values(params, blob, float("nan")))
    elif MODE == "short_values":
        send(ok, values(params, blob)[:-8])
    elif MODE == "remote_error":
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": "ValueError: bad x",
                                                     "data": {"traceback": "File eval.py, line 7"}}})
    elif MODE == "notify_and_case":
        send({"jsonrpc": "2.0", "method": "progress", "params": {"activity": "warming up"}})
        send(ok, values(params, blob), names=("content-length", "BINARY-LENGTH"))
    elif MODE == "partial_exit":
        OUT.write(b"Content-Len")
        OUT.flush()
        os._exit(0)
    elif MODE in ("blank_stray", "other_header"):
        body = json.dumps({**ok, "result": {}}).encode()
        extra = b"X-Note: hi\r\n" if MODE == "other_header" else b""
        blob_out = values(params, blob)
        OUT.write(b"\n" * (MODE == "blank_stray") + b"Content-Length: %d\r\n" % len(body)
                  + extra + b"Binary-Length: %d\r\n\r\n" % len(blob_out) + body + blob_out)
        OUT.flush()
    elif MODE == "bad_header_line":
        OUT.write(b"Content-Length: 2\r\nGarbage\r\n\r\n{}")
        OUT.flush()
    elif MODE == "long_line_nl":
        OUT.write(b"x" * 9000 + b"\n")
        OUT.flush()
    elif MODE == "long_stderr":
        sys.stderr.write("y" * 10000 + "\nafter the long line\n")
        sys.stderr.flush()
        send(ok, values(params, blob))
    elif MODE == "logs":
        for level in ("trace", "debug", "info", "warn", "error"):
            sys.stderr.write(f"@gblog\t{level}\tmessage at {level}\n")
        sys.stderr.write(f"plain line with secret {os.environ.get('MB_TEST_PASSWORD')}\n")
        sys.stderr.flush()
        send(ok, values(params, blob))
    elif MODE == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        send(ok, values(params, blob))
        IN.read()                  # EOF on stdin ...
        time.sleep(120)            # ... ignored, and SIGTERM too: only SIGKILL ends it
    elif MODE == "not_object":
        OUT.write(b"Content-Length: 3\r\n\r\n[1]")
        OUT.flush()
    elif MODE == "bad_error":
        send({"jsonrpc": "2.0", "id": rid, "error": "oops"})
    elif MODE == "result_list":
        send({"jsonrpc": "2.0", "id": rid, "result": [1]})
    elif MODE == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    elif MODE == "close_stdout":
        OUT.close()
        os.close(1)
        time.sleep(120)


def json_batch(req: dict) -> None:
    """transform_batch / materialize_batch answered with a batch broken as MODE says."""
    n, k, d = req["params"]["nr_samples"], SHAPE["k"], SHAPE["d"]
    batch = {"xs_discrete_row_major": [0] * (n * k), "xs_discrete_offsets": [i * k for i in range(n + 1)],
             "xs_continuous_row_major": [0.5] * (n * d),
             "xs_continuous_offsets": [i * d for i in range(n + 1)], "weights": [1.0] * n}
    if MODE == "outside":
        batch["xs_continuous_row_major"][-1] = 1.5
    elif MODE == "offsets":
        batch["xs_continuous_offsets"][1] += 1
    elif MODE == "weights":
        batch["weights"][0] = 0.0
    elif MODE == "types":
        batch["xs_continuous_row_major"][0] = "0.5"
    elif MODE == "count":
        batch["weights"].pop()
    elif MODE == "no_lists":
        batch = {"weights": batch["weights"]}
    elif MODE == "huge_int":
        batch["xs_discrete_row_major"] = [2**70] * (n * k)
    elif MODE == "discrete_range":
        batch["xs_discrete_row_major"][0] = 99
    send({"jsonrpc": "2.0", "id": req["id"], "result": batch})


def produce(req: dict) -> None:
    """produce_latent_batch answered with a binary block broken as MODE says."""
    n, k, d = req["params"]["nr_samples"], SHAPE["k"], SHAPE["d"]
    weights = [-1.0 if MODE == "weights" and i == 0 else 1.0 for i in range(n)]
    blob = struct.pack(f"<{n * k}q{n * d}d{n}d", *([0] * (n * k)), *([0.25] * (n * d)), *weights)
    result = {"xs_continuous_offsets": [0]} if MODE == "sampler_offsets" else {}
    send({"jsonrpc": "2.0", "id": req["id"], "result": result},
         blob[:-8] if MODE == "short" else blob)


def sampler_question(req: dict) -> None:
    """sample_plan / training_samples_remaining answered as MODE says."""
    if req["method"] == "sample_plan":
        result = {"plan": {"kind": "produce", "nr_samples": 0} if MODE == "bad_plan"
                  else {"kind": "pause"}}
    else:
        result = {"remaining": -1 if MODE == "bad_remaining" else 5}
    send({"jsonrpc": "2.0", "id": req["id"], "result": result})


def main() -> None:
    while (frame := read_frame()) is not None:
        req, blob = frame
        if req["method"] == "initialize":
            initialize(req)
        elif MODE in ("exit", "hang"):
            misbehave(req, blob)
        elif req["method"] in ("transform_batch", "materialize_batch"):
            json_batch(req)
        elif req["method"] == "produce_latent_batch":
            produce(req)
        elif req["method"] in ("sample_plan", "training_samples_remaining"):
            sampler_question(req)
        else:
            misbehave(req, blob)


if __name__ == "__main__":
    main()
