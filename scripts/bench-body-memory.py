"""Peak RSS of `threadline serve` while CLIENTS clients each POST one MB-megabyte OTLP
export at once (see scripts/bench-body-memory)."""
import collections
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

binary, clients, mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
now = time.time_ns()


def body(seed):
    """A valid export of about `mb` MB: spans with one 100-KB attribute each."""
    req = ExportTraceServiceRequest()
    spans = req.resource_spans.add().scope_spans.add().spans
    pad = "x" * 100_000
    for i in range(mb * 10):
        s = spans.add()
        s.trace_id = bytes([seed + 1]) * 8 + i.to_bytes(8, "big")
        s.span_id = (i + 1).to_bytes(8, "big")
        s.name = "op"
        s.start_time_unix_nano = now
        s.end_time_unix_nano = now + 1000
        s.attributes.add(key="pad", value=AnyValue(string_value=pad))
    return req.SerializeToString()


data = tempfile.mkdtemp()
log_path = data + ".log"
with open(log_path, "w") as log:
    server = subprocess.Popen(
        [binary, "serve", "--data-dir", data, "--http", "127.0.0.1:0",
         "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "127.0.0.1:0"],
        stderr=log, stdout=subprocess.DEVNULL)
try:
    port = None
    for _ in range(300):
        time.sleep(0.1)
        with open(log_path) as f:
            m = re.search(r"otlp-http listening on ([0-9.:]+)", f.read())
        if m:
            port = m.group(1)
            break
    if port is None:
        sys.exit("the server did not start")
    bodies = [body(i) for i in range(4)]
    answers = collections.Counter()

    def send(i):
        req = urllib.request.Request(
            f"http://{port}/v1/traces", data=bodies[i % 4], method="POST",
            headers={"Content-Type": "application/x-protobuf"})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                answers[r.status] += 1
        except urllib.error.HTTPError as e:
            answers[e.code] += 1
        except Exception as e:  # a broken pipe or reset is what this must not see
            answers[type(e).__name__] += 1

    started = time.time()
    threads = [threading.Thread(target=send, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(f"/proc/{server.pid}/status") as f:
        peak_mb = int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1)) // 1024
    print(f"clients                {clients}")
    print(f"body_mb                {len(bodies[0]) / 1e6:.1f}")
    print(f"server_peak_rss_mb     {peak_mb}")
    print(f"answers                {dict(sorted(answers.items(), key=str))}")
    print(f"seconds                {time.time() - started:.1f}")
finally:
    server.terminate()
    server.wait()
