//! Which failed terraform runs are run again, and after how long (docs/running-unattended.md): a
//! run that failed with an error matching a transient pattern (throttling, a
//! 5xx from an API, a reset connection, a network timeout, a provider or module download that
//! broke off) is run again, up to `max` times, after an exponential backoff with jitter. A
//! failure that matches nothing is never retried; neither is an interrupt, a timeout, a held
//! state lock, a lost lease or a terraform killed by a signal (the runner decides those before
//! it asks here).

use std::sync::OnceLock;
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
/// Those marked `true` say the API refused the call before acting on it: an apply that failed
/// with one made nothing of that call, and is run again. The others (a reset connection, a
/// timeout or a 500, 502 or 504 in mid-call) leave open whether the cloud made the machine
/// before the answer was lost: only init and plan, which make nothing, are run again on them.
pub(crate) const DEFAULT_PATTERNS: &[(&str, bool)] = &[
    // Throttling and rate limits: AWS (`Throttling`, `ThrottlingException`,
    // `RequestLimitExceeded`, `Rate exceeded`, `SlowDown`, `TooManyUpdates`), Azure and GCP
    // (429, `rateLimitExceeded`), HCP Terraform's 429.
    (r"throttl", true),
    (r"rate ?limit", true),
    (r"rate exceeded", true),
    (r"RequestLimitExceeded", true),
    (r"TooManyRequests|too many requests|(status|code|http|error|returned)[^\n]{0,20}[^-\w.]429\b", true),
    (r"SlowDown", true),
    (r"TooManyUpdates", true),
    // An API that is not serving: refused before acting.
    (r"service ?unavailable|(status|code|http|error|returned)[^\n]{0,20}[^-\w.]503\b", true),
    // An API's other 5xx, in mid-call.
    (
        r"(status|code|http|error|returned|response)[^\n]{0,20}[^-\w.]50[024]\b|bad gateway|gateway time-?out|internal ?server ?error|InternalError",
        false,
    ),
    // The network: refused, or never reached (nothing was sent).
    (r"connection refused|no route to host|temporary failure in name resolution|TLS handshake timeout", true),
    // The network, in mid-call.
    (r"connection reset by peer|broken pipe|unexpected EOF|connection timed out|GOAWAY", false),
    (
        r"i/o timeout|Client\.Timeout exceeded|context deadline exceeded|timeout awaiting response headers|RequestTimeout",
        false,
    ),
    // Provider and module downloads that broke off (a 404, a missing version, a checksum that
    // does not match are not here). Only init downloads.
    (
        r"(failed to install provider|error installing provider|failed to query available provider packages|could not download module|failed to download module)[\s\S]{0,400}?(timeout|timed out|connection|reset|refused|EOF|(status|code|returned)[^\n]{0,20}(5\d\d|429)|temporar)",
        false,
    ),
];

/// Failures never run again, whatever else they say: terraform could not save the state of
/// what it did (running again would do it again, and fork the state: see `state_guard`), or
/// could find no credentials (a timeout of the metadata service is how that often reads).
const NEVER: &[&str] = &[
    r"failed to save state|failed to persist state|error saving state|forked state|errored\.tfstate",
    r"no valid credential sources",
];

/// When to run a failed run again.
#[derive(Debug, Clone)]
pub(crate) struct Retry {
    /// Retries after the first try; 0: none.
    pub(crate) max: u32,
    /// The first delay; the n-th retry waits between half and all of `base * 2^(n-1)`.
    pub(crate) base: Duration,
    /// Each pattern, and whether an apply that failed with it is run again.
    patterns: Vec<(String, bool)>,
    /// The patterns compiled, at the first failure: compiling the default list takes
    /// milliseconds (case-insensitive Unicode classes), which a run that fails nothing, or
    /// reads only, should not pay.
    compiled: OnceLock<Compiled>,
}

#[derive(Debug, Clone)]
struct Compiled {
    patterns: Vec<(Regex, bool)>,
    never: Vec<Regex>,
}

impl Default for Retry {
    fn default() -> Self {
        Retry::new(DEFAULT_MAX, DEFAULT_BASE, Patterns::Default, &[]).expect("the default patterns compile")
    }
}

/// The patterns a policy starts from.
pub(crate) enum Patterns {
    /// [`DEFAULT_PATTERNS`].
    Default,
    /// The user's own list (infrakit-tf.json's `retries.errors`), for every run.
    Replaced(Vec<String>),
}

