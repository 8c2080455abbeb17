//! The request id a model holds (docs/semantics.md §11): the optional argument that a tool
//! which changes something shows to a model, so that the model itself can repeat an action
//! under the same identity after a timeout, an error or a lost answer.
//!
//! A tool is offered the argument unless its annotations say read-only; the tools file may
//! name it differently, turn it off, turn it on for a read-only tool, or adopt one of the
//! tool's own properties ([`KeySetting`]). [`resolve`] decides what a tool takes,
//! [`listed_schema`] adds the property to the schema a front lists; [`crate::random_id`] is
//! the rule an id must pass to be accepted from a model.

use crate::tool::Tool;
use serde_json::{json, Map, Value};

/// The argument's name when nothing else is configured (`CARMY_MCP_KEY_ARGUMENT`).
pub const DEFAULT_KEY_ARGUMENT: &str = "request_id";

/// What the argument's description tells a model (docs/semantics.md §11).
pub const DESCRIPTION: &str = "A unique id you generate for this action: a new random UUID \
(never one copied from an example, never built from words, dates or counters). If you are not \
sure whether an earlier attempt of this same action took effect (a timeout, an error, a lost \
answer), call again with the same arguments and the same id: you get the first attempt's \
outcome instead of doing it twice. Use a new id for a new action.";

/// A tool's own choice about the argument (tools file: `key_argument`, `key_required`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeySetting {
    /// `None`: the gateway's name for a tool not annotated read-only, no argument for a
    /// read-only one; `Some("")`: no argument; `Some(name)`: that name, for any tool (one of
    /// the tool's own properties is adopted).
    pub argument: Option<String>,
    /// `None`: the gateway's default (`CARMY_MCP_KEY_REQUIRED`).
    pub required: Option<bool>,
}

/// The gateway's defaults for the argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyArgumentConfig {
    /// The argument's name (`CARMY_MCP_KEY_ARGUMENT`, default [`DEFAULT_KEY_ARGUMENT`]); empty
    /// offers it only to tools that name it themselves.
    pub name: String,
    /// Whether tools require it (`CARMY_MCP_KEY_REQUIRED`, default `false`).
    pub required: bool,
}

impl Default for KeyArgumentConfig {
    fn default() -> Self {
        Self {
            name: DEFAULT_KEY_ARGUMENT.to_owned(),
            required: false,
        }
    }
}

/// What one tool takes, as `GET /v1/tools` shows it (`request_id_argument`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyArgument {
    /// The argument's name in `arguments`.
    pub name: String,
    /// Whether a call without it is refused.
    pub required: bool,
    /// The argument is one of the tool's own properties: it is forwarded to the tool unchanged
    /// (and part of the fingerprint); otherwise it is taken out of `arguments` before the
    /// schema check, the fingerprint and the tool.
    pub adopted: bool,
    /// The description a model reads for it ([`DESCRIPTION`]).
    pub description: &'static str,
}

/// A tool whose own schema already has a property of the gateway's argument name: a start-up
/// error (docs/semantics.md §11).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "tool {tool:?} already has an argument named {name:?}, the name of the request id a model \
     holds; set key_argument = \"<another name>\" for this tool in the tools file to offer the \
     request id under another name, or key_argument = {name:?} to use the tool's own argument \
     as the request id (it is then forwarded unchanged)"
)]
pub struct KeyCollision {
    /// The tool.
    pub tool: String,
    /// The colliding name.
    pub name: String,
}

/// What `tool` takes under `config`: `None` for no argument.
///
/// # Errors
/// [`KeyCollision`] when the gateway's name (not one the tool chose) is one of the tool's own
/// properties.
pub fn resolve(
    tool: &dyn Tool,
    config: &KeyArgumentConfig,
) -> Result<Option<KeyArgument>, KeyCollision> {
    let setting = tool.key_setting();
    let required = setting.required.unwrap_or(config.required);
    let own = |name: &str| {
        tool.input_schema()
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|properties| properties.contains_key(name))
    };
    match setting.argument.as_deref() {
        Some("") => Ok(None),
        Some(name) => Ok(Some(KeyArgument {
            name: name.to_owned(),
            required,
            adopted: own(name),
            description: DESCRIPTION,
        })),
        None => {
            let read_only = tool
                .annotations()
                .is_some_and(|hints| hints.read_only_hint == Some(true));
            if read_only || config.name.is_empty() {
                return Ok(None);
            }
            if own(&config.name) {
                return Err(KeyCollision {
                    tool: tool.name().to_owned(),
                    name: config.name.clone(),
                });
            }
            Ok(Some(KeyArgument {
                name: config.name.clone(),
                required,
                adopted: false,
                description: DESCRIPTION,
            }))
        }
    }
}

