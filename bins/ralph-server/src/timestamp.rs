//! ISO 8601 timestamps with the local offset, read once at start-up.
//!
//! The local offset can only be read safely while the process has one thread
//! (libc's time zone code is not thread-safe), so `main` calls [`init`] before
//! the runtime starts; a daemon running across a daylight-saving change keeps
//! the offset it started with (still a correct instant, with its offset).

use std::sync::OnceLock;

use time::format_description::well_known::iso8601::{Config, EncodedConfig, Iso8601, TimePrecision};
use time::{OffsetDateTime, UtcOffset};

static OFFSET: OnceLock<UtcOffset> = OnceLock::new();

const FORMAT: EncodedConfig =
    Config::DEFAULT.set_time_precision(TimePrecision::Second { decimal_digits: std::num::NonZeroU8::new(6) }).encode();

/// Reads the local offset (UTC when it cannot be read). Call before any thread starts.
pub fn init() {
    let _ = OFFSET.set(UtcOffset::current_local_offset().unwrap_or(UtcOffset::UTC));
}

/// Now, e.g. `2026-01-23T10:30:00.123456+01:00`.
pub fn now() -> String {
    let offset = OFFSET.get().copied().unwrap_or(UtcOffset::UTC);
    let now = OffsetDateTime::now_utc().to_offset(offset);
    now.format(&Iso8601::<FORMAT>).unwrap_or_else(|_| now.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_have_microseconds_and_a_timezone() {
        let ts = super::now();
        // 2026-01-23T10:30:00.123456Z or ...+01:00
        assert_eq!(&ts[10..11], "T", "{ts}");
        assert_eq!(&ts[19..20], ".", "{ts}");
        assert!(ts.ends_with('Z') || ts[26..].starts_with('+') || ts[26..].starts_with('-'), "{ts}");
    }
}