fn compile(p: &str) -> Result<Regex, String> {
    RegexBuilder::new(p)
        .case_insensitive(true)
        .build()
        .map_err(|e| format!("retryable error pattern `{p}` is not a regular expression: {e}"))
}

impl Retry {
    /// A policy of `max` retries, `base` first delay, retrying failures that match one of
    /// `patterns` or `extra` (the user's, for every run; case-insensitive). A pattern of the
    /// user's that does not compile is refused, naming it (the default ones are known to).
    pub(crate) fn new(max: u32, base: Duration, patterns: Patterns, extra: &[String]) -> Result<Retry, String> {
        let mut all: Vec<(String, bool)> = match patterns {
            Patterns::Default => DEFAULT_PATTERNS.iter().map(|(p, apply)| (p.to_string(), *apply)).collect(),
            Patterns::Replaced(mine) => {
                mine.iter().map(|p| compile(p).map(|_| (p.clone(), true))).collect::<Result<_, _>>()?
            }
        };
        for p in extra {
            compile(p)?;
            all.push((p.clone(), true));
        }
        Ok(Retry { max, base, patterns: all, compiled: OnceLock::new() })
    }

    /// No retries.
    pub(crate) fn none() -> Retry {
        Retry { max: 0, base: DEFAULT_BASE, patterns: Vec::new(), compiled: OnceLock::new() }
    }

    /// The line of `error` (terraform's error text) that a pattern matches, if one does: the
    /// error is transient. `apply`: the run was an apply, which only the patterns of a call
    /// refused before it acted make transient. A pattern may span lines; then the first line
    /// of its match is given. A failure to save the state is never transient.
    pub(crate) fn transient(&self, error: &str, apply: bool) -> Option<String> {
        let c = self.compiled();
        if c.never.iter().any(|p| p.is_match(error)) {
            return None;
        }
        // An apply's errors are all its resources': one that failed mid-call (a pattern not
        // safe on apply) may have made its machine, whatever the others say.
        if apply && c.patterns.iter().any(|(p, on_apply)| !on_apply && p.is_match(error)) {
            return None;
        }
        let m = c.patterns.iter().find_map(|(p, _)| p.find(error))?;
        let start = error[..m.start()].rfind('\n').map_or(0, |i| i + 1);
        let end = error[m.start()..].find('\n').map_or(error.len(), |i| m.start() + i);
        Some(error[start..end].trim().to_string())
    }

    /// Whether `error` is one that is never retried whatever the patterns say: a state that
    /// could not be saved, credentials that are missing. Not a fault of what was applied.
    pub(crate) fn vetoed(&self, error: &str) -> bool {
        self.compiled().never.iter().any(|p| p.is_match(error))
    }

