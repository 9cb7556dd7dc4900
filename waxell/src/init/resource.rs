//! The resource every span and metric carries: service, SDK, project and tenant.

use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;

use crate::config::EnvConfig;
use crate::semconv::*;

/// What the builder says about the service, over the environment's `OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES` and `WAXELL_PROJECT_NAME`.
pub(super) struct Service<'a> {
    pub(super) name: Option<&'a str>,
    pub(super) version: Option<&'a str>,
    pub(super) project: Option<&'a str>,
}

/// The resource: the SDK's (its detectors), the environment's attributes as read through the builder's
/// lookup, then `service.name` (the builder's, else `OTEL_SERVICE_NAME`, else `OTEL_RESOURCE_ATTRIBUTES`'s,
/// else `waxell-agent`), the SDK name and version, the project and the tenant.
pub(super) fn build(service: &Service<'_>, env: &EnvConfig, tenant_id: Option<&str>) -> Resource {
    let mut builder = Resource::builder().with_attributes(
        env.resource_attributes
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
    );
    let from_attributes = env
        .resource_attributes
        .iter()
        .rev()
        .find(|(k, _)| k == "service.name")
        .map(|(_, v)| v.as_str());
    let name = service
        .name
        .or(env.service_name.as_deref())
        .or(from_attributes)
        .unwrap_or("waxell-agent");
    builder = builder.with_service_name(name.to_owned());
    builder = builder.with_attributes([
        KeyValue::new(WAXELL_SDK_NAME, "waxell-rs"),
        KeyValue::new(WAXELL_SDK_VERSION, env!("CARGO_PKG_VERSION")),
    ]);
    if let Some(project) = service.project.or(env.project_name.as_deref()) {
        builder = builder.with_attribute(KeyValue::new(OPENINFERENCE_PROJECT_NAME, project.to_owned()));
    }
    if let Some(version) = service.version {
        builder = builder.with_attribute(KeyValue::new("service.version", version.to_owned()));
    }
    if let Some(tenant) = tenant_id {
        builder = builder.with_attribute(KeyValue::new(WAXELL_TENANT_ID, tenant.to_owned()));
    }
    builder.build()
}
