"""Sends one LLM-shaped trace over each OTLP exporter of the real OpenTelemetry Python SDK
(HTTP/protobuf and gRPC), with the LLM call's prompt and completion also sent as GenAI
log events (the SDK's log exporters, same endpoint), and prints the trace ids as JSON.
Used by the end-to-end tests."""

import argparse
import json

from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode


def send(exporter, log_exporter, transport):
    resource = Resource.create(
        {
            "service.name": f"py-chat-{transport}",
            "container.image.name": "ghcr.io/acme/chat",
            "container.image.tags": ["v1.4.0"],
        }
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    logs = LoggerProvider(resource=resource)
    logs.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
    logger = logs.get_logger("threadline-e2e.genai")
    tracer = provider.get_tracer("threadline-e2e", "1.0")
    with tracer.start_as_current_span("POST /v1/chat/completions", kind=SpanKind.SERVER) as root:
        root.set_attribute("api.route", "/v1/chat/completions")
        root.set_attribute("ab.group", "B")
        trace_id = format(root.get_span_context().trace_id, "032x")
        with tracer.start_as_current_span("chat llama-3-8b", kind=SpanKind.CLIENT) as llm:
            llm.set_attribute("gen_ai.operation.name", "chat")
            llm.set_attribute("gen_ai.provider.name", "openai")
            llm.set_attribute("gen_ai.request.model", "meta-llama/Meta-Llama-3-8B-Instruct")
            llm.set_attribute("gen_ai.usage.input_tokens", 812)
            llm.set_attribute("gen_ai.usage.output_tokens", 97)
            llm.set_attribute("gen_ai.response.finish_reasons", ["stop"])
            llm.set_attribute("gen_ai.response.time_to_first_chunk", 0.21)
            llm.set_attribute("llm.lora.adapter_id", "fin-lora@7")
            llm.set_attribute("model.instance.id", "inst-3")
            llm.set_attribute("llm.prompt.version", "v2.1.4")
            llm.set_attribute("llm.kvcache.hit_ratio", 0.75)
            llm.set_attribute("gen_ai.prompt.0.role", "user")
            llm.set_attribute("gen_ai.prompt.0.content", "Why was my invoice charged twice?")
            llm.add_event("gen_ai.content.first_token", {"token.index": 0})
            logger.emit(
                event_name="gen_ai.user.message",
                severity_number=SeverityNumber.INFO,
                body={"role": "user", "content": "Can I get a refund for the double charge?"},
                attributes={"gen_ai.provider.name": "openai"},
            )
            logger.emit(
                event_name="gen_ai.choice",
                severity_number=SeverityNumber.INFO,
                body={"index": 0, "finish_reason": "stop",
                      "message": {"role": "assistant", "content": "Yes: the refund is on its way."}},
            )
        with tracer.start_as_current_span("execute_tool lookup_account") as tool:
            tool.set_attribute("gen_ai.operation.name", "execute_tool")
            tool.set_attribute("gen_ai.tool.name", "lookup_account")
            tool.set_status(Status(StatusCode.ERROR, "account service unavailable"))
            logger.emit(severity_number=SeverityNumber.WARN, body="retrying the model once")
    provider.shutdown()
    logs.shutdown()
    return trace_id


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", required=True, help="OTLP/HTTP base URL")
    parser.add_argument("--grpc", required=True, help="OTLP/gRPC host:port")
    parser.add_argument("--api-key", default=None)
    args = parser.parse_args()
    headers = {"authorization": f"Bearer {args.api_key}"} if args.api_key else None
    http_id = send(
        HttpExporter(endpoint=f"{args.http}/v1/traces", headers=headers),
        HttpLogExporter(endpoint=f"{args.http}/v1/logs", headers=headers),
        "http",
    )
    grpc_id = send(
        GrpcExporter(endpoint=args.grpc, insecure=True, headers=headers),
        GrpcLogExporter(endpoint=args.grpc, insecure=True, headers=headers),
        "grpc",
    )
    print(json.dumps({"http": http_id, "grpc": grpc_id}))


if __name__ == "__main__":
    main()
