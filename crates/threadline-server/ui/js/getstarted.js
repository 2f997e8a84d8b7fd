// What an empty store shows instead of an empty table: where to send OTLP, a
// copy-paste snippet for the OpenTelemetry Python SDK, and a wait for the first span
// (the page reloads once one is stored).
import { html, useApi, useEffect, api } from './lib.js';

const PYTHON = `from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

provider = TracerProvider(resource=Resource.create({"service.name": "my-llm-app"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # reads OTEL_EXPORTER_OTLP_*
trace.set_tracer_provider(provider)

with trace.get_tracer("my-llm-app").start_as_current_span("chat gpt-4o-mini") as span:
    span.set_attribute("gen_ai.operation.name", "chat")
    span.set_attribute("gen_ai.request.model", "gpt-4o-mini")
    span.set_attribute("gen_ai.usage.input_tokens", 120)
    span.set_attribute("gen_ai.usage.output_tokens", 30)
provider.shutdown()  # flushes the batch`;

export function GetStarted() {
  const health = useApi('/api/v1/health');
  useEffect(() => {
    const timer = setInterval(() => {
      api('/api/v1/services').then((s) => { if (s.services.length) location.reload(); }, () => {});
    }, 3000);
    return () => clearInterval(timer);
  }, []);
  const host = location.hostname.includes(':') ? `[${location.hostname}]` : location.hostname;
  const ports = health.data && health.data.otlp ? health.data.otlp : { http_port: 4318, grpc_port: 4317 };
  const httpUrl = `http://${host}:${ports.http_port}`;
  const grpcUrl = `http://${host}:${ports.grpc_port}`;
  const headers = health.data && health.data.auth_required
    ? `\nexport OTEL_EXPORTER_OTLP_HEADERS="authorization=Bearer%20YOUR_API_KEY"` : '';
  const env = `pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
export OTEL_EXPORTER_OTLP_ENDPOINT=${httpUrl}
export OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf${headers}`;
  return html`<section class="panel get-started" aria-label="Send your first trace">
    <h2>No data yet — send your first trace</h2>
    <p>Threadline takes OpenTelemetry (OTLP) traces and logs:</p>
    <ul>
      <li>OTLP/HTTP: <code class="otlp-http">${httpUrl}/v1/traces</code> and <code>/v1/logs</code> (protobuf or JSON)</li>
      <li>OTLP/gRPC: <code class="otlp-grpc">${grpcUrl}</code></li>
      <li>OpenLineage events: <code>POST ${location.origin}/api/v1/lineage</code></li>
    </ul>
    <p>With the OpenTelemetry Python SDK, point the exporter here:</p>
    <pre class="snippet"><code>${env}</code></pre>
    <pre class="snippet"><code>${PYTHON}</code></pre>
    <p class="muted">Or see a whole platform at once: <code>threadline demo</code>. This page waits for the
      first span and shows it as soon as it is stored.</p>
    <p class="loading waiting" aria-live="polite">Waiting for the first span…</p>
  </section>`;
}
