//! URL templates of HTTP tools: `https://host/v1/customers/{customer}/payments`, placeholders
//! filled from the call's arguments, each value percent-encoded so that it stays inside its own
//! path segment (docs/semantics.md §10). Scheme, host and port come only from the template.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::Value;
use url::Url;

/// Every byte but the unreserved characters of RFC 3986 (`A-Z a-z 0-9 - . _ ~`) is encoded:
/// `/`, `?`, `#`, `@`, `%`, `:` and control characters among them.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(String),
    Placeholder(String),
}

/// A parsed URL template. Placeholders are `{name}` (letters, digits, `_`), only in the path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrlTemplate {
    text: String,
    parts: Vec<Part>,
    origin: url::Origin,
}

impl UrlTemplate {
    /// Parses `text`: an absolute `http` or `https` URL without user info or fragment, whose
    /// placeholders lie in the path.
    ///
    /// # Errors
    /// A message saying what is wrong (unbalanced braces, a placeholder outside the path, not
    /// an http(s) URL, …).
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::parse_checked(text, false)
    }

    /// Parses `text` like [`UrlTemplate::parse`], also allowing placeholders in the query
    /// (a reconciliation probe's `?idempotency_key={execution_id}`); each value is
    /// percent-encoded all the same, so it stays inside its own query value.
    ///
    /// # Errors
    /// As [`UrlTemplate::parse`].
    pub fn parse_with_query(text: &str) -> Result<Self, String> {
        Self::parse_checked(text, true)
    }

    fn parse_checked(text: &str, query: bool) -> Result<Self, String> {
        let parts = split(text)?;
        let sample: String = parts
            .iter()
            .map(|part| match part {
                Part::Literal(literal) => literal.as_str(),
                Part::Placeholder(_) => "x",
            })
            .collect();
        let url = Url::parse(&sample).map_err(|error| format!("{text:?} is not a URL: {error}"))?;
        if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
            return Err(format!(
                "{text:?} must be an http:// or https:// URL with a host"
            ));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(format!(
                "{text:?} must not carry user info; send credentials in [tools.headers]"
            ));
        }
        if text.contains('#') {
            return Err(format!("{text:?} must not have a fragment"));
        }
        let path_start = path_start(text);
        let mut offset = 0;
        for part in &parts {
            match part {
                Part::Literal(literal) => offset += literal.len(),
                Part::Placeholder(name) => {
                    if offset < path_start || (!query && text[..offset].contains('?')) {
                        return Err(format!(
                            "placeholder {{{name}}} in {text:?} is outside the path; placeholders may fill path segments only"
                        ));
                    }
                    offset += name.len() + 2;
                }
            }
        }
        Ok(Self {
            text: text.to_owned(),
            parts,
            origin: url.origin(),
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The placeholder names, in order (a name may repeat).
    pub fn placeholders(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|part| match part {
            Part::Placeholder(name) => Some(name.as_str()),
            Part::Literal(_) => None,
        })
    }

    /// Checks that every placeholder has a usable argument: present, a string, number or
    /// boolean, not empty, and not `.` or `..` (which a URL parser would resolve as a dot
    /// segment even when percent-encoded).
    ///
    /// # Errors
    /// A message naming the argument.
    pub fn check(&self, arguments: &Value) -> Result<(), String> {
        for name in self.placeholders() {
            segment_text(name, arguments.get(name))?;
        }
        Ok(())
    }

    /// The URL for `arguments`, each placeholder replaced by its percent-encoded value.
    ///
    /// # Errors
    /// As [`UrlTemplate::check`]; also if the result would leave the template's origin (it
    /// cannot: every reserved character is encoded; checked all the same).
    pub fn render(&self, arguments: &Value) -> Result<Url, String> {
        let mut text = String::with_capacity(self.text.len() + 32);
        for part in &self.parts {
            match part {
                Part::Literal(literal) => text.push_str(literal),
                Part::Placeholder(name) => {
                    let value = segment_text(name, arguments.get(name))?;
                    text.extend(utf8_percent_encode(&value, SEGMENT));
                }
            }
        }
        let url = Url::parse(&text).map_err(|error| format!("the URL is invalid: {error}"))?;
        if url.origin() != self.origin {
            return Err("the URL would leave the configured origin".to_owned());
        }
        Ok(url)
    }
}

