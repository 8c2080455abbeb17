//! Filling a text's `{name}` placeholders with their values in one pass.

/// `template` with every `{name}` that `values` names replaced by its value, in one pass: a
/// value is written as it is, never searched for placeholders itself. A `{` that starts no
/// named placeholder is kept as it is. (Chained `str::replace` cost an MCP answer thousands of
/// instructions per text, issue 39.)
pub fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut text = String::with_capacity(template.len() + 64);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let value = after.find('}').and_then(|close| {
            let name = &after[..close];
            values
                .iter()
                .find(|(candidate, _)| *candidate == name)
                .map(|(_, value)| (*value, close))
        });
        match value {
            Some((value, close)) => {
                text.push_str(value);
                rest = &after[close + 1..];
            }
            None => {
                text.push('{');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text
}

#[cfg(test)]
mod tests {
    use super::fill;

    #[test]
    fn placeholders_are_filled_once_and_values_are_not_searched() {
        assert_eq!(
            fill("a {x} b {y}{x} {z} {", &[("x", "{y}"), ("y", "2")]),
            "a {y} b 2{y} {z} {"
        );
        assert_eq!(fill("", &[("x", "1")]), "");
        assert_eq!(fill("no placeholder", &[]), "no placeholder");
        assert_eq!(fill("{x", &[("x", "1")]), "{x");
        assert_eq!(fill("{{x}}", &[("x", "1")]), "{1}");
    }
}
