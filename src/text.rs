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

/// `500ms`, `30s`, `5m`, `1h`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("`{}` is not a duration: use e.g. `30s`, `5m`, `500ms`", short(s)))?;
    let ms = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("unknown unit `{}` in `{}`: use ms, s, m or h", short(unit), short(s))),
    };
    Ok(Duration::from_millis(n.saturating_mul(ms)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations() {
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5d").is_err());
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
