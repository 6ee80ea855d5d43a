//! Which failed terraform runs are run again, and after how long (README "Running
//! unattended"): a run that failed with an error matching a transient pattern (throttling, a
//! 5xx from an API, a reset connection, a network timeout, a provider or module download that
//! broke off) is run again, up to `max` times, after an exponential backoff with jitter. A
//! failure that matches nothing is never retried; neither is an interrupt, a timeout, a held
//! state lock, a lost lease or a terraform killed by a signal (the runner decides those before
//! it asks here).

use std::time::{Duration, SystemTime};

use regex::{Regex, RegexBuilder};

/// The default number of retries after the first try.
pub(crate) const DEFAULT_MAX: u32 = 3;
/// The default first delay; each retry doubles it.
pub(crate) const DEFAULT_BASE: Duration = Duration::from_secs(2);
/// The longest delay before one retry, however many came before.
const MAX_DELAY: Duration = Duration::from_secs(60);

/// The transient errors retried by default, matched case-insensitively against terraform's
/// error diagnostics (summary and detail) and its last words on stderr. Drawn from what
/// Terragrunt retries by default (`retryable_errors`) and the texts of real providers' and
/// terraform's own network errors. Each is a regular expression (the `regex` crate's syntax).
pub(crate) const DEFAULT_PATTERNS: &[&str] = &[
    // Throttling and rate limits: AWS (`Throttling`, `ThrottlingException`,
    // `RequestLimitExceeded`, `Rate exceeded`, `SlowDown`, `TooManyUpdates`), Azure and GCP
    // (429, `rateLimitExceeded`), HCP Terraform's 429.
    r"throttl",
    r"rate ?limit",
    r"rate exceeded",
    r"RequestLimitExceeded",
    r"TooManyRequests|too many requests|\b429\b",
    r"SlowDown",
    r"TooManyUpdates",
    // An API's 5xx.
    r"\b50[0234]\b[^\n]{0,40}(error|status|response|unavailable|gateway|server)|(status|code|response|returned error)[^\n]{0,20}\b50[0234]\b",
    r"service ?unavailable|bad gateway|gateway time-?out|internal ?server ?error|InternalError",
    // The network.
    r"connection reset by peer|connection refused|broken pipe",
    r"i/o timeout|Client\.Timeout exceeded|context deadline exceeded|timeout awaiting response headers",
    r"TLS handshake timeout",
    r"temporary failure in name resolution",
    // Provider and module downloads that broke off (a 404 or a missing version is not here).
    r"(failed to install provider|error installing provider|failed to query available provider packages|could not download module|failed to download module)[\s\S]*(timeout|timed out|connection|reset|refused|EOF|\b5\d\d\b|429|temporar)",
];

/// When to run a failed run again.
#[derive(Debug, Clone)]
pub(crate) struct Retry {
    /// Retries after the first try; 0: none.
    pub(crate) max: u32,
    /// The first delay; the n-th retry waits between half and all of `base * 2^(n-1)`.
    pub(crate) base: Duration,
    patterns: Vec<Regex>,
}

impl Default for Retry {
    fn default() -> Self {
        Retry::new(DEFAULT_MAX, DEFAULT_BASE, DEFAULT_PATTERNS.iter().map(|p| p.to_string()).collect())
            .expect("the default patterns compile")
    }
}

