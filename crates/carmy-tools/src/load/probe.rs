//! Validating a tool's `[tools.reconcile]` (docs/semantics.md §12.10): the keys of
//! [`RawReconcile`], each mistake a [`ConfigError`] naming the tool and the field.

use super::{parse_method, positive, Checker};
use crate::config::RawReconcile;
use crate::error::ConfigError;
use crate::spec::ProbeSpec;
use crate::template::UrlTemplate;
use reqwest::Method;
use std::collections::BTreeSet;
use std::time::Duration;
use toml::Spanned;

/// A probe's deadline when `timeout_ms` is omitted.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_millis(2000);

impl Checker<'_> {
    /// The validated probe of the tool `label`.
    pub(super) fn probe(
        &self,
        entry: &Spanned<RawReconcile>,
        label: &str,
    ) -> Result<ProbeSpec, ConfigError> {
        let raw = entry.get_ref();
        let at = |start: usize, field: &str, message: String| {
            self.report.error(
                Some(start),
                Some(label),
                Some(&format!("reconcile.{field}")),
                message,
            )
        };
        if let Some(tool) = &raw.tool {
            return Err(at(tool.span().start, "tool", "a probe that calls another tool is not supported by this build; give method and url (an HTTP probe)".into()));
        }
        if let Some(arguments) = &raw.arguments {
            return Err(at(
                arguments.span().start,
                "arguments",
                "arguments go with tool, which this build does not support; give method and url"
                    .into(),
            ));
        }
        let url = raw.url.as_ref().ok_or_else(|| {
            at(
                entry.span().start,
                "url",
                "is required: the URL that looks the execution up, e.g. https://host/v1/payments?idempotency_key={execution_id}".into(),
            )
        })?;
        let url = UrlTemplate::parse_with_query(url.get_ref())
            .map_err(|message| at(url.span().start, "url", message))?;
        let method = match &raw.method {
            None => Method::GET,
            Some(method) => parse_method(method.get_ref())
                .map_err(|message| at(method.span().start, "method", message))?,
        };
        let found_status = statuses(&raw.found_status, 200)
            .map_err(|(start, message)| at(start, "found_status", message))?;
        let absent_status = statuses(&raw.absent_status, 404)
            .map_err(|(start, message)| at(start, "absent_status", message))?;
        if let Some(both) = found_status.intersection(&absent_status).next() {
            let start = raw
                .absent_status
                .as_ref()
                .map_or(entry.span().start, |s| s.span().start);
            return Err(at(
                start,
                "absent_status",
                format!("{both} is also in found_status; a status means found or absent, not both"),
            ));
        }
        let absent_not_executed = match &raw.absent_means {
            None => false,
            Some(means) => match means.get_ref().as_str() {
                "unknown" => false,
                "not_executed" => true,
                other => return Err(at(means.span().start, "absent_means", format!("{other:?} is not \"unknown\" (leave it for a person) or \"not_executed\" (the upstream's absent proves the effect did not happen)"))),
            },
        };
        let timeout = positive(&raw.timeout_ms)
            .map_err(|span| at(span.start, "timeout_ms", "must be at least 1".into()))?
            .map_or(DEFAULT_PROBE_TIMEOUT, Duration::from_millis);
        Ok(ProbeSpec {
            method,
            url,
            found_status,
            absent_status,
            absent_not_executed,
            timeout,
            headers: self.headers(&raw.headers, label)?,
        })
    }
}

/// The listed statuses (100 to 599), or `default` alone when the key is omitted.
fn statuses(
    listed: &Option<Spanned<Vec<u16>>>,
    default: u16,
) -> Result<BTreeSet<u16>, (usize, String)> {
    let Some(listed) = listed else {
        return Ok(BTreeSet::from([default]));
    };
    if listed.get_ref().is_empty() {
        return Err((listed.span().start, "must list at least one status".into()));
    }
    listed
        .get_ref()
        .iter()
        .map(|status| {
            if (100..=599).contains(status) {
                Ok(*status)
            } else {
                Err((
                    listed.span().start,
                    format!("{status} is not an HTTP status"),
                ))
            }
        })
        .collect()
}
