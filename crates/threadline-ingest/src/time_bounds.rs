//! Which record times are accepted. A span dated a year ahead (a sender with a wrong
//! clock) would otherwise become the newest minute of the store and hold everything
//! that depends on "now" hostage; a time past `i64::MAX` ns (year 2262) cannot be
//! stored at all. Records outside the bounds are refused one by one, through OTLP
//! partial success, with a message that names the time and the bound.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The window of accepted times around `now_unix_nano`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeBounds {
    /// The receiving server's clock.
    pub now_unix_nano: u64,
    /// How far ahead of `now` a time may be (a sender's clock running fast).
    pub max_future_skew: Duration,
    /// How far behind `now` a time may be; `None`: no bound (backfills, replays).
    pub max_age: Option<Duration>,
}

/// The largest time a record may carry: times are stored as signed nanoseconds.
const LATEST_STORABLE_NS: u64 = i64::MAX as u64;

impl TimeBounds {
    /// Bounds around the wall clock now.
    pub fn around_now(max_future_skew: Duration, max_age: Option<Duration>) -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos().min(LATEST_STORABLE_NS as u128) as u64);
        Self {
            now_unix_nano: now,
            max_future_skew,
            max_age,
        }
    }

    /// Only what can be stored: any time up to `i64::MAX` ns (tests, replays of old
    /// payloads through the converter alone).
    pub fn storable() -> Self {
        Self {
            now_unix_nano: 0,
            max_future_skew: Duration::from_nanos(LATEST_STORABLE_NS),
            max_age: None,
        }
    }

    /// `Ok` when `time_unix_nano` (the record's `field`) is inside the bounds, else why not.
    pub fn check(&self, field: &str, time_unix_nano: u64) -> Result<(), String> {
        if time_unix_nano > LATEST_STORABLE_NS {
            return Err(format!(
                "{field} {time_unix_nano} is after the latest storable time ({LATEST_STORABLE_NS} ns, in 2262)"
            ));
        }
        let latest = self
            .now_unix_nano
            .saturating_add(duration_ns(self.max_future_skew));
        if time_unix_nano > latest {
            return Err(format!(
                "{field} {} is {} ahead of the server's clock ({}), more than the accepted skew of {}: is the sender's clock wrong?",
                rfc3339(time_unix_nano),
                roughly(time_unix_nano - self.now_unix_nano),
                rfc3339(self.now_unix_nano),
                humantime::format_duration(self.max_future_skew),
            ));
        }
        if let Some(max_age) = self.max_age {
            let earliest = self.now_unix_nano.saturating_sub(duration_ns(max_age));
            if time_unix_nano < earliest {
                return Err(format!(
                    "{field} {} is older than the accepted age of {} (max_span_age)",
                    rfc3339(time_unix_nano),
                    humantime::format_duration(max_age),
                ));
            }
        }
        Ok(())
    }
}

fn duration_ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// A span of time in its largest whole unit ("365 days", "3 h", "20 min", "12 s").
fn roughly(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    match secs {
        s if s >= 2 * 86_400 => format!("{} days", s / 86_400),
        s if s >= 2 * 3_600 => format!("{} h", s / 3_600),
        s if s >= 2 * 60 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// A unix-nanosecond time as RFC 3339 UTC, to the second.
fn rfc3339(ns: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_nanos(ns)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_764_400_000_000_000_000;

    fn bounds() -> TimeBounds {
        TimeBounds {
            now_unix_nano: NOW,
            max_future_skew: Duration::from_secs(15 * 60),
            max_age: Some(Duration::from_secs(24 * 3600)),
        }
    }

    #[test]
    fn times_inside_the_window_pass_and_others_are_named() {
        let b = bounds();
        assert!(b.check("start_time_unix_nano", NOW).is_ok());
        assert!(b
            .check("start_time_unix_nano", NOW + 14 * 60_000_000_000)
            .is_ok());
        let year = 365 * 24 * 3600 * 1_000_000_000u64;
        let ahead = b.check("start_time_unix_nano", NOW + year).unwrap_err();
        assert!(
            ahead.contains("ahead of the server's clock (2025-11-29T"),
            "{ahead}"
        );
        assert!(ahead.contains("accepted skew of 15m"), "{ahead}");
        assert!(ahead.contains(" is 365 days ahead"), "{ahead}");
        assert!(
            ahead.starts_with("start_time_unix_nano 2026-11-29T"),
            "{ahead}"
        );
        let old = b
            .check("end_time_unix_nano", NOW - 2 * 24 * 3600 * 1_000_000_000)
            .unwrap_err();
        assert!(old.contains("older than the accepted age of 1day"), "{old}");
        assert!(old.starts_with("end_time_unix_nano 2025-11-27T"), "{old}");
    }

    #[test]
    fn times_past_i64_are_refused_without_negative_numbers() {
        for b in [bounds(), TimeBounds::storable()] {
            let e = b.check("start_time_unix_nano", u64::MAX).unwrap_err();
            assert!(e.contains("latest storable time"), "{e}");
            assert!(!e.contains('-'), "{e}");
            assert!(b.check("t", i64::MAX as u64 + 1).is_err());
        }
        assert!(TimeBounds::storable().check("t", i64::MAX as u64).is_ok());
        assert!(TimeBounds::storable().check("t", 1).is_ok());
    }
}
