//! Logging and OpenTelemetry trace export (docs/operations.md "Traces").
//!
//! Logs always go to standard error. Traces are exported only when the standard variable
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and not empty:
//! then the spans named in [`carmy::trace::EXPORTED_SPANS`] go through a batch processor to an
//! OTLP/HTTP (protobuf) exporter, which reads the other standard variables itself (headers,
//! timeout, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BSP_*`, `OTEL_TRACES_SAMPLER`).
//! Unset, no exporter and no OpenTelemetry layer exist: the per-call cost is that of the log
//! spans alone. [`Telemetry::shutdown`] flushes what is buffered; the gateway calls it after the
//! drain.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::subscriber::Interest;
use tracing::{span, Event, Metadata};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use crate::config::LogFormat;

/// The variables that turn export on (either, when not empty).
pub const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];

/// The service name of the exported spans unless `OTEL_SERVICE_NAME` (or `service.name` in
/// `OTEL_RESOURCE_ATTRIBUTES`) names another.
pub const DEFAULT_SERVICE_NAME: &str = "carmy-gateway";

/// The trace pipeline of this process: `None` inside when export is off.
#[must_use = "call Telemetry::shutdown at exit, or buffered spans are lost"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports what the batch processor still holds and stops it (waits for the exporter, at
    /// most its timeout); a failure is logged. Does nothing when export is off.
    pub async fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        // The SDK blocks until its export thread is done: not on a runtime worker.
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "flushing the trace exporter failed"),
            Err(error) => tracing::warn!(%error, "flushing the trace exporter failed"),
        }
    }
}

/// Whether the environment asks for trace export (docs/operations.md "Traces").
pub fn export_requested() -> bool {
    ENDPOINT_VARIABLES.iter().any(|name| {
        std::env::var_os(name).is_some_and(|value| !value.to_string_lossy().trim().is_empty())
    })
}

/// Installs logging to standard error at `RUST_LOG`'s level (else `default_level`), and trace
/// export when [`export_requested`]. A second call (tests) keeps the first subscriber; an
/// exporter that cannot be built is logged and export stays off.
pub fn init(format: LogFormat, default_level: &str) -> Telemetry {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // Colours only for a person at a terminal, never in a file or a log collector.
    let logs = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => logs.with_filter(AskEveryTime(filter)).boxed(),
        LogFormat::Json => logs.json().with_filter(AskEveryTime(filter)).boxed(),
    };
    let (provider, failure) = if export_requested() {
        match tracer_provider() {
            Ok(provider) => (Some(provider), None),
            Err(error) => (None, Some(error)),
        }
    } else {
        (None, None)
    };
    // Only Carmy's own spans, whatever RUST_LOG says; events stay in the logs.
    let traces = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("carmy"))
            .with_filter(AskEveryTime(tracing_subscriber::filter::filter_fn(
                |metadata| {
                    metadata.is_span() && carmy::trace::EXPORTED_SPANS.contains(&metadata.name())
                },
            )))
    });
    let installed = tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .try_init()
        .is_ok();
    if let Some(error) = failure {
        tracing::error!(%error, "OpenTelemetry trace export is off: the exporter could not be built");
    }
    let provider = provider.filter(|_| installed);
    carmy::trace::set_exporting(provider.is_some());
    if provider.is_some() {
        tracing::info!("exporting OpenTelemetry traces over OTLP/HTTP (protobuf)");
    }
    Telemetry { provider }
}

/// A per-layer filter that is asked for every span and event it does not rule out for good.
///
/// tracing-subscriber hands a per-layer filter's decision to its layer through a thread-local
/// that the next `enabled` call overwrites. A callsite every filter accepts is cached as
/// "always", so its spans skip `enabled` and read whatever the last `enabled` call on the thread
/// left there. sqlx asks `enabled` for each query's log line with metadata made at run time and
/// then logs nothing below its level: the next span on that thread (a call's `carmy.call`, right
/// after a store read) was dropped from the logs and from export, so its trace had no root
/// (tokio-rs/tracing#2519, #2704). Answering "sometimes" instead of "always" makes every span
/// and event ask, so the thread-local always holds the decision for the metadata at hand. The
/// cost is one filter check per span or event.
struct AskEveryTime<F>(F);

impl<S, F: Filter<S>> Filter<S> for AskEveryTime<F> {
    fn enabled(&self, metadata: &Metadata<'_>, context: &Context<'_, S>) -> bool {
        self.0.enabled(metadata, context)
    }

    fn callsite_enabled(&self, metadata: &'static Metadata<'static>) -> Interest {
        if self.0.callsite_enabled(metadata).is_never() {
            Interest::never()
        } else {
            Interest::sometimes()
        }
    }

    fn event_enabled(&self, event: &Event<'_>, context: &Context<'_, S>) -> bool {
        self.0.event_enabled(event, context)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.0.max_level_hint()
    }

    fn on_new_span(
        &self,
        attributes: &span::Attributes<'_>,
        id: &span::Id,
        context: Context<'_, S>,
    ) {
        self.0.on_new_span(attributes, id, context);
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, context: Context<'_, S>) {
        self.0.on_record(id, values, context);
    }

    fn on_enter(&self, id: &span::Id, context: Context<'_, S>) {
        self.0.on_enter(id, context);
    }

    fn on_exit(&self, id: &span::Id, context: Context<'_, S>) {
        self.0.on_exit(id, context);
    }

    fn on_close(&self, id: span::Id, context: Context<'_, S>) {
        self.0.on_close(id, context);
    }
}

/// The tracer provider: batch processor, OTLP/HTTP protobuf exporter configured by the
/// standard variables, the service name defaulting to [`DEFAULT_SERVICE_NAME`].
fn tracer_provider() -> Result<SdkTracerProvider, String> {
    // The exporter's reqwest (0.13, as carmy-tools builds it) carries no crypto provider of its
    // own: rustls on ring, as the rest of the gateway.
    carmy_tools::client::install_tls_provider();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
        .map_err(|error| error.to_string())?;
    let mut resource = Resource::builder();
    let named = std::env::var_os("OTEL_SERVICE_NAME").is_some()
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES")
            .is_ok_and(|attributes| attributes.contains("service.name="));
    if !named {
        resource = resource.with_service_name(DEFAULT_SERVICE_NAME);
    }
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build())
}
