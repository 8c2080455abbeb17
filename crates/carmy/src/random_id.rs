//! What counts as an id a model chose at random (docs/semantics.md §11, "The request id a
//! model holds").
//!
//! Many conversations share one API key, so two conversations that write the same request id
//! for the same action would share one outcome. A model's id is accepted only when nothing
//! about it suggests that another conversation would write it too: [`check`] refuses white
//! space, ids printed in documentation ([`COPIED`]), fewer than [`MIN_ID_CHARS`] letters and
//! digits, fewer than [`MIN_DISTINCT_CHARS`] distinct ones, sequences and repetitions (more than
//! two thirds of neighbouring pairs equal or counting, as `aa`, `ab`, `21`), and ids
//! whose [`estimate`] of randomness is below [`MIN_BITS`].
//!
//! The estimate reads the id as tokens (runs of digits; runs of letters, split where the case
//! says a new word starts, as in `CreateOrder`) and charges each what it would cost to guess:
//! a character of a random id costs what its alphabet gives (4 bits for hexadecimal, 5 for
//! Crockford's base 32, about 5.2 for one-case letters and digits, about 6 for both cases); a
//! word of the call itself (the tool's name, the arguments' names and string values,
//! [`Vocabulary`]) costs 3 bits, a word of [`COMMON_WORDS`] 8, a pronounceable word between
//! separators in an id made of such parts 2.5 per letter; a date, a time or a Unix timestamp
//! between separators 4 to 16 bits, a number `log2(n + 1) + 2` bits (so `0001` is a counter
//! worth 3), and a token seen before 1 bit. A random UUIDv4, ULID or nanoid estimates above 70
//! bits nearly always (its own randomness is 122, 80 to 128, and 126 bits): the test
//! `random_ids_are_never_refused` generates ten thousand of each from a fixed seed.
//!
//! What no check of one id can see: a model that samples deterministically writes the same
//! random-looking id every time it sees the same conversation. The MCP front scopes and times
//! model ids for that (docs/semantics.md §11).

use serde_json::{Map, Value};
use std::collections::HashSet;
use std::fmt;

/// Fewest ASCII letters and digits an id from a model must have (a UUID has 32, a nanoid
/// about 20 of its 21 characters; a nanoid with fewer than 12 is rarer than one in ten
/// billion).
pub const MIN_ID_CHARS: usize = 12;

/// Fewest distinct ASCII letters and digits an id from a model must have.
pub const MIN_DISTINCT_CHARS: usize = 6;

/// Least estimated randomness, in bits, of an id from a model ([`estimate`]).
pub const MIN_BITS: f64 = 64.0;

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
const MAX_VOCABULARY_WORDS: usize = 512;

/// The words of one call (docs/semantics.md §11): what a model that describes the action
/// instead of choosing a random id would build its id from.
#[derive(Clone, Debug, Default)]
pub struct Vocabulary {
    words: HashSet<String>,
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

    fn contains(&self, word: &str) -> bool {
        self.words.contains(word)
    }
}

/// Why an id is not taken as random; its [`Display`](fmt::Display) is a reason a language
/// model can act on ("it …").
#[derive(Clone, Debug, PartialEq)]
pub enum NotRandom {
    /// It contains white space: a description, not an id.
    Spaces,
    /// It contains an id of [`COPIED`].
    Copied,
    /// Fewer than [`MIN_ID_CHARS`] ASCII letters and digits.
    TooShort {
        /// How many it has.
        chars: usize,
    },
    /// Fewer than [`MIN_DISTINCT_CHARS`] distinct ASCII letters and digits.
    FewDistinct {
        /// How many it has.
        distinct: usize,
    },
    /// More than two thirds of its neighbouring letters and digits repeat or count (`aa`, `ab`,
    /// `21`).
    Sequence,
    /// Its [`estimate`] is below [`MIN_BITS`].
    Predictable {
        /// The estimate, rounded down.
        bits: u32,
        /// The words it is made of, lowercase (empty when none was found).
        words: Vec<String>,
        /// The dates, times, timestamps and counts it is made of.
        numbers: Vec<String>,
    },
}

impl fmt::Display for NotRandom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Spaces => f.write_str("contains spaces: it reads like a description, not a random id"),
            Self::Copied => f.write_str(
                "is an example id printed in documentation, which others copy too, not one you generated",
            ),
            Self::TooShort { chars } => write!(
                f,
                "has {chars} letters and digits; at least {MIN_ID_CHARS} are needed"
            ),
            Self::FewDistinct { distinct } => write!(
                f,
                "uses only {distinct} different letters and digits; at least {MIN_DISTINCT_CHARS} are needed"
            ),
            Self::Sequence => f.write_str("is a sequence or repetition, not random"),
            Self::Predictable {
                bits,
                words,
                numbers,
            } => match (words.is_empty(), numbers.is_empty()) {
                (false, true) => write!(
                    f,
                    "is made of words ({}), which another conversation may write too, not a random id",
                    words.join(", ")
                ),
                (false, false) => write!(
                    f,
                    "is made of words and numbers ({}; {}), which another conversation may write too, not a random id",
                    words.join(", "),
                    numbers.join(", ")
                ),
                (true, false) => write!(
                    f,
                    "is made of dates, times or counts ({}), which another conversation may write too, not a random id",
                    numbers.join(", ")
                ),
                (true, true) => write!(
                    f,
                    "is too predictable to be a random id (about {bits} bits of randomness; at least {} are needed, and a UUID has 122)",
                    MIN_BITS as u32
                ),
            },
        }
    }
}

