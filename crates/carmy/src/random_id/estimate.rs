//! How many bits of an id another conversation could not guess: the id read as tokens, each
//! charged what it would cost to guess (the parent module's documentation has the costs).

use super::words::{Vocabulary, COMMON_WORDS};
use std::collections::HashSet;

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
pub(super) fn runs(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|run| !run.is_empty())
}

/// `run` (ASCII letters and digits) split into runs of digits and words of letters: a new word
/// starts at an upper-case letter after a lower-case one (`createOrder`) and at the last
/// upper-case letter of a run of them followed by a lower-case one (`SKUOrder`).
pub(super) fn tokens(run: &str) -> Vec<&str> {
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