impl Retry {
    /// A policy of `max` retries, `base` first delay, retrying failures that match one of
    /// `patterns` (case-insensitive). A pattern that does not compile is refused, naming it.
    pub(crate) fn new(max: u32, base: Duration, patterns: Vec<String>) -> Result<Retry, String> {
        let patterns = patterns
            .iter()
            .map(|p| {
                RegexBuilder::new(p)
                    .case_insensitive(true)
                    .build()
                    .map_err(|e| format!("retryable error pattern `{p}` is not a regular expression: {e}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Retry { max, base, patterns })
    }

    /// No retries.
    pub(crate) fn none() -> Retry {
        Retry { max: 0, ..Retry::default() }
    }

    /// The line of `error` (terraform's error text) that a pattern matches, if one does: the
    /// error is transient. A pattern may span lines; then the first line of its match is given.
    pub(crate) fn transient(&self, error: &str) -> Option<String> {
        let m = self.patterns.iter().find_map(|p| p.find(error))?;
        let start = error[..m.start()].rfind('\n').map_or(0, |i| i + 1);
        let end = error[m.start()..].find('\n').map_or(error.len(), |i| m.start() + i);
        Some(error[start..end].trim().to_string())
    }

    /// How long to wait before retry number `n` (from 1): `base * 2^(n-1)`, at most a minute,
    /// less a random part of up to half of it (so that hosts throttled together do not come
    /// back together).
    pub(crate) fn delay(&self, n: u32) -> Duration {
        let full = self.base.saturating_mul(1u32 << (n.saturating_sub(1)).min(16)).min(MAX_DELAY);
        full - full.mul_f64(jitter() / 2.0)
    }
}

/// A number in [0, 1), different in every call and process: the clock's nanoseconds and the
/// process ID, mixed (SplitMix64). Jitter needs no more.
fn jitter() -> f64 {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos() as u64;
    let mut z = nanos ^ (u64::from(std::process::id()) << 32);
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_transient_errors_match_and_permanent_ones_do_not() {
        let r = Retry::default();
        let transient = [
            "Error: creating EC2 Instance: RequestLimitExceeded: Request limit exceeded.\n\tstatus code: 503",
            "Error: reading EC2 Instances: ThrottlingException: Rate exceeded",
            "Error: googleapi: Error 429: Quota exceeded for quota metric 'Queries', rateLimitExceeded",
            "Error: compute.VirtualMachinesClient#CreateOrUpdate: StatusCode=503 -- Original Error: ServiceUnavailable",
            "Error: Post \"https://ec2.eu-west-1.amazonaws.com/\": read tcp 10.0.0.2:41234->52.95.1.1:443: read: connection reset by peer",
            "Error: Failed to install provider\n\nError while installing hashicorp/aws v5.0.0: Get \"https://releases.hashicorp.com/x.zip\": net/http: TLS handshake timeout",
            "Error: Failed to query available provider packages\n\nCould not retrieve the list of available versions: dial tcp: lookup registry.terraform.io: i/o timeout",
            "Error: retrieving Virtual Machine: unexpected status 502 (502 Bad Gateway) with response: upstream error",
            "fakecloud: create throttled: ThrottlingException: Rate exceeded (retry later)",
        ];
        for e in transient {
            assert!(r.transient(e).is_some(), "not taken as transient: {e}");
        }
        let permanent = [
            "Error: creating EC2 Instance: InvalidAMIID.NotFound: The image id '[ami-123]' does not exist",
            "Error: Failed to install provider\n\nError while installing hashicorp/aws: provider registry.terraform.io/hashicorp/aws 9.9.9 is not available",
            "Error: Unsupported argument\n\nAn argument named \"flavour\" is not expected here.",
            "fakecloud: create refused (fail-create is set)",
            "Error: creating EC2 Instance: UnauthorizedOperation: You are not authorized to perform this operation. status code: 403",
            "Error: instance-1500 is 1500 GiB",
        ];
        for e in permanent {
            assert_eq!(r.transient(e), None, "taken as transient: {e}");
        }
    }

    #[test]
    fn the_matching_line_is_named() {
        let r = Retry::default();
        let e = "Error: creating VM\n\nThrottlingException: Rate exceeded\nmore";
        assert_eq!(r.transient(e).as_deref(), Some("ThrottlingException: Rate exceeded"));
    }

    #[test]
    fn delays_double_with_jitter_and_stop_at_a_minute() {
        let r = Retry::new(10, Duration::from_secs(2), vec![]).unwrap();
        for n in 1..=10 {
            let full = Duration::from_secs(2 << (n - 1)).min(MAX_DELAY);
            let d = r.delay(n);
            assert!(d <= full && d >= full / 2, "retry {n}: {d:?} not within [{:?}, {full:?}]", full / 2);
        }
        assert!(Retry::new(1, Duration::ZERO, vec![]).unwrap().delay(1).is_zero());
    }

    #[test]
    fn a_bad_pattern_is_refused_by_name() {
        let e = Retry::new(1, DEFAULT_BASE, vec!["(unclosed".into()]).unwrap_err();
        assert!(e.starts_with("retryable error pattern `(unclosed` is not a regular expression"), "{e}");
    }
}