/// Checks that `id`, sent by a model for a call whose words are `vocabulary`, is random
/// enough not to collide by accident with another conversation's (module documentation).
///
/// # Errors
/// The first rule it breaks, in the order: [`NotRandom::Spaces`], [`NotRandom::Copied`],
/// [`NotRandom::Predictable`] when words, dates or counts were found, [`NotRandom::TooShort`],
/// [`NotRandom::FewDistinct`], [`NotRandom::Sequence`], [`NotRandom::Predictable`].
pub fn check(id: &str, vocabulary: &Vocabulary) -> Result<(), NotRandom> {
    if id.chars().any(char::is_whitespace) {
        return Err(NotRandom::Spaces);
    }
    let chars: Vec<u8> = id.bytes().filter(u8::is_ascii_alphanumeric).collect();
    let normalized: String = chars
        .iter()
        .map(|b| char::from(b.to_ascii_lowercase()))
        .collect();
    if COPIED.iter().any(|copied| {
        let copied: String = copied
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
            .collect();
        normalized.contains(&copied)
    }) {
        return Err(NotRandom::Copied);
    }
    // Words, dates and counts are the most useful reason to give; the shape rules after them
    // catch what is neither (`r1`, `aaaa…`, `abcd…`).
    let estimate = estimate(id, vocabulary);
    let predictable = estimate.bits < MIN_BITS;
    let refused = || NotRandom::Predictable {
        bits: estimate.bits as u32,
        words: estimate.words.clone(),
        numbers: estimate.numbers.clone(),
    };
    if predictable && !(estimate.words.is_empty() && estimate.numbers.is_empty()) {
        return Err(refused());
    }
    if chars.len() < MIN_ID_CHARS {
        return Err(NotRandom::TooShort { chars: chars.len() });
    }
    let mut distinct = chars.clone();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < MIN_DISTINCT_CHARS {
        return Err(NotRandom::FewDistinct {
            distinct: distinct.len(),
        });
    }
    let steps = chars
        .windows(2)
        .filter(|pair| pair[0].abs_diff(pair[1]) <= 1)
        .count();
    if steps * 3 > (chars.len() - 1) * 2 {
        return Err(NotRandom::Sequence);
    }
    if predictable {
        return Err(refused());
    }
    Ok(())
}

/// What [`estimate`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    /// The estimated randomness, in bits.
    pub bits: f64,
    /// The words it charged as words, lowercase, in order, each once.
    pub words: Vec<String>,
    /// The dates, times, timestamps and counts it charged as such, in order, each once.
    pub numbers: Vec<String>,
}

/// Estimates how many bits of `id` another conversation could not guess, reading the words of
/// `vocabulary` as known (module documentation).
pub fn estimate(id: &str, vocabulary: &Vocabulary) -> Estimate {
    let alphanumeric: Vec<u8> = id.bytes().filter(u8::is_ascii_alphanumeric).collect();
    let per_char = alphabet_bits(&alphanumeric);
    let runs: Vec<&str> = runs(id).collect();
    // An id made of separated words and numbers (`blue-elephant-42`): its pronounceable parts
    // are words even when no list has them. Random ids with separators (nanoid) nearly always
    // have a part that is neither.
    let structured = runs.len() >= 2
        && runs.iter().all(|run| {
            run.bytes().all(|b| b.is_ascii_digit()) || pronounceable(run) || run.len() <= 3
        });
    let mut found = Estimate {
        bits: 0.0,
        words: Vec::new(),
        numbers: Vec::new(),
    };
    let mut seen: HashSet<String> = HashSet::new();
    for run in runs {
        let tokens = tokens(run);
        let whole = tokens.len() == 1;
        for token in tokens {
            let lower = token.to_ascii_lowercase();
            let full = token.len() as f64 * per_char;
            if token.len() >= 2 && !seen.insert(lower.clone()) {
                found.bits += 1.0;
                continue;
            }
            if token.as_bytes()[0].is_ascii_digit() {
                let pattern = if whole { date_bits(token) } else { None };
                let cost = pattern.unwrap_or_else(|| full.min(counter_bits(token)));
                if pattern.is_some() || (token.len() >= 2 && cost + 2.0 < full) {
                    push_once(&mut found.numbers, token.to_owned());
                }
                found.bits += cost;
                continue;
            }
            let cost = if token.len() < 2 {
                full
            } else if vocabulary.contains(&lower) {
                3.0
            } else if COMMON_WORDS.contains(&lower.as_str()) {
                8.0
            } else if structured && whole && pronounceable(token) {
                2.0 + 2.5 * token.len() as f64
            } else {
                full
            };
            if cost < full {
                push_once(&mut found.words, lower);
            }
            found.bits += cost;
        }
    }
    found
}

