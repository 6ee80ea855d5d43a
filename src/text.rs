//! User-supplied values as messages quote them. A value can be anything a user, a spec or a
//! file gave (a 50 MB logical ID, a name with a newline or an escape sequence); every error,
//! warning and problem that quotes one goes through [`short`], so a message stays short and on
//! one line, and cannot drive the terminal. Reports (`--output json`) carry values whole:
//! they are data, not messages.

use std::borrow::Cow;
use std::time::Duration;

/// A value of at most this many characters is quoted whole.
const WHOLE: usize = 80;
/// A longer value keeps this many characters, then says its size.
const KEPT: usize = 60;

/// `s` as a message quotes it: whole when short, else its first 60 characters (cut at a
/// character boundary) and `… (N bytes)`; control characters escaped (`\n`, `\u{1b}`).
pub fn short(s: &str) -> Cow<'_, str> {
    let (kept, cut) = match s.char_indices().nth(WHOLE) {
        None => (s, false),
        Some(_) => (&s[..s.char_indices().nth(KEPT).map_or(s.len(), |(i, _)| i)], true),
    };
    let kept: Cow<'_, str> = if kept.contains(char::is_control) {
        Cow::Owned(kept.chars().map(|c| if c.is_control() { c.escape_debug().to_string() } else { c.into() }).collect())
    } else {
        Cow::Borrowed(kept)
    };
    if cut {
        Cow::Owned(format!("{kept}… ({} bytes)", s.len()))
    } else {
        kept
    }
}

/// A duration as messages give it: `30s`, or `1500ms` when it is not whole seconds.
pub fn duration(d: std::time::Duration) -> String {
    if d.subsec_millis() != 0 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", d.as_secs())
    }
}

/// A JSON pointer as a message quotes it: each token shortened, so the path stays readable.
pub fn short_pointer(pointer: &str) -> String {
    pointer.split('/').map(short).collect::<Vec<_>>().join("/")
}

/// A duration in Go's `time.ParseDuration` grammar, as InfraKit's specs are read: one or more
/// decimal numbers, each with a unit (`ns`, `us` or `µs`, `ms`, `s`, `m`, `h`), such as `300ms`,
/// `1m30s`, `2m30.5s` or `1.5h`; `0` alone; and, as this tool always took, a bare number of
/// seconds (`30`). Negative durations are refused: none of ours can be.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let bad = |why: &str| format!("`{}` is not a duration ({why}): use e.g. `30s`, `1m30s`, `500ms`, `1.5h`", short(s));
    if s.starts_with('-') {
        return Err(bad("it is negative"));
    }
    let text = s.strip_prefix('+').unwrap_or(s);
    if text.is_empty() {
        return Err(bad("it is empty"));
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        let n: u64 = text.parse().map_err(|_| bad("too large"))?;
        return Ok(Duration::from_secs(n));
    }
    let mut nanos: u128 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let (number, after) = rest.split_at(digits);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(bad("a number is missing"));
        }
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let per: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(bad("a unit is missing")),
            other => {
                return Err(format!(
                    "unknown unit `{}` in `{}`: use ns, us, ms, s, m or h (e.g. `1m30s`)",
                    short(other),
                    short(s)
                ))
            }
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| bad("too large"))? };
        let mut part = whole.checked_mul(per).ok_or_else(|| bad("too large"))?;
        // The fraction, digit by digit, as Go does: exact to the nanosecond.
        let mut scale = per;
        for digit in fraction.bytes().map(|b| u128::from(b - b'0')) {
            scale /= 10;
            part += digit * scale;
        }
        nanos = nanos.checked_add(part).ok_or_else(|| bad("too large"))?;
        rest = next;
    }
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| bad("too large"))?;
    Ok(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// `secs` (seconds since the epoch) as an RFC 3339 UTC time.
pub fn utc(secs: u64) -> String {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// `ms` (milliseconds since the epoch) as an RFC 3339 UTC time, to the second, rounded up: a
/// time something may happen after is never shown earlier than it is.
pub fn utc_ms(ms: u64) -> String {
    utc(ms.div_ceil(1000))
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(1_500_000_000), "2017-07-14T02:40:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_795_375_341), "2026-11-22T19:22:21Z");
        assert_eq!(utc_ms(1_795_375_341_001), "2026-11-22T19:22:22Z", "rounded up");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5d").is_err());
    }

    // Go's time.ParseDuration grammar, which InfraKit's specs are read with.
    #[test]
    fn go_durations() {
        let ok = |s: &str| parse_duration(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("2m30.5s"), Duration::from_millis(150_500));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok("1h2m3s4ms5us6ns"), Duration::new(3723, 4_005_006));
        assert_eq!(ok("300µs"), Duration::from_micros(300));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("+90s"), Duration::from_secs(90));
        assert_eq!(ok("1.000000001s"), Duration::new(1, 1));
        for bad in ["", "s", "1.2.3s", "-1s", "1m30", "1d", "1 m", "."] {
            assert!(parse_duration(bad).is_err(), "{bad:?} was taken");
        }
        assert!(parse_duration("1x").unwrap_err().contains("unknown unit `x`"));
    }

    use super::*;

    #[test]
    fn short_values_are_quoted_whole() {
        assert_eq!(short(""), "");
        assert_eq!(short("mgr1"), "mgr1");
        let eighty = "é".repeat(WHOLE);
        assert!(matches!(short(&eighty), Cow::Borrowed(_)));
    }

    #[test]
    fn long_values_keep_their_start_and_say_their_size() {
        let long = "x".repeat(50 << 20);
        assert_eq!(short(&long), format!("{}… ({} bytes)", "x".repeat(KEPT), 50 << 20));
        // Cut at a character boundary: 81 two-byte characters keep 60 of them.
        let wide = "é".repeat(WHOLE + 1);
        assert_eq!(short(&wide), format!("{}… (162 bytes)", "é".repeat(KEPT)));
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(short("a\nb\u{1b}[31m\0"), "a\\nb\\u{1b}[31m\\0");
        assert_eq!(short("quotes \" and ` stay"), "quotes \" and ` stay");
    }

    #[test]
    fn pointers_shorten_token_by_token() {
        let token = "k".repeat(100);
        assert_eq!(
            short_pointer(&format!("/Properties/resource/{token}/x")),
            format!("/Properties/resource/{}… (100 bytes)/x", "k".repeat(KEPT))
        );
        assert_eq!(short_pointer(""), "");
        assert_eq!(short_pointer("/Init"), "/Init");
    }
}
