//! What kind of backend an OTLP endpoint is, read from its address alone (no request is made), so messages
//! can name it ("MLflow at http://localhost:5000/v1/traces") and point at the right place to see a trace or to
//! start the backend. A guess by convention (the ports and paths each backend documents); an endpoint that
//! matches none is "an OTLP collector".

/// A backend waxell knows how to point at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EndpointKind {
    /// Jaeger, an OpenTelemetry Collector or `waxell ui`: OTLP's own ports, 4318 (HTTP) and 4317 (gRPC).
    OtlpPort,
    /// Arize Phoenix (port 6006).
    Phoenix,
    /// Langfuse (path `/api/public/otel`).
    Langfuse,
    /// MLflow's tracking server (port 5000).
    Mlflow,
    /// Anything else.
    Other,
}

impl EndpointKind {
    /// The kind of the endpoint at `url`.
    pub fn of(url: &str) -> Self {
        let (host_port, path) = split_url(url);
        let port = host_port.rsplit_once(':').map(|(_, p)| p);
        if path.contains("/api/public/otel") {
            Self::Langfuse
        } else {
            match port {
                Some("4318" | "4317") => Self::OtlpPort,
                Some("6006") => Self::Phoenix,
                Some("5000") => Self::Mlflow,
                _ => Self::Other,
            }
        }
    }

    /// How messages name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::OtlpPort => "the OTLP collector",
            Self::Phoenix => "Phoenix",
            Self::Langfuse => "Langfuse",
            Self::Mlflow => "MLflow",
            Self::Other => "the OTLP endpoint",
        }
    }

    /// Where the trace `trace_id` can be seen once it arrived, as (what the page is, its URL), if this kind has a
    /// page that can be derived from the endpoint. `jaeger_ui` is Jaeger's UI when the user named it: then the
    /// OTLP ports and any unknown endpoint (a collector in front of Jaeger, say) link there; without it, OTLP's
    /// ports link to Jaeger's default port 16686 on the endpoint's host. Phoenix's and MLflow's UI share their
    /// OTLP port.
    pub fn trace_page(
        self,
        url: &str,
        trace_id: &str,
        jaeger_ui: Option<&str>,
    ) -> Option<(&'static str, String)> {
        let (host_port, _) = split_url(url);
        let scheme = url.split_once("://").map_or("http", |(s, _)| s);
        let host = host_port.rsplit_once(':').map_or(host_port, |(h, _)| h);
        let jaeger = |base: &str| {
            (
                "jaeger",
                format!("{}/trace/{trace_id}", base.trim_end_matches('/')),
            )
        };
        match (self, jaeger_ui) {
            (Self::OtlpPort | Self::Other, Some(base)) => Some(jaeger(base)),
            (Self::OtlpPort, None) => Some(jaeger(&format!("http://{host}:16686"))),
            (Self::Phoenix, _) => Some(("phoenix", format!("{scheme}://{host_port}/"))),
            (Self::Mlflow, _) => Some(("mlflow", format!("{scheme}://{host_port}/"))),
            (Self::Langfuse | Self::Other, _) => None,
        }
    }
}

/// `("host:port", "/path")` of `scheme://host:port/path`.
fn split_url(url: &str) -> (&str, &str) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::EndpointKind;

    #[test]
    fn kinds_follow_each_backends_documented_address() {
        let cases = [
            ("http://localhost:4318", EndpointKind::OtlpPort),
            ("http://127.0.0.1:4317", EndpointKind::OtlpPort),
            ("http://localhost:6006/v1/traces", EndpointKind::Phoenix),
            ("http://localhost:5000", EndpointKind::Mlflow),
            (
                "https://cloud.langfuse.com/api/public/otel/v1/traces",
                EndpointKind::Langfuse,
            ),
            ("https://otel.example.com/v1/traces", EndpointKind::Other),
        ];
        for (url, kind) in cases {
            assert_eq!(EndpointKind::of(url), kind, "{url}");
        }
    }

    #[test]
    fn trace_pages_are_on_the_endpoints_host_or_the_named_jaeger() {
        let id = "0af7651916cd43dd8448eb211c80319c";
        let page = |kind: EndpointKind, url: &str, jaeger: Option<&str>| kind.trace_page(url, id, jaeger);
        assert_eq!(
            page(EndpointKind::OtlpPort, "http://10.1.2.3:4318/v1/traces", None),
            Some(("jaeger", format!("http://10.1.2.3:16686/trace/{id}")))
        );
        assert_eq!(
            page(
                EndpointKind::Other,
                "http://collector:9999",
                Some("http://jaeger:8080/")
            ),
            Some(("jaeger", format!("http://jaeger:8080/trace/{id}")))
        );
        assert_eq!(page(EndpointKind::Other, "http://collector:9999", None), None);
        assert_eq!(
            page(EndpointKind::Mlflow, "http://localhost:5000/v1/traces", None),
            Some(("mlflow", "http://localhost:5000/".to_owned()))
        );
        assert_eq!(
            page(
                EndpointKind::Langfuse,
                "https://cloud.langfuse.com/api/public/otel",
                None
            ),
            None
        );
    }
}
