"""The real OpenAI instrumentations — OpenLLMetry's (`opentelemetry-instrumentation-openai`)
and OpenInference's (`openinference-instrumentation-openai`) — around the real `openai`
client, calling a local fake OpenAI endpoint, exporting over OTLP/HTTP to Threadline.

Each instrumentor gets its own tracer provider (service `openllmetry-app`,
`openinference-app`); under a plain HTTP server span that carries `http.route` and
`enduser.id` it makes one chat completion (the endpoint reports 10 of 30 prompt tokens
cached) and one embeddings call. Prints {"<instrumentor>": "<trace id>", ...} as JSON.

usage: openai_instrumentors.py OTLP_HTTP_BASE_URL
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

otlp = sys.argv[1].rstrip("/")


class FakeOpenAI(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length", 0))
        request = json.loads(self.rfile.read(length) or b"{}")
        if self.path.endswith("/chat/completions"):
            body = {
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1764400000,
                "model": request.get("model", "gpt-4o-mini"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "Your card was declined for a limit."}}],
                "usage": {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37,
                          "prompt_tokens_details": {"cached_tokens": 10}},
            }
        elif self.path.endswith("/embeddings"):
            body = {
                "object": "list", "model": request.get("model", "text-embedding-3-small"),
                "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2, 0.3]}],
                "usage": {"prompt_tokens": 5, "total_tokens": 5},
            }
        else:
            self.send_response(404)
            self.end_headers()
            return
        raw = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


fake = HTTPServer(("127.0.0.1", 0), FakeOpenAI)
threading.Thread(target=fake.serve_forever, daemon=True).start()

import openai  # noqa: E402  (after the fake endpoint exists)

client = openai.OpenAI(base_url=f"http://127.0.0.1:{fake.server_port}/v1", api_key="sk-test")


def run(name, instrumentor):
    provider = TracerProvider(resource=Resource.create({"service.name": f"{name}-app"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{otlp}/v1/traces")))
    instrumentor.instrument(tracer_provider=provider)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span(
        "POST /v1/support", kind=SpanKind.SERVER,
        attributes={"http.route": "/v1/support", "http.request.method": "POST", "enduser.id": f"{name}-user"},
    ) as root:
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "system", "content": "You are a bank assistant."},
                      {"role": "user", "content": "Why was my card declined?"}],
        )
        client.embeddings.create(model="text-embedding-3-small", input="card declined")
        trace_id = format(root.get_span_context().trace_id, "032x")
    instrumentor.uninstrument()
    provider.shutdown()
    return trace_id


from opentelemetry.instrumentation.openai import OpenAIInstrumentor as OpenLLMetry  # noqa: E402
from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInference  # noqa: E402

print(json.dumps({
    "openllmetry": run("openllmetry", OpenLLMetry()),
    "openinference": run("openinference", OpenInference()),
}))