fn push_once(list: &mut Vec<String>, item: String) {
    if !list.contains(&item) {
        list.push(item);
    }
}

/// Bits per character of a random id over the smallest common alphabet holding `chars`.
fn alphabet_bits(chars: &[u8]) -> f64 {
    const CROCKFORD: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let all = |allowed: &dyn Fn(u8) -> bool| chars.iter().all(|&b| allowed(b));
    if all(&|b| b.is_ascii_digit()) {
        10f64.log2()
    } else if all(&|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        || all(&|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
    {
        4.0
    } else if all(&|b| CROCKFORD.contains(&b))
        || all(&|b| {
            b.is_ascii_digit()
                || (b.is_ascii_lowercase() && CROCKFORD.contains(&b.to_ascii_uppercase()))
        })
    {
        5.0
    } else if all(&|b| !b.is_ascii_uppercase()) || all(&|b| !b.is_ascii_lowercase()) {
        36f64.log2()
    } else {
        62f64.log2()
    }
}

/// The runs of ASCII letters and digits of `text`, split at every other character.
fn runs(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|run| !run.is_empty())
}

/// `run` (ASCII letters and digits) split into runs of digits and words of letters: a new word
/// starts at an upper-case letter after a lower-case one (`createOrder`) and at the last
/// upper-case letter of a run of them followed by a lower-case one (`SKUOrder`).
fn tokens(run: &str) -> Vec<&str> {
    let bytes = run.as_bytes();
    let mut tokens = Vec::new();
    let mut start = 0;
    for i in 1..bytes.len() {
        let (before, here) = (bytes[i - 1], bytes[i]);
        let next_lower = bytes.get(i + 1).is_some_and(u8::is_ascii_lowercase);
        let split = before.is_ascii_digit() != here.is_ascii_digit()
            || (here.is_ascii_uppercase()
                && (before.is_ascii_lowercase() || (before.is_ascii_uppercase() && next_lower)));
        if split {
            tokens.push(&run[start..i]);
            start = i;
        }
    }
    if start < bytes.len() {
        tokens.push(&run[start..]);
    }
    tokens
}

/// Letters only, at least three, in one case or capitalized, with a vowel (or `y`) at least
/// every fourth letter: shaped like a word.
fn pronounceable(token: &str) -> bool {
    let bytes = token.as_bytes();
    if bytes.len() < 3 || !bytes.iter().all(u8::is_ascii_alphabetic) {
        return false;
    }
    let rest = &bytes[1..];
    let shaped =
        rest.iter().all(u8::is_ascii_lowercase) || bytes.iter().all(u8::is_ascii_uppercase);
    let mut consonants = 0;
    for b in bytes {
        if b"aeiouy".contains(&b.to_ascii_lowercase()) {
            consonants = 0;
        } else {
            consonants += 1;
            if consonants >= 4 {
                return false;
            }
        }
    }
    shaped && consonants < bytes.len()
}

/// What a count costs: `log2(n + 1) + 2` bits (leading zeros are free: `0001` is 1).
fn counter_bits(digits: &str) -> f64 {
    let value: f64 = digits.parse().unwrap_or(f64::MAX);
    (value + 1.0).log2() + 2.0
}

/// What a date, a time or a Unix timestamp written as digits on its own costs; `None` when
/// `digits` is none of them.
fn date_bits(digits: &str) -> Option<f64> {
    let number = |range: std::ops::Range<usize>| digits[range].parse::<u32>().unwrap_or(u32::MAX);
    let ymd = |at: usize| {
        digits.len() >= at + 8
            && (1970..=2099).contains(&number(at..at + 4))
            && (1..=12).contains(&number(at + 4..at + 6))
            && (1..=31).contains(&number(at + 6..at + 8))
    };
    let hms = |at: usize| {
        digits.len() >= at + 6
            && number(at..at + 2) < 24
            && number(at + 2..at + 4) < 60
            && number(at + 4..at + 6) < 60
    };
    let value: f64 = digits.parse().unwrap_or(0.0);
    match digits.len() {
        4 if (1970..=2099).contains(&number(0..4)) => Some(4.0),
        6 if hms(0) => Some(10.0),
        8 if ymd(0) => Some(12.0),
        10 if (1e9..4.2e9).contains(&value) => Some(10.0),
        12 | 14 if ymd(0) => Some(16.0),
        13 if (1e12..4.2e12).contains(&value) => Some(12.0),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