/// The text a path argument stands for.
fn segment_text(name: &str, value: Option<&Value>) -> Result<String, String> {
    let text = match value {
        None => {
            return Err(format!(
                "{name} is required: it fills a path segment of the URL"
            ))
        }
        Some(Value::String(text)) => text.clone(),
        Some(Value::Number(number)) => number.to_string(),
        Some(Value::Bool(flag)) => flag.to_string(),
        Some(_) => {
            return Err(format!(
                "{name} fills a path segment of the URL and must be a string, number or boolean"
            ))
        }
    };
    if text.is_empty() || text == "." || text == ".." {
        return Err(format!(
            "{name} fills a path segment of the URL and must not be empty, \".\" or \"..\""
        ));
    }
    Ok(text)
}

/// Splits a template into literals and `{name}` placeholders.
fn split(text: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return Err(format!("{text:?} has a '}}' without '{{'"));
        }
        if open > 0 {
            parts.push(Part::Literal(rest[..open].to_owned()));
        }
        let after = &rest[open + 1..];
        let close = after
            .find('}')
            .ok_or_else(|| format!("{text:?} has a '{{' without '}}'"))?;
        let name = &after[..close];
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!(
                "placeholder {{{name}}} in {text:?} must be a name of letters, digits and _"
            ));
        }
        parts.push(Part::Placeholder(name.to_owned()));
        rest = &after[close + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Literal(rest.to_owned()));
    }
    Ok(parts)
}

/// Where the path starts in `scheme://authority/path`: the first `/` after the authority (or
/// the end of the text).
fn path_start(text: &str) -> usize {
    let authority = text.find("://").map_or(0, |at| at + 3);
    text[authority..]
        .find(['/', '?'])
        .map_or(text.len(), |at| authority + at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(template: &str, value: Value) -> String {
        UrlTemplate::parse(template)
            .unwrap()
            .render(&json!({ "id": value }))
            .unwrap()
            .to_string()
    }

    #[test]
    fn hostile_values_stay_inside_their_segment() {
        let base = "http://127.0.0.1:9/v1/items/{id}/x";
        for (value, segment) in [
            ("../admin", "..%2Fadmin"),
            ("a?b=1", "a%3Fb%3D1"),
            ("a#frag", "a%23frag"),
            ("user@evil", "user%40evil"),
            ("a%2Fb", "a%252Fb"),
            ("line\nbreak", "line%0Abreak"),
            ("http://evil.example/", "http%3A%2F%2Fevil.example%2F"),
            ("ü", "%C3%BC"),
        ] {
            assert_eq!(
                render(base, json!(value)),
                format!("http://127.0.0.1:9/v1/items/{segment}/x"),
                "{value:?}"
            );
        }
        assert_eq!(render(base, json!(12)), "http://127.0.0.1:9/v1/items/12/x");
    }

    #[test]
    fn unusable_path_arguments_are_refused() {
        let template = UrlTemplate::parse("http://h/{id}").unwrap();
        for arguments in [
            json!({}),
            json!({"id": null}),
            json!({"id": [1]}),
            json!({"id": {"a": 1}}),
            json!({"id": ""}),
            json!({"id": ".."}),
            json!({"id": "."}),
        ] {
            assert!(template.check(&arguments).is_err(), "{arguments}");
        }
        assert!(template.check(&json!({"id": "a"})).is_ok());
    }

    #[test]
    fn bad_templates_are_refused() {
        for bad in [
            "ftp://h/x",
            "/relative/{id}",
            "http://{host}/x",
            "http://h:{port}/x",
            "http://h/x?q={id}",
            "http://h/x#{id}",
            "http://user:pw@h/x",
            "http://h/{id",
            "http://h/id}",
            "http://h/{a-b}",
            "http://h/{}",
        ] {
            assert!(UrlTemplate::parse(bad).is_err(), "{bad}");
        }
    }
}
