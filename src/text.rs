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
/// seconds (`30`). The arithmetic is Go's, step for step (a fraction is weighed in floating
/// point, so `0.3333333333333333333h` is 20 minutes, as in Go), and so is the largest value
/// (2^63 - 1 nanoseconds). Negative durations are refused: none of ours can be.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    const MAX: u64 = 1 << 63;
    let s = s.trim();
    let bad = |why: &str| format!("`{}` is not a duration ({why}): use e.g. `30s`, `1m30s`, `500ms`, `1.5h`", short(s));
    if s.starts_with('-') {
        return Err(bad("it is negative"));
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad("it is empty"));
    }
    if rest.bytes().all(|b| b.is_ascii_digit()) {
        return rest.parse().map(Duration::from_secs).map_err(|_| bad("too large"));
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let (whole, after) = leading_int(rest).ok_or_else(|| bad("too large"))?;
        let pre = after.len() != rest.len();
        // `post`: digits after a point, as `5.s` has none and `.5s` has one.
        let (fraction, scale, post, after) = match after.strip_prefix('.') {
            Some(tail) => {
                let (fraction, scale, after) = leading_fraction(tail);
                (fraction, scale, after.len() != tail.len(), after)
            }
            None => (0, 1.0, false, after),
        };
        if !pre && !post {
            return Err(bad("a number is missing"));
        }
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let per: u64 = match unit {
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
        if whole > MAX / per {
            return Err(bad("too large"));
        }
        let mut part = whole * per;
        if fraction > 0 {
            // Go weighs the fraction in floating point: nanosecond-accurate for fractions of an
            // hour, and what Go's own vectors expect.
            part += (fraction as f64 * (per as f64 / scale)) as u64;
        }
        total = total.checked_add(part).filter(|t| *t < MAX).ok_or_else(|| bad("too large"))?;
        rest = next;
    }
    Ok(Duration::from_nanos(total))
}

/// The leading `[0-9]*` of `s` and what follows; `None` when it passes 2^63, as Go's
/// `leadingInt`.
fn leading_int(s: &str) -> Option<(u64, &str)> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let mut x: u64 = 0;
    for b in s[..digits].bytes() {
        x = x.checked_mul(10)?.checked_add(u64::from(b - b'0')).filter(|x| *x <= 1 << 63)?;
    }
    Some((x, &s[digits..]))
}

/// The leading `[0-9]*` of a fraction as Go's `leadingFraction` reads it: the digits that fit
/// in 63 bits, the power of ten they are over, and what follows (later digits only lose
/// precision).
fn leading_fraction(s: &str) -> (u64, f64, &str) {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let (mut x, mut scale, mut overflow) = (0u64, 1.0f64, false);
    for b in s[..digits].bytes() {
        if overflow {
            continue;
        }
        match x.checked_mul(10).map(|y| y + u64::from(b - b'0')).filter(|y| *y <= 1 << 63) {
            Some(y) if x <= ((1 << 63) - 1) / 10 => {
                x = y;
                scale *= 10.0;
            }
            _ => overflow = true,
        }
    }
    (x, scale, &s[digits..])
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

    // Go's own vectors (src/time/time_test.go, parseDurationTests), but for the negative ones:
    // no duration of ours can be negative.
    #[test]
    fn go_durations() {
        const S: u64 = 1_000_000_000;
        const M: u64 = 60 * S;
        const H: u64 = 60 * M;
        let vectors: &[(&str, u64)] = &[
            ("0", 0),
            ("5s", 5 * S),
            ("30s", 30 * S),
            ("1478s", 1478 * S),
            ("+5s", 5 * S),
            ("+0", 0),
            ("5.0s", 5 * S),
            ("5.6s", 5 * S + 600_000_000),
            ("5.s", 5 * S),
            (".5s", 500_000_000),
            ("1.0s", S),
            ("1.00s", S),
            ("1.004s", S + 4_000_000),
            ("1.0040s", S + 4_000_000),
            ("100.00100s", 100 * S + 1_000_000),
            ("10ns", 10),
            ("11us", 11_000),
            ("12µs", 12_000),
            ("12μs", 12_000),
            ("13ms", 13_000_000),
            ("14s", 14 * S),
            ("15m", 15 * M),
            ("16h", 16 * H),
            ("3h30m", 3 * H + 30 * M),
            ("10.5s4m", 4 * M + 10 * S + 500_000_000),
            ("1h2m3s4ms5us6ns", H + 2 * M + 3 * S + 4_000_000 + 5_000 + 6),
            ("39h9m14.425s", 39 * H + 9 * M + 14 * S + 425_000_000),
            ("52763797000ns", 52_763_797_000),
            ("0.3333333333333333333h", 20 * M),
            ("9007199254740993ns", (1 << 53) + 1),
            ("9223372036854775807ns", (1 << 63) - 1),
            ("9223372036854775.807us", (1 << 63) - 1),
            ("9223372036s854ms775us807ns", (1 << 63) - 1),
            ("0.100000000000000000000h", 6 * M),
            ("0.830103483285477580700h", 49 * M + 48 * S + 372_539_827),
            // The issue's own: InfraKit specs' Timeout and DrainTimeout.
            ("1m30s", 90 * S),
            ("2m30.5s", 150 * S + 500_000_000),
            ("1.5h", 90 * M),
            ("300ms", 300_000_000),
            ("2h45m", 2 * H + 45 * M),
        ];
        for (text, nanos) in vectors {
            assert_eq!(parse_duration(text), Ok(Duration::from_nanos(*nanos)), "{text}");
        }
        // Go's invalid ones, and the largest values plus one.
        let invalid = [
            "", "-", "s", ".", "-.", ".s", "+.s", "1d", "\u{85}\u{85}", "\u{ff}ff", "hello \u{ff}ff world",
            "9223372036854775810ns", "9223372036854775808ns", "9223372036854775.808us",
            "9223372036854ms775us808ns", "1.2.3s", "1m30", "1 m", "-1s", "-2m3.4s",
        ];
        for text in invalid {
            assert!(parse_duration(text).is_err(), "{text:?} was taken");
        }
        assert!(parse_duration("1x").unwrap_err().contains("unknown unit `x`"));
        // This tool's own: a bare number is seconds.
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
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
