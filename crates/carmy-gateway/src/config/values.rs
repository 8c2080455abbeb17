//! The value parsers of the gateway's settings whose refusals name the environment variable and
//! the flag: a duration that may be `0` ([`DurationOrZeroParser`]: a retention, a window) and
//! an unsigned integer within a range ([`InRange`]). Nothing is clamped.

use clap::builder::{RangedU64ValueParser, TypedValueParser};
use clap::error::ErrorKind;
use std::ffi::OsStr;
use std::marker::PhantomData;
use std::time::Duration;

/// `CARMY_RETENTION`: how long finished records are kept; `None` is forever (`0`). Also
/// `CARMY_MCP_ARGUMENT_REPLAY_WINDOW`, where `None` (`0`) is no window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention(pub Option<Duration>);

/// Reads a duration that may be `0`: `0` (`None`) or a duration as humantime reads it (`7d`,
/// `12h 30m`, `45s`, `500ms`). A refusal names the variable, the flag and the examples it
/// holds, e.g. `CARMY_RETENTION (--retention) must be a duration such as 7d, 36h, 90min or 30s,
/// or 0 to keep records forever, got "soon"`.
#[derive(Clone, Copy)]
pub struct DurationOrZeroParser(&'static str);

/// `CARMY_RETENTION`: `0` keeps records forever.
#[allow(non_upper_case_globals)]
pub const RetentionParser: DurationOrZeroParser =
    DurationOrZeroParser("7d, 36h, 90min or 30s, or 0 to keep records forever");

/// `CARMY_MCP_ARGUMENT_REPLAY_WINDOW`: `0` is no window (a model's id replays while its record
/// is kept).
#[allow(non_upper_case_globals)]
pub const WindowParser: DurationOrZeroParser =
    DurationOrZeroParser("10min, 1h or 90s, or 0 for no window");

impl TypedValueParser for DurationOrZeroParser {
    type Value = Retention;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<Retention, clap::Error> {
        duration_or_zero(cmd, arg, value, self.0)
    }
}

/// `0` (`None`) or a duration as humantime reads it; a refusal names the argument and
/// `examples` (`… must be a duration such as <examples>, got "soon"`).
fn duration_or_zero(
    cmd: &clap::Command,
    arg: Option<&clap::Arg>,
    value: &OsStr,
    examples: &str,
) -> Result<Retention, clap::Error> {
    let text = value.to_string_lossy();
    let text = text.trim();
    if text == "0" {
        return Ok(Retention(None));
    }
    match humantime::parse_duration(text) {
        Ok(duration) if duration.is_zero() => Ok(Retention(None)),
        Ok(duration) => Ok(Retention(Some(duration))),
        Err(error) => Err(cmd.clone().error(
            ErrorKind::ValueValidation,
            format!(
                "{} must be a duration such as {examples}, got {text:?} ({error})",
                argument_name(arg)
            ),
        )),
    }
}

/// How an error names an argument: `CARMY_X (--x)`, `--x`, or its id.
fn argument_name(arg: Option<&clap::Arg>) -> String {
    match arg {
        Some(arg) => match (arg.get_env(), arg.get_long()) {
            (Some(env), Some(long)) => format!("{} (--{long})", env.to_string_lossy()),
            (None, Some(long)) => format!("--{long}"),
            _ => arg.get_id().to_string(),
        },
        None => "the value".to_owned(),
    }
}

/// A clap value parser for an unsigned integer within `min..=max` whose error names the
/// argument's environment variable, its flag and the accepted range, e.g.
/// `CARMY_DB_POOL_SIZE (--db-pool-size) must be at least 1, got "0"`.
pub struct InRange<T> {
    min: u64,
    max: u64,
    target: PhantomData<fn() -> T>,
}

impl<T> Clone for InRange<T> {
    fn clone(&self) -> Self {
        Self::new(self.min, self.max)
    }
}

impl<T> InRange<T> {
    /// Values from `min` to `max`, both included.
    pub fn new(min: u64, max: u64) -> Self {
        Self {
            min,
            max,
            target: PhantomData,
        }
    }

    /// Values from `min` to the type's largest.
    pub fn at_least(min: u64) -> Self
    where
        T: Bounded,
    {
        Self::new(min, T::MAX_U64)
    }

    fn describe(&self) -> String
    where
        T: Bounded,
    {
        if self.max == T::MAX_U64 {
            format!("at least {}", self.min)
        } else {
            format!("between {} and {} (inclusive)", self.min, self.max)
        }
    }
}

/// Unsigned integer types with a largest value (the open end of [`InRange::at_least`]).
pub trait Bounded {
    /// The type's largest value, as a `u64`.
    const MAX_U64: u64;
}

impl Bounded for u32 {
    const MAX_U64: u64 = u32::MAX as u64;
}

impl Bounded for u64 {
    const MAX_U64: u64 = u64::MAX;
}

impl Bounded for usize {
    const MAX_U64: u64 = usize::MAX as u64;
}

impl<T> TypedValueParser for InRange<T>
where
    T: TryFrom<u64> + Bounded + Clone + Send + Sync + 'static,
    <T as TryFrom<u64>>::Error: Send + Sync + 'static + std::error::Error + ToString,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        RangedU64ValueParser::<T>::new()
            .range(self.min..=self.max)
            .parse_ref(cmd, arg, value)
            .map_err(|_| {
                let name = argument_name(arg);
                cmd.clone().error(
                    ErrorKind::ValueValidation,
                    format!(
                        "{name} must be {}, got {:?}",
                        self.describe(),
                        value.to_string_lossy()
                    ),
                )
            })
    }
}
