"""A self-seeded process sampler written from docs/process-protocol.md alone (no mainboard code).

Like samplers written for gammaboard, it keeps its own random stream (seeded from its args
and the number of batches produced, both in its snapshot) and ignores the optional ``seed``.
It appends one line per event to the file ``args.log`` so a test can prove that one process
produced every batch exactly once and got the training values back in production order:
``start <pid> <counter>``, ``produce <batch id> <n>``, ``ingest <batch id> <n> <sum>``,
``plan pause``, ``remaining <value>``.

args: ``log`` (path), ``seed`` (int), ``batch_size`` (default 1000); ``pause_after`` (int:
pause once that many produced batches await their training values); ``pause_always``
(true: pause with nothing outstanding, an error the host must report); ``train`` (int:
``training_samples_remaining`` is ``train`` minus the values ingested; absent: null).
"""

import json
import os
import sys

import numpy as np


def read_frame(stream):
    """One frame: headers up to an empty line, then JSON and binary bytes (None at EOF)."""
    headers = {}
    while True:
        line = stream.readline()
        if not line:
            return None
        line = line.rstrip(b"\r\n")
        if not line:
            break
        name, _, value = line.decode("ascii").partition(":")
        headers[name.strip().lower()] = int(value.strip())
    body = stream.read(headers["content-length"])
    binary = stream.read(headers.get("binary-length", 0))
    return json.loads(body), binary


def write_frame(stream, message, binary=b""):
    body = json.dumps(message).encode()
    head = f"Content-Length: {len(body)}\r\n"
    if binary:
        head += f"Binary-Length: {len(binary)}\r\n"
    stream.write(head.encode() + b"\r\n" + body + binary)
    stream.flush()


class SelfSeeded:
    def __init__(self, params):
        self.args = params.get("args") or {}
        domain = params["domain"]
        self.dims = domain["continuous"]["dims"]
        snap = params.get("snapshot") or {}
        self.counter = int(snap.get("counter", 0))  # batches produced so far
        self.ingested = int(snap.get("ingested", 0))  # training values received so far
        self.outstanding = [tuple(b) for b in snap.get("outstanding", [])]  # (id, n) in order
        self.note(f"start {os.getpid()} {self.counter}")

    def note(self, line):
        with open(self.args["log"], "a") as f:
            f.write(line + "\n")

    def sample_plan(self, params, binary):
        after = self.args.get("pause_after")
        if self.args.get("pause_always") or (after and len(self.outstanding) >= after):
            self.note("plan pause")
            return {"plan": {"kind": "pause"}}, b""
        return {"plan": {"kind": "produce", "nr_samples": int(self.args.get("batch_size", 1000))}}, b""

    def training_samples_remaining(self, params, binary):
        train = self.args.get("train")
        value = None if train is None else max(0, int(train) - self.ingested)
        self.note(f"remaining {value}")
        return {"remaining": value}, b""

    def produce_latent_batch(self, params, binary):
        n = int(params["nr_samples"])  # params.get("seed") is ignored on purpose
        rng = np.random.default_rng([int(self.args["seed"]), self.counter])
        x = rng.random((n, self.dims))
        weights = np.ones(n)
        self.note(f"produce {self.counter} {n}")
        self.outstanding.append((self.counter, n))
        self.counter += 1
        offsets = [i * self.dims for i in range(n + 1)]
        return ({"xs_discrete_offsets": [0] * (n + 1), "xs_continuous_offsets": offsets},
                x.astype("<f8").tobytes() + weights.astype("<f8").tobytes())

    def ingest_training_values(self, params, binary):
        values = np.frombuffer(binary, dtype="<f8", count=int(params["nr_values"]))
        batch, n = self.outstanding.pop(0)
        if n != len(values):
            raise ValueError(f"batch {batch} had {n} samples, got {len(values)} values")
        self.ingested += len(values)
        self.note(f"ingest {batch} {len(values)} {float(values.sum())!r}")
        return {"ok": True}, b""

    def snapshot(self, params, binary):
        return {"snapshot": {"counter": self.counter, "ingested": self.ingested,
                             "outstanding": self.outstanding}}, b""

    def get_diagnostics(self, params, binary):
        return {"diagnostics": {"produced": self.counter, "ingested": self.ingested}}, b""


def main():
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sampler = None
    while (frame := read_frame(stdin)) is not None:
        request, binary = frame
        try:
            if request["method"] == "initialize":
                sampler = SelfSeeded(request["params"])
                result, blob = {"ok": True}, b""
            else:
                result, blob = getattr(sampler, request["method"])(request["params"], binary)
            write_frame(stdout, {"jsonrpc": "2.0", "id": request["id"], "result": result}, blob)
        except Exception as exc:  # noqa: BLE001 - every error goes back to the host
            write_frame(stdout, {"jsonrpc": "2.0", "id": request["id"],
                                 "error": {"code": -32000, "message": repr(exc)}})


if __name__ == "__main__":
    main()
