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

use std::fmt;

mod estimate;
mod words;

pub use estimate::{estimate, Estimate};
pub use words::{Vocabulary, COMMON_WORDS, COPIED};

/// Fewest ASCII letters and digits an id from a model must have (a UUID has 32, a nanoid
/// about 20 of its 21 characters; a nanoid with fewer than 12 is rarer than one in ten
/// billion).
pub const MIN_ID_CHARS: usize = 12;

/// Fewest distinct ASCII letters and digits an id from a model must have.
pub const MIN_DISTINCT_CHARS: usize = 6;

/// Least estimated randomness, in bits, of an id from a model ([`estimate`]).
pub const MIN_BITS: f64 = 64.0;

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

#[cfg(test)]
mod tests;
