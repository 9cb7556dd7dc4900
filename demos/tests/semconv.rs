//! The demo's spans against the GenAI semantic conventions v1.41.1 (pinned registry extract; see
//! `waxell_tests::semconv_check`): the built demo's dry run exports to a receiver on 127.0.0.1 and every span
//! that arrived is checked. docs/attributes.md must list what we set and every deliberate difference.

use std::process::Command;
use std::time::Duration;

use waxell_tests::semconv_check::{registry, registry_attributes_used, valid_key, EXTENSIONS, OMISSIONS};
use waxell_tests::OtlpReceiver;

fn attributes_doc() -> String {
    std::fs::read_to_string(waxell_tests::manifest_dir!().join("../docs/attributes.md"))
        .expect("docs/attributes.md")
}

/// The text of the `### ...` section whose heading contains `needle`.
fn section<'a>(doc: &'a str, needle: &str) -> Option<&'a str> {
    let start = doc.find(&format!("### {needle}"))?;
    let rest = &doc[start + 4..];
    Some(
        &rest[..rest
            .find("\n### ")
            .or_else(|| rest.find("\n## "))
            .unwrap_or(rest.len())],
    )
}

#[test]
fn dry_run_spans_follow_the_genai_semantic_conventions() {
    let rx = OtlpReceiver::start_http();
    let out_dir = std::env::temp_dir().join(format!("waxell-demo-semconv-{}", std::process::id()));
    let output = Command::new(waxell_tests::bin_exe!("demos"))
        .args(["--dry-run", "--quiet", "--output-dir"])
        .arg(&out_dir)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", rx.base_url())
        .env("WAXELL_CAPTURE_CONTENT", "true")
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("the demo runs");
    let _ = std::fs::remove_dir_all(&out_dir);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The demo flushes before it exits: what arrived is the whole trace.
    let spans = rx.wait_for_spans(20, Duration::from_secs(10));
    assert!(spans.len() >= 20, "{} spans", spans.len());

    let registry = registry();
    let problems = registry.check(&spans);
    assert!(
        problems.is_empty(),
        "{} problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );

    // docs/attributes.md lists, per span kind, each registry attribute we set with its requirement level.
    let doc = attributes_doc();
    for (definition, attributes) in registry_attributes_used(&registry, &spans) {
        let text = section(
            &doc,
            &format!("`{}`", definition.trim_end_matches(" (extension)")),
        )
        .unwrap_or_else(|| panic!("docs/attributes.md has no `### `{definition}`` section"));
        for (key, level) in attributes {
            assert!(
                text.contains(&format!("| `{key}` | {level}")),
                "docs/attributes.md, section {definition}: no row `| `{key}` | {level}`"
            );
        }
    }
}

#[test]
fn every_deliberate_difference_is_documented() {
    let doc = attributes_doc();
    for (key, value, _) in EXTENSIONS {
        assert!(
            doc.contains(&format!("`{key} = {value}`")),
            "docs/attributes.md does not document the extension {key} = {value}"
        );
    }
    for (definition, key, _) in OMISSIONS {
        let text = section(&doc, &format!("`{definition}`")).expect("section");
        assert!(
            text.contains(&format!("`{key}`")) && text.contains("omitted"),
            "{definition}: {key}"
        );
    }
}

/// The checker itself catches each kind of finding (so a passing run means something).
#[test]
fn the_checker_catches_what_weaver_found() {
    use waxell_tests::opentelemetry_proto::tonic::common::v1::{AnyValue as Any, KeyValue};
    use waxell_tests::opentelemetry_proto::tonic::trace::v1::{span::SpanKind, status::StatusCode, Status};
    use waxell_tests::{Received, Span};

    fn kv(key: &str, value: waxell_tests::AnyValue) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(Any { value: Some(value) }),
            ..Default::default()
        }
    }
    let s = |v: &str| waxell_tests::AnyValue::StringValue(v.into());
    let span = Span {
        name: "invoke_agent a".into(),
        kind: SpanKind::Internal as i32,
        attributes: vec![
            kv("gen_ai.operation.name", s("invoke_agent")),
            kv("gen_ai.provider.name", s("waxell")),
            kv("openinference.span.kind", s("AGENT")),
            kv(
                "waxell.score.decision_confidence:output_format",
                waxell_tests::AnyValue::DoubleValue(0.9),
            ),
            kv("gen_ai.system", s("openai")),
            kv("my.custom", s("x")),
            kv("server.address", s("127.0.0.1")),
        ],
        status: Some(Status {
            code: StatusCode::Error as i32,
            ..Default::default()
        }),
        ..Default::default()
    };
    let problems = registry().check(&[Received {
        span,
        resource: Default::default(),
        scope: String::new(),
    }]);
    let all = problems.join("\n");
    for expected in [
        "gen_ai.provider.name = \"waxell\"",
        "decision_confidence:output_format\" breaks the naming rules",
        "gen_ai.system is deprecated",
        "my.custom is neither in the registry",
        "error.type is not set",
        "server.port is not",
    ] {
        assert!(all.contains(expected), "missing {expected:?} in:\n{all}");
    }
    assert!(valid_key("llm.input_messages.0.message.role"));
    assert!(!valid_key("waxell.tag.Env") && !valid_key("a..b"));
}
