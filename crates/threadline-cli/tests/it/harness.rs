//! Starts and stops the real server binary and gives tests typed helpers around it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use serde_json::Value;

use crate::disk::{files_under, holds_in_clickhouse_blocks, holds_raw_or_in_zstd};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_threadline");

/// Whether this run of the suite is on ClickHouse (`THREADLINE_TEST_STORE=clickhouse`;
/// `scripts/test` runs the suite once on each backend).
pub(crate) fn on_clickhouse() -> bool {
    std::env::var("THREADLINE_TEST_STORE").as_deref() == Ok("clickhouse")
}

/// The `--store` flag of a fresh store of this run's backend (none: the embedded one
/// under `--data-dir`).
pub(crate) fn store_args() -> Vec<String> {
    if on_clickhouse() {
        vec![
            "--store".to_owned(),
            threadline_store::ClickHouseConfig::test_store_url("tl_e2e"),
        ]
    } else {
        Vec::new()
    }
}

pub(crate) struct TestServer {
    child: Option<Child>,
    pub(crate) otlp_http: String,
    pub(crate) otlp_grpc: String,
    pub(crate) api: String,
    pub(crate) data_dir: PathBuf,
    /// `--store` and its URL on ClickHouse (kept across restarts).
    store: Vec<String>,
    config: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

impl TestServer {
    pub(crate) fn start() -> Self {
        Self::start_with_config(None)
    }

    /// Starts on the store `store` names (`--store`), with a config file holding
    /// `toml_text`.
    pub(crate) fn start_on_store(store: &str, toml_text: Option<&str>) -> Self {
        Self::start_with(vec!["--store".to_owned(), store.to_owned()], toml_text)
    }

    /// Starts with a config file holding `toml_text`.
    pub(crate) fn start_with_config(toml_text: Option<&str>) -> Self {
        Self::start_with(store_args(), toml_text)
    }

    fn start_with(store: Vec<String>, toml_text: Option<&str>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let data_dir = dir.path().join("data");
        let config = toml_text.map(|text| {
            let path = dir.path().join("threadline.toml");
            std::fs::write(&path, text).expect("write config");
            path
        });
        let mut server = TestServer {
            child: None,
            otlp_http: String::new(),
            otlp_grpc: String::new(),
            api: String::new(),
            data_dir,
            store,
            config,
            _dir: dir,
        };
        server.launch();
        server
    }

    fn launch(&mut self) {
        let mut cmd = Command::new(BIN);
        cmd.args([
            "serve",
            "--otlp-http",
            "127.0.0.1:0",
            "--otlp-grpc",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(&self.data_dir)
        .args(&self.store)
        .env("THREADLINE_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        if let Some(c) = &self.config {
            cmd.arg("--config").arg(c);
        }
        let mut child = cmd.spawn().expect("spawn threadline serve");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let (mut http, mut grpc, mut api) = (None, None, None);
        let mut seen = Vec::new();
        while http.is_none() || grpc.is_none() || api.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("server did not start; it said:\n{}", seen.join("\n")));
            if let Some((what, addr)) = line.split_once(" listening on ") {
                let addr = addr.trim().to_owned();
                if what.ends_with("otlp-http") {
                    http = Some(addr);
                } else if what.ends_with("otlp-grpc") {
                    grpc = Some(addr);
                } else if what.ends_with("http") {
                    api = Some(addr);
                }
            }
            seen.push(line);
        }
        // Keep draining stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || while rx.recv().is_ok() {});
        self.otlp_http = format!("http://{}", http.unwrap());
        self.otlp_grpc = format!("http://{}", grpc.unwrap());
        self.api = format!("http://{}", api.unwrap());
        self.child = Some(child);
    }

    /// SIGKILL: no shutdown path runs.
    pub(crate) fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub(crate) fn restart(&mut self) {
        self.kill9();
        self.launch();
    }

    /// Starts it again after `kill9`.
    pub(crate) fn relaunch(&mut self) {
        assert!(self.child.is_none(), "the server is still running");
        self.launch();
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().expect("server running").id()
    }

