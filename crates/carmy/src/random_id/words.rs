//! The words and ids that make a model's id predictable (docs/semantics.md §11): ids copied
//! from documentation ([`COPIED`]), words models build descriptive ids from ([`COMMON_WORDS`]),
//! and the words of the call itself ([`Vocabulary`]).

use super::estimate::{runs, tokens};
use serde_json::{Map, Value};
use std::collections::HashSet;

/// Ids printed in specifications, library documentation and tutorials (and so in what models
/// learned from), which models and people copy as they are. Compared on their letters and
/// digits, case-insensitively, anywhere in an id (`order-<one of these>` is refused too).
pub const COPIED: &[&str] = &[
    // RFC 4122 / 9562, Wikipedia, MDN and the name-based UUID namespaces.
    "550e8400-e29b-41d4-a716-446655440000",
    "123e4567-e89b-12d3-a456-426614174000",
    "123e4567-e89b-12d3-a456-426655440000",
    "f47ac10b-58cc-4372-a567-0e02b2c3d479",
    "6ba7b810-9dad-11d1-80b4-00c04fd430c8",
    "6ba7b811-9dad-11d1-80b4-00c04fd430c8",
    "6ba7b812-9dad-11d1-80b4-00c04fd430c8",
    "6ba7b814-9dad-11d1-80b4-00c04fd430c8",
    // Python's `uuid` documentation.
    "a8098c1a-f86e-11da-bd1a-00112444be1e",
    "6fa459ea-ee8a-3ca4-894e-db77e160355e",
    "16fd2706-8baf-433b-82eb-8c7fada847da",
    "886313e1-3b8a-5372-9b90-0c9aee199e5d",
    // PostgreSQL's `uuid` type, Swagger / OpenAPI examples, the npm `uuid` README, Rust's
    // `uuid` crate.
    "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    "3fa85f64-5717-4562-b3fc-2c963f66afa6",
    "d290f1ee-6c54-4b01-90e6-d701748f0851",
    "9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d",
    "1b9d6bcd-bbfd-4b2d-9b5d-ab8dfbbd4bed",
    "67e55044-10b1-426f-9247-bb680e5fe0c8",
    "936da01f-9abd-4d9d-80c7-02af85c822a8",
    // UUIDs language models write when asked for "a random UUID".
    "7c9e6679-7425-40de-944b-e07fc1f90ae7",
    "a1b2c3d4-e5f6-7890-abcd-ef1234567890",
    // The ULID specification and the nanoid README.
    "01ARZ3NDEKTSV4RRFFQ69G5FAV",
    "V1StGXR8_Z5jdHi6B-myT",
    // Tool-use ids of Anthropic's documentation.
    "toolu_01A09q90qw90lq917835lq9",
    "toolu_01D7FLrfh4GYq7yT1ULFeyMV",
    // This project's own README and docs/mcp.md printed this one as a working example.
    "3f2b8c1e-9d4a-4e7b-a6c5-0e1f2d3c4b5a",
];

/// Words that models build descriptive ids from, beyond the call's own ([`Vocabulary`]).
pub const COMMON_WORDS: &[&str] = &[
    "action",
    "add",
    "and",
    "amount",
    "api",
    "attempt",
    "book",
    "booking",
    "buy",
    "call",
    "cancel",
    "cart",
    "charge",
    "check",
    "checkout",
    "client",
    "confirm",
    "create",
    "customer",
    "daily",
    "date",
    "day",
    "delete",
    "demo",
    "deploy",
    "email",
    "entry",
    "event",
    "example",
    "fake",
    "first",
    "for",
    "from",
    "get",
    "hello",
    "id",
    "idempotency",
    "invoice",
    "issue",
    "item",
    "job",
    "key",
    "message",
    "month",
    "my",
    "new",
    "night",
    "nightly",
    "note",
    "number",
    "of",
    "one",
    "operation",
    "order",
    "pay",
    "payment",
    "place",
    "post",
    "price",
    "product",
    "purchase",
    "qty",
    "quantity",
    "random",
    "refund",
    "remove",
    "req",
    "request",
    "reserve",
    "reservation",
    "retry",
    "run",
    "sample",
    "second",
    "send",
    "session",
    "set",
    "ship",
    "shipment",
    "sku",
    "step",
    "submit",
    "task",
    "test",
    "the",
    "third",
    "this",
    "ticket",
    "time",
    "to",
    "today",
    "token",
    "total",
    "transaction",
    "transfer",
    "two",
    "txn",
    "unique",
    "update",
    "user",
    "uuid",
    "value",
    "week",
    "with",
    "write",
    "year",
];

/// Most words a [`Vocabulary`] collects from one call: a large argument costs no more.
pub(super) const MAX_VOCABULARY_WORDS: usize = 512;

/// The words of one call (docs/semantics.md §11): what a model that describes the action
/// instead of choosing a random id would build its id from.
#[derive(Clone, Debug, Default)]
pub struct Vocabulary {
    pub(super) words: HashSet<String>,
}

impl Vocabulary {
    /// No words of a call (only [`COMMON_WORDS`] count).
    pub fn none() -> Self {
        Self::default()
    }

    /// The words of the tool's name and of the arguments' member names and string values,
    /// nested ones included (at most [`MAX_VOCABULARY_WORDS`] of them), lowercase.
    pub fn of_call(tool: &str, arguments: &Map<String, Value>) -> Self {
        let mut vocabulary = Self::none();
        vocabulary.add(tool);
        let mut pending: Vec<&Value> = Vec::new();
        for (name, value) in arguments {
            vocabulary.add(name);
            pending.push(value);
        }
        while let Some(value) = pending.pop() {
            if vocabulary.words.len() >= MAX_VOCABULARY_WORDS {
                break;
            }
            match value {
                Value::String(text) => vocabulary.add(text),
                Value::Array(items) => pending.extend(items),
                Value::Object(members) => {
                    for (name, value) in members {
                        vocabulary.add(name);
                        pending.push(value);
                    }
                }
                _ => {}
            }
        }
        vocabulary
    }

    fn add(&mut self, text: &str) {
        for run in runs(text) {
            for token in tokens(run) {
                if self.words.len() >= MAX_VOCABULARY_WORDS {
                    return;
                }
                if token.len() >= 2 && token.bytes().all(|b| b.is_ascii_alphabetic()) {
                    self.words.insert(token.to_ascii_lowercase());
                }
            }
        }
    }

    pub(super) fn contains(&self, word: &str) -> bool {
        self.words.contains(word)
    }
}
