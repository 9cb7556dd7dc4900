//! Export to Waxell's cloud: `WAXELL_API_URL` + `WAXELL_API_KEY` discover the OTLP endpoint through the API and
//! export OTLP/HTTP with `X-Wax-Key`; the standard endpoint variable overrides it (without the key).
//! Each test that installs the pipeline runs in a child process of its own (`own_process!`); the variables
//! come from a lookup given to `Builder::with_env`, not from the process environment.

use std::time::Duration;

use waxell::{agent, tool};
use waxell_tests::waxell_api::FakeWaxellApi;
use waxell_tests::{by_name, AnyValue, OtlpReceiver};

#[tool]
fn step(x: u32) -> u32 {
    x * 3
}

#[agent(name = "cloud-agent")]
fn cloud_agent() -> u32 {
    step(2)
}

const KEY: &str = "wax_sk_test_0123456789abcdefghij";

#[test]
fn discovered_endpoint_receives_spans_with_the_key_and_tenant() {
    waxell_tests::own_process!();
    let collector = OtlpReceiver::start_http();
    let api = FakeWaxellApi::start(Some(
        serde_json::json!({"otel_endpoint": collector.base_url(), "tenant_id": "tenant-42"}),
    ));
    let api_url = api.url();
    let guard = waxell::builder()
        .with_env(waxell_tests::env(&[
            ("WAXELL_API_URL", &api_url),
            ("WAXELL_API_KEY", KEY),
        ]))
        .with_service_version("1.2.3")
        .init()
        .unwrap();
    assert_eq!(guard.otlp_endpoint(), Some(collector.traces_url().as_str()));
    assert_eq!(cloud_agent(), 6);
    drop(guard);

    assert_eq!(
        api.keys_seen(),
        vec![KEY.to_owned()],
        "discovery authenticated with the key"
    );
    let spans = collector.wait_for_spans(2, Duration::from_secs(10));
    let agent = by_name(&spans, "invoke_agent cloud-agent").expect("agent span at the discovered endpoint");
    assert_eq!(
        agent.resource.get("waxell.tenant_id"),
        Some(&AnyValue::StringValue("tenant-42".into()))
    );
    assert_eq!(
        agent.resource.get("service.version"),
        Some(&AnyValue::StringValue("1.2.3".into()))
    );
    assert_eq!(
        agent.resource.get("waxell.sdk.name"),
        Some(&AnyValue::StringValue("waxell-rs".into()))
    );
    assert!(agent.resource.contains_key("telemetry.sdk.version"));
    let request = &collector.requests()[0];
    assert_eq!(request.headers.get("x-wax-key").map(String::as_str), Some(KEY));
    assert_eq!(
        request.headers.get("content-type").map(String::as_str),
        Some("application/x-protobuf")
    );
}

#[test]
fn without_discovery_the_api_url_itself_takes_the_spans() {
    waxell_tests::own_process!();
    // The receiver doubles as the API: its config route answers 404, so spans go to {api}/v1/traces.
    let collector = OtlpReceiver::start_http();
    let api_url = collector.base_url();
    let guard = waxell::builder()
        .with_env(waxell_tests::env(&[
            ("WAXELL_API_URL", &api_url),
            ("WAXELL_API_KEY", KEY),
        ]))
        .init()
        .unwrap();
    cloud_agent();
    drop(guard);
    let spans = collector.wait_for_spans(2, Duration::from_secs(10));
    assert!(by_name(&spans, "invoke_agent cloud-agent").is_some());
    assert_eq!(
        collector.requests()[0]
            .headers
            .get("x-wax-key")
            .map(String::as_str),
        Some(KEY)
    );
}

#[test]
fn the_standard_endpoint_overrides_and_never_receives_the_key() {
    waxell_tests::own_process!();
    let api = FakeWaxellApi::start(Some(serde_json::json!({"otel_endpoint": "http://127.0.0.1:9"})));
    let other = OtlpReceiver::start_http();
    let (api_url, endpoint) = (api.url(), other.base_url());
    let guard = waxell::builder()
        .with_env(waxell_tests::env(&[
            ("WAXELL_API_URL", &api_url),
            ("WAXELL_API_KEY", KEY),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
        ]))
        .init()
        .unwrap();
    cloud_agent();
    drop(guard);
    let spans = other.wait_for_spans(2, Duration::from_secs(10));
    assert!(by_name(&spans, "invoke_agent cloud-agent").is_some());
    assert!(
        api.keys_seen().is_empty(),
        "no discovery when the endpoint is given"
    );
    assert!(
        other
            .requests()
            .iter()
            .all(|r| !r.headers.contains_key("x-wax-key")),
        "the key stays with Waxell"
    );
}

#[test]
fn half_configured_cloud_export_is_a_clear_error() {
    // init() fails before it installs anything, so the test shares its process.
    let err = waxell::builder()
        .with_env(waxell_tests::env(&[("WAXELL_API_URL", "http://127.0.0.1:9")]))
        .init()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("WAXELL_API_URL") && err.contains("WAXELL_API_KEY"),
        "{err}"
    );
}