    /// Every file of this server's data that holds `needle`: in its data directory (raw,
    /// or inside a zstd frame) and, on ClickHouse, in its database's files on the
    /// ClickHouse server (inside any compressed block of a column file).
    pub(crate) fn files_holding(&self, needle: &str) -> Vec<String> {
        let mut out = Vec::new();
        for path in files_under(&self.data_dir) {
            let bytes = std::fs::read(&path).unwrap_or_default();
            if let Some(how) = holds_raw_or_in_zstd(&bytes, needle.as_bytes()) {
                out.push(format!("{} ({how})", path.display()));
            }
        }
        if let Some(db) = self.clickhouse_database() {
            let root = std::env::var("THREADLINE_TEST_CLICKHOUSE_DIR")
                .expect("THREADLINE_TEST_CLICKHOUSE_DIR names the test server's directory");
            let dir = Path::new(&root).join("ch1/data/data").join(&db);
            assert!(
                dir.is_dir(),
                "{} is not the database's directory",
                dir.display()
            );
            for path in files_under(&dir) {
                let bytes = std::fs::read(&path).unwrap_or_default();
                if let Some(how) = holds_in_clickhouse_blocks(&bytes, needle.as_bytes()) {
                    out.push(format!("{} ({how})", path.display()));
                }
            }
        }
        out
    }

    /// The ClickHouse database this server stores in, if it does.
    fn clickhouse_database(&self) -> Option<String> {
        let url = self.store.get(1)?;
        Some(url.rsplit('/').next()?.to_owned())
    }

    pub(crate) fn db_path(&self) -> PathBuf {
        self.data_dir.join("threadline.db")
    }

    pub(crate) fn post_traces(
        &self,
        content_type: &str,
        body: Vec<u8>,
        headers: &[(&str, &str)],
    ) -> reqwest::blocking::Response {
        self.post_otlp("/v1/traces", content_type, body, headers)
    }

