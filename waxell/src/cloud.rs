//! Export to Waxell's cloud: `WAXELL_API_URL` + `WAXELL_API_KEY` mean OTLP/HTTP (protobuf) with the
//! `X-Wax-Key` header, to the endpoint the API's `config/` route names, as the Python SDK does.
//!
//! Precedence, highest first: the builder's endpoint, `OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT` (then the key is
//! *not* sent: it must not leak to a third-party collector), `WAXELL_OTEL_ENDPOINT`, the discovered endpoint,
//! and last the API URL itself.

use crate::config::CloudVars;

/// Where and how to export to Waxell.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CloudExport {
    /// Full OTLP/HTTP traces URL.
    pub(crate) traces_url: String,
    pub(crate) key: String,
    /// The tenant the API reported, recorded on the resource as `waxell.tenant_id`.
    pub(crate) tenant_id: Option<String>,
}

fn traces_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    }
}

/// Where to export, from the Waxell variables: `WAXELL_OTEL_ENDPOINT`, else the endpoint the API names,
/// else the API URL itself.
pub(crate) fn resolve(vars: CloudVars) -> CloudExport {
    let CloudVars {
        api_url,
        key,
        otel_endpoint,
    } = vars;
    if let Some(explicit) = otel_endpoint {
        return CloudExport {
            traces_url: traces_url(&explicit),
            key,
            tenant_id: None,
        };
    }
    let (endpoint, tenant_id) = match discovery::discover(&api_url, &key) {
        Ok(found) => found,
        Err(reason) => {
            crate::console::current().message(format_args!(
                "endpoint discovery at {api_url} failed ({reason}); exporting to the API URL itself"
            ));
            (None, None)
        }
    };
    let base = endpoint.unwrap_or_else(|| api_url.clone());
    CloudExport {
        traces_url: traces_url(&base),
        key,
        tenant_id,
    }
}

/// Without HTTP export there is nothing to discover for: `init()` reports the missing feature when it builds the
/// exporter.
#[cfg(not(feature = "otlp-http"))]
mod discovery {
    pub(super) fn discover(_api_url: &str, _key: &str) -> Result<(Option<String>, Option<String>), String> {
        Err("waxell was built without its `otlp-http` feature".to_owned())
    }
}

/// Asking Waxell's API for the OTLP endpoint (HTTP export only).
#[cfg(feature = "otlp-http")]
mod discovery {
    use std::time::Duration;

    /// The discovery call may not hold up start-up for long (a mistyped URL once cost the Python SDK 12 s a
    /// run).
    const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(2);

    /// `GET {api}/api/v1/observe/config/` with the key; returns the OTLP endpoint and tenant it names.
    /// Runs on its own thread: `init()` may be called inside an async runtime, where a blocking client panics.
    pub(super) fn discover(api_url: &str, key: &str) -> Result<(Option<String>, Option<String>), String> {
        let url = format!("{}/api/v1/observe/config/", api_url.trim_end_matches('/'));
        let key = key.to_owned();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("waxell-discovery".into())
            .spawn(move || {
                let result = (|| {
                    let client = crate::http::blocking_client(|b| {
                        b.connect_timeout(DISCOVERY_TIMEOUT).timeout(DISCOVERY_TIMEOUT)
                    })?;
                    let response = client
                        .get(&url)
                        .header("X-Wax-Key", key)
                        .send()
                        .map_err(|e| e.to_string())?;
                    if !response.status().is_success() {
                        return Err(format!("HTTP {}", response.status()));
                    }
                    let body = response.bytes().map_err(|e| e.to_string())?;
                    let body: serde_json::Value =
                        serde_json::from_slice(&body).map_err(|e| format!("not JSON: {e}"))?;
                    Ok(parse_config(&body))
                })();
                let _ = tx.send(result);
            })
            .map_err(|e| e.to_string())?;
        rx.recv_timeout(DISCOVERY_TIMEOUT + Duration::from_millis(500))
            .map_err(|_| "timed out".to_owned())?
    }

    /// The config route's answer: the endpoint under `otel_endpoint` / `otlp_endpoint` / `otel.endpoint`, the tenant
    /// under `tenant_id` / `tenant.id`.
    pub(super) fn parse_config(body: &serde_json::Value) -> (Option<String>, Option<String>) {
        let text = |v: Option<&serde_json::Value>| {
            v.and_then(|v| v.as_str())
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let endpoint = text(body.get("otel_endpoint"))
            .or_else(|| text(body.get("otlp_endpoint")))
            .or_else(|| text(body.pointer("/otel/endpoint")));
        let tenant = text(body.get("tenant_id")).or_else(|| text(body.pointer("/tenant/id")));
        (endpoint, tenant)
    }
}

#[cfg(all(test, feature = "otlp-http"))]
mod tests {
    use super::discovery::parse_config;
    use super::*;

    #[test]
    fn config_shapes_and_traces_path() {
        let (e, t) =
            parse_config(&serde_json::json!({"otel_endpoint": "https://otel.example", "tenant_id": "t1"}));
        assert_eq!(
            (e.as_deref(), t.as_deref()),
            (Some("https://otel.example"), Some("t1"))
        );
        let (e, t) =
            parse_config(&serde_json::json!({"otel": {"endpoint": "http://x"}, "tenant": {"id": "t2"}}));
        assert_eq!((e.as_deref(), t.as_deref()), (Some("http://x"), Some("t2")));
        assert_eq!(parse_config(&serde_json::json!({})), (None, None));
        assert_eq!(traces_url("http://a/"), "http://a/v1/traces");
        assert_eq!(traces_url("http://a/v1/traces"), "http://a/v1/traces");
    }
}