    fn compiled(&self) -> &Compiled {
        self.compiled.get_or_init(|| Compiled {
            patterns: self.patterns.iter().map(|(p, apply)| (compile(p).expect("checked by `new`"), *apply)).collect(),
            never: NEVER.iter().map(|p| compile(p).expect("the vetoes compile")).collect(),
        })
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
        // (error, whether an apply that failed with it is run again)
        let transient = [
            ("Error: creating EC2 Instance: RequestLimitExceeded: Request limit exceeded.\n\tstatus code: 503", true),
            ("Error: reading EC2 Instances: ThrottlingException: Rate exceeded", true),
            ("Error: googleapi: Error 429: Quota exceeded for quota metric 'Queries', rateLimitExceeded", true),
            ("Error: compute.VirtualMachinesClient#CreateOrUpdate: StatusCode=503 -- Original Error: ServiceUnavailable", true),
            ("Error: Post \"https://ec2.eu-west-1.amazonaws.com/\": dial tcp 52.95.1.1:443: connect: connection refused", true),
            ("Error: Post \"https://ec2.eu-west-1.amazonaws.com/\": read tcp 10.0.0.2:41234->52.95.1.1:443: read: connection reset by peer", false),
            ("Error: Failed to install provider\n\nError while installing hashicorp/aws v5.0.0: Get \"https://releases.hashicorp.com/x.zip\": net/http: TLS handshake timeout", false),
            ("Error: Failed to query available provider packages\n\nCould not retrieve the list of available versions: dial tcp: lookup registry.terraform.io: i/o timeout", false),
            ("Error: retrieving Virtual Machine: unexpected status 502 (502 Bad Gateway) with response: upstream error", false),
            ("Error: creating server: dial tcp 10.1.1.1:443: connect: connection timed out", false),
            ("fakecloud: creating the object failed\nThrottlingException: Rate exceeded (status code: 400; 1 more throttled)", true),
            // An apply's errors together: one mid-call, so not on apply.
            ("Error: creating VM a: ThrottlingException: Rate exceeded\nError: creating VM b: read tcp 10.0.0.2:41234->52.95.1.1:443: read: connection reset by peer", false),
            // terraform init's plain text: the cause lines below the summary.
            ("Error: Failed to install provider\n\nError while installing hashicorp/aws v5.0.0: could not query\nprovider registry for registry.terraform.io/hashicorp/aws: the request\nfailed after 2 attempts, please try again later: Get\n\"https://registry.terraform.io/v1/providers/hashicorp/aws/versions\": EOF", false),
        ];
        for (e, on_apply) in transient {
            assert!(r.transient(e, false).is_some(), "not taken as transient: {e}");
            assert_eq!(r.transient(e, true).is_some(), on_apply, "on apply: {e}");
        }
        let permanent = [
            "Error: creating EC2 Instance: InvalidAMIID.NotFound: The image id '[ami-123]' does not exist",
            "Error: Failed to install provider\n\nError while installing hashicorp/aws: provider registry.terraform.io/hashicorp/aws 9.9.9 is not available",
            "Error: Failed to install provider\n\nError while installing hashicorp/aws v4.567.0: the local package doesn't match any of the checksums",
            "Error: Unsupported argument\n\nAn argument named \"flavour\" is not expected here.",
            "fakecloud: create refused (fail-create is set)",
            "Error: creating EC2 Instance: UnauthorizedOperation: You are not authorized to perform this operation. status code: 403",
            "Error: instance-1500 is 1500 GiB",
            "Error: creating instance-429: the name instance-429 is taken (error: duplicate)",
            "Error: instance-502.tf.json: error: hcloud_server: invalid image",
            "Error: Failed to save state\n\nError saving state: dial tcp 10.0.0.5:5432: connect: connection refused",
            "Error: Failed to persist state to backend\n\nThe error shown above has prevented Terraform from writing the updated state: i/o timeout",
            "Error: No valid credential sources found\n\nfailed to refresh cached credentials, no EC2 IMDS role found, operation error ec2imds: GetMetadata, context deadline exceeded",
        ];
        for e in permanent {
            assert_eq!(r.transient(e, false), None, "taken as transient: {e}");
        }
    }

    #[test]
    fn the_matching_line_is_named() {
        let r = Retry::default();
        let e = "Error: creating VM\n\nThrottlingException: Rate exceeded\nmore";
        assert_eq!(r.transient(e, true).as_deref(), Some("ThrottlingException: Rate exceeded"));
    }

    #[test]
    fn the_users_patterns_hold_for_applies_too() {
        let r = Retry::new(1, DEFAULT_BASE, Patterns::Replaced(vec!["quota.*per minute".into()]), &[]).unwrap();
        assert!(r.transient("QuotaExceeded: quota of CPUs per minute", true).is_some());
        assert_eq!(r.transient("ThrottlingException: Rate exceeded", true), None, "the default list was replaced");
        let r = Retry::new(1, DEFAULT_BASE, Patterns::Default, &["OperationNotAllowed".into()]).unwrap();
        assert!(r.transient("OperationNotAllowed: an update is in progress", true).is_some());
        assert!(r.transient("ThrottlingException", true).is_some(), "added to the default list");
    }

    #[test]
    fn delays_double_with_jitter_and_stop_at_a_minute() {
        let r = Retry::new(10, Duration::from_secs(2), Patterns::Replaced(vec![]), &[]).unwrap();
        for n in 1..=10 {
            let full = Duration::from_secs(2 << (n - 1)).min(MAX_DELAY);
            let d = r.delay(n);
            assert!(d <= full && d >= full / 2, "retry {n}: {d:?} not within [{:?}, {full:?}]", full / 2);
        }
        assert!(Retry::new(1, Duration::ZERO, Patterns::Default, &[]).unwrap().delay(1).is_zero());
    }

    #[test]
    fn a_bad_pattern_is_refused_by_name() {
        let e = Retry::new(1, DEFAULT_BASE, Patterns::Default, &["(unclosed".into()]).unwrap_err();
        assert!(e.starts_with("retryable error pattern `(unclosed` is not a regular expression"), "{e}");
    }
}