    /// POST to the OTLP/HTTP receiver (`/v1/traces`, `/v1/logs`, …).
    pub(crate) fn post_otlp(
        &self,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
        headers: &[(&str, &str)],
    ) -> reqwest::blocking::Response {
        let mut req = client()
            .post(format!("{}{path}", self.otlp_http))
            .header("content-type", content_type)
            .body(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send().unwrap_or_else(|e| panic!("POST {path}: {e}"))
    }

    /// GET on the JSON API: (status, body).
    pub(crate) fn get(&self, path_and_query: &str, api_key: Option<&str>) -> (u16, Value) {
        let mut req = client().get(format!("{}{}", self.api, path_and_query));
        if let Some(k) = api_key {
            req = req.bearer_auth(k);
        }
        let resp = req.send().expect("GET api");
        let status = resp.status().as_u16();
        let body = resp.json().unwrap_or(Value::Null);
        (status, body)
    }

    /// Runs the CLI against this server: (exit success, stdout, stderr).
    pub(crate) fn cli(&self, args: &[&str]) -> (bool, String, String) {
        cli_at(&self.api, args)
    }
}

/// Runs the CLI against the server at `api`: (exit success, stdout, stderr).
pub(crate) fn cli_at(api: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .args(["--server", api])
        .output()
        .expect("run cli");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the CLI with `args` (no server flag), asserts it succeeded (showing its
/// stderr if not) and parses its stdout as JSON.
pub(crate) fn cli_json(args: &[&str]) -> Value {
    let out = Command::new(BIN).args(args).output().expect("run cli");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cli stdout is JSON")
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub(crate) fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

pub(crate) fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

pub(crate) fn kv_int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
        ..Default::default()
    }
}

/// A two-span trace: a gateway root and an LLM child with GenAI attributes.
pub(crate) fn llm_trace(
    trace_id: [u8; 16],
    service: &str,
    model: &str,
    start: u64,
) -> ExportTraceServiceRequest {
    let root = Span {
        trace_id: trace_id.to_vec(),
        span_id: [1, 2, 3, 4, 5, 6, 7, 8].to_vec(),
        name: "POST /v1/chat/completions".into(),
        kind: 2,
        start_time_unix_nano: start,
        end_time_unix_nano: start + 900_000_000,
        attributes: vec![kv("api.route", "/v1/chat/completions"), kv("ab.group", "B")],
        ..Default::default()
    };
    let llm = Span {
        trace_id: trace_id.to_vec(),
        span_id: [8, 7, 6, 5, 4, 3, 2, 1].to_vec(),
        parent_span_id: root.span_id.clone(),
        name: format!("chat {model}"),
        kind: 3,
        start_time_unix_nano: start + 100_000_000,
        end_time_unix_nano: start + 800_000_000,
        attributes: vec![
            kv("gen_ai.operation.name", "chat"),
            kv("gen_ai.request.model", model),
            kv_int("gen_ai.usage.input_tokens", 120),
            kv_int("gen_ai.usage.output_tokens", 30),
            kv("llm.lora.adapter_id", "fin-lora@7"),
        ],
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", service)],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: vec![root, llm],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

pub(crate) fn proto(req: &ExportTraceServiceRequest) -> Vec<u8> {
    req.encode_to_vec()
}

pub(crate) fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

pub(crate) fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// The corpus shared by every session: `../shared/corpus` next to the repository.
pub(crate) fn corpus_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("THREADLINE_CORPUS_DIR") {
        return PathBuf::from(dir);
    }
    let beside_checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus");
    if beside_checkout.join("otlp-json").is_dir() {
        return beside_checkout;
    }
    PathBuf::from("/work/shared/corpus")
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl TestServer {
    /// POST on the JSON API: (status, body).
    pub(crate) fn post_json(
        &self,
        path: &str,
        body: Vec<u8>,
        headers: &[(&str, &str)],
        api_key: Option<&str>,
    ) -> (u16, Value) {
        let mut req = client()
            .post(format!("{}{}", self.api, path))
            .header("content-type", "application/json")
            .body(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(k) = api_key {
            req = req.bearer_auth(k);
        }
        let resp = req.send().expect("POST api");
        let status = resp.status().as_u16();
        (status, resp.json().unwrap_or(Value::Null))
    }
}

/// A node id as one URL path segment.
pub(crate) fn encode_node(id: &str) -> String {
    percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// The element of the JSON array `list` whose `key` is `value`; panics showing the list.
pub(crate) fn find_in<'a>(list: &'a Value, key: &str, value: &str) -> &'a Value {
    list.as_array()
        .unwrap_or_else(|| panic!("not an array: {list}"))
        .iter()
        .find(|item| item[key] == value)
        .unwrap_or_else(|| panic!("no element with {key} = {value:?} in {list}"))
}

/// The string field `key` of every element of the JSON array `list`.
pub(crate) fn strings_of<'a>(list: &'a Value, key: &str) -> Vec<&'a str> {
    list.as_array()
        .unwrap_or_else(|| panic!("not an array: {list}"))
        .iter()
        .map(|item| {
            item[key]
                .as_str()
                .unwrap_or_else(|| panic!("{key} missing in {item}"))
        })
        .collect()
}

/// Graphviz's `dot`, or `None` (saying so) outside `scripts/test`.
pub(crate) fn graphviz(skipped: &str) -> Option<String> {
    match std::env::var("THREADLINE_DOT") {
        Ok(dot) => Some(dot),
        Err(_) => {
            eprintln!("THREADLINE_DOT is not set: {skipped} skipped (scripts/test and CI set it)");
            None
        }
    }
}

/// The Python with the e2e test clients, or `None` (saying so) outside `scripts/test`.
pub(crate) fn test_python(skipped: &str) -> Option<String> {
    match std::env::var("THREADLINE_TEST_PYTHON") {
        Ok(python) => Some(python),
        Err(_) => {
            eprintln!(
                "THREADLINE_TEST_PYTHON is not set: {skipped} skipped (scripts/test and CI set it)"
            );
            None
        }
    }
}

/// `threadline demo` serving on free ports, killed on drop.
pub(crate) struct Demo {
    child: Child,
    /// What it printed up to "Serving on".
    pub(crate) report: String,
    /// The JSON API base URL.
    pub(crate) api: String,
    /// The "Open in a browser" pages: (name, URL).
    pub(crate) pages: Vec<(String, String)>,
    /// The "Try on the command line" commands, as printed.
    pub(crate) commands: Vec<String>,
}

impl Demo {
    pub(crate) fn start() -> Self {
        let mut child = Command::new(BIN)
            .args([
                "demo",
                "--http",
                "127.0.0.1:0",
                "--otlp-http",
                "127.0.0.1:0",
                "--otlp-grpc",
                "127.0.0.1:0",
            ])
            .args(store_args())
            .stdout(Stdio::piped())
            .stderr(
                std::fs::File::create(std::env::temp_dir().join("threadline-demo-test.log"))
                    .unwrap(),
            )
            .env("RUST_BACKTRACE", "1")
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut report = String::new();
        let (mut api, mut pages, mut in_pages) = (None, Vec::new(), false);
        let (mut commands, mut in_commands) = (Vec::new(), false);
        let mut lines = BufReader::new(stdout).lines();
        for line in lines.by_ref() {
            let line = line.unwrap();
            report.push_str(&line);
            report.push('\n');
            if line.starts_with("Open in a browser:") {
                in_pages = true;
            } else if line.starts_with("Try on the command line") {
                in_commands = true;
            } else if line.is_empty() {
                in_pages = false;
                in_commands = false;
            } else if in_commands {
                commands.push(line.trim().to_owned());
            } else if in_pages {
                if let Some(at) = line.find("http://") {
                    pages.push((line[..at].trim().to_owned(), line[at..].trim().to_owned()));
                }
            }
            if let Some(url) = line.trim().strip_prefix("incidents") {
                api = url
                    .trim()
                    .strip_suffix("/api/v1/incidents")
                    .map(str::to_owned);
            }
            if line.starts_with("Serving on ") {
                break;
            }
        }
        // Keep reading: a closed pipe would fail the demo's next write.
        std::thread::spawn(move || lines.for_each(drop));
        let api = api.unwrap_or_else(|| {
            let _ = child.kill();
            panic!("no URLs in\n{report}")
        });
        Demo {
            child,
            report,
            api,
            pages,
            commands,
        }
    }

    /// The URL of the page the demo listed under `name`.
    pub(crate) fn page(&self, name: &str) -> &str {
        self.pages
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, u)| u.as_str())
            .unwrap_or_else(|| panic!("no {name} page in\n{}", self.report))
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A single-threaded runtime for tests that talk to the server asynchronously.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `program` with `args`, `input` on its standard input.
pub(crate) fn pipe_through(program: &str, args: &[&str], input: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

impl TestServer {
    /// Sends `message` as it is (no encoding) to the gRPC method `path` of the OTLP
    /// port; the answer's bytes, or its status.
    pub(crate) fn grpc_raw(&self, path: &str, message: Vec<u8>) -> Result<Vec<u8>, tonic::Status> {
        self.grpc_raw_at(&self.otlp_grpc, path, message)
    }

    /// `grpc_raw` to the server at `base` (another port: a client sent to the wrong one).
    pub(crate) fn grpc_raw_at(
        &self,
        base: &str,
        path: &str,
        message: Vec<u8>,
    ) -> Result<Vec<u8>, tonic::Status> {
        runtime().block_on(async {
            let channel = tonic::transport::Channel::from_shared(base.to_owned())
                .unwrap()
                .connect()
                .await
                .unwrap();
            let mut grpc = tonic::client::Grpc::new(channel);
            grpc.ready().await.unwrap();
            let path = tonic::codegen::http::uri::PathAndQuery::try_from(path).unwrap();
            grpc.unary::<RawBytes, RawBytes, RawCodec>(
                tonic::Request::new(RawBytes(message)),
                path,
                RawCodec,
            )
            .await
            .map(|response| response.into_inner().0)
        })
    }
}

/// Bytes sent as they are: lets a test put an invalid message on the wire.
#[derive(Debug, Clone)]
struct RawBytes(Vec<u8>);

#[derive(Debug, Clone, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = RawBytes;
    type Decode = RawBytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = RawBytes;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: RawBytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        dst.put_slice(&item.0);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = RawBytes;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<RawBytes>, tonic::Status> {
        use bytes::Buf;
        let n = src.remaining();
        Ok(Some(RawBytes(src.copy_to_bytes(n).to_vec())))
    }
}

/// An SDK set up with one endpoint for every signal also exports metrics there: they
/// are refused with a reason (HTTP 501, gRPC UNIMPLEMENTED: not retried), over both transports.
#[test]
fn otlp_metrics_are_refused_with_a_reason_not_a_404() {
    use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use prost::Message;

    let server = TestServer::start();
    let body = ExportMetricsServiceRequest::default().encode_to_vec();
    let response = client()
        .post(format!("{}/v1/metrics", server.otlp_http))
        .header("content-type", "application/x-protobuf")
        .body(body)
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 501);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/x-protobuf"
    );
    let bytes = response.bytes().unwrap();
    let message = String::from_utf8_lossy(&bytes);
    assert!(
        message.contains("does not accept OTLP metrics"),
        "{message}"
    );
    let json = client()
        .post(format!("{}/v1/metrics", server.otlp_http))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .unwrap();
    assert_eq!(json.status().as_u16(), 501);
    let status: serde_json::Value = json.json().unwrap();
    assert_eq!(status["code"], 12, "{status}");

    runtime().block_on(async {
        let mut client = MetricsServiceClient::connect(server.otlp_grpc.clone())
            .await
            .unwrap();
        let err = client
            .export(ExportMetricsServiceRequest::default())
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unimplemented);
        assert!(
            err.message().contains("does not accept OTLP metrics"),
            "{}",
            err.message()
        );
    });
}