/// `schema` as a front lists it: with the argument as an optional (or required) string
/// property described by [`DESCRIPTION`]; an adopted property is left as the tool wrote it and
/// only made required when the key is.
pub fn listed_schema(schema: &Value, key: &KeyArgument) -> Value {
    let mut listed = match schema {
        Value::Object(schema) => schema.clone(),
        _ => Map::new(),
    };
    if !key.adopted {
        let properties = listed
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(properties) = properties {
            properties.insert(
                key.name.clone(),
                json!({"type": "string", "description": key.description}),
            );
        }
    }
    if key.required {
        let required = listed
            .entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(names) = required {
            if !names.iter().any(|name| name.as_str() == Some(&key.name)) {
                names.push(Value::String(key.name.clone()));
            }
        }
    }
    Value::Object(listed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::{FnTool, ToolAnnotations};

    fn tool(schema: Value, read_only: Option<bool>, setting: KeySetting) -> FnTool {
        let mut tool = FnTool::new("t", schema, |_, args| async move { Ok(args) });
        if let Some(read_only) = read_only {
            tool = tool.with_annotations(ToolAnnotations {
                read_only_hint: Some(read_only),
                ..ToolAnnotations::default()
            });
        }
        tool.with_key_setting(setting)
    }

    fn named(name: &str) -> KeySetting {
        KeySetting {
            argument: Some(name.to_owned()),
            required: None,
        }
    }

    #[test]
    fn who_gets_the_argument() {
        let config = KeyArgumentConfig::default();
        let plain = json!({"type": "object", "properties": {"sku": {"type": "string"}}});
        let key = |adopted, name: &str| {
            Ok(Some(KeyArgument {
                name: name.to_owned(),
                required: false,
                adopted,
                description: DESCRIPTION,
            }))
        };
        let found = |t: FnTool| resolve(&t, &config);
        assert_eq!(
            found(tool(plain.clone(), None, KeySetting::default())),
            key(false, "request_id")
        );
        assert_eq!(
            found(tool(plain.clone(), Some(false), KeySetting::default())),
            key(false, "request_id")
        );
        assert_eq!(
            found(tool(plain.clone(), Some(true), KeySetting::default())),
            Ok(None)
        );
        assert_eq!(found(tool(plain.clone(), None, named(""))), Ok(None));
        assert_eq!(
            found(tool(plain.clone(), Some(true), named("op_id"))),
            key(false, "op_id")
        );
        assert_eq!(found(tool(plain, None, named("sku"))), key(true, "sku"));
        let own = json!({"type": "object", "properties": {"request_id": {"type": "string"}}});
        let collision = found(tool(own, None, KeySetting::default())).unwrap_err();
        assert_eq!(collision.tool, "t");
        let text = collision.to_string();
        assert!(text.contains("key_argument = \"<another name>\""), "{text}");
        assert!(text.contains("key_argument = \"request_id\""), "{text}");
        let required = KeyArgumentConfig {
            name: "rid".into(),
            required: true,
        };
        let schema = json!({"type": "object"});
        assert_eq!(
            resolve(&tool(schema, None, KeySetting::default()), &required),
            Ok(Some(KeyArgument {
                name: "rid".into(),
                required: true,
                adopted: false,
                description: DESCRIPTION,
            }))
        );
    }

    #[test]
    fn the_listed_schema_has_the_property() {
        let schema = json!({"type": "object", "required": ["sku"], "additionalProperties": false,
            "properties": {"sku": {"type": "string"}}});
        let key = KeyArgument {
            name: "request_id".into(),
            required: true,
            adopted: false,
            description: DESCRIPTION,
        };
        let listed = listed_schema(&schema, &key);
        assert_eq!(
            listed["properties"]["request_id"],
            json!({"type": "string", "description": DESCRIPTION})
        );
        assert_eq!(listed["required"], json!(["sku", "request_id"]));
        assert_eq!(listed["additionalProperties"], false);
        let adopted = KeyArgument {
            name: "sku".into(),
            required: false,
            adopted: true,
            description: DESCRIPTION,
        };
        assert_eq!(listed_schema(&schema, &adopted), schema);
    }
}
