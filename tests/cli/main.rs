//! The one integration-test binary (STYLE 15): one module per area. Every test runs the real
//! `infrakit-tf` binary on a real temporary directory.
// Test set-up writes, copies and spawns directly: the bans in clippy.toml guard the tool.
#![allow(clippy::disallowed_methods)]
// Test code may print, and `support`'s fixtures are `pub` for the test modules.
#![allow(clippy::print_stdout, clippy::print_stderr, unreachable_pub)]

mod adopt;
mod apply;
mod cases;
#[cfg(feature = "fault-injection")]
mod crash;
mod describe;
mod destroy_label;
mod docs;
mod drain;
mod errors;
mod failover;
mod fakecloud;
mod faults;
mod generated;
mod groups;
mod hardening;
mod heal;
mod import;
mod lag;
mod layers;
mod lock;
mod lost;
mod placement;
mod pooler;
mod provision;
mod readme;
mod reads;
mod reconcile;
mod recovery;
mod rollouts;
mod security;
mod signals;
mod store;
mod support;
mod terraform;
mod tls;
mod unattended;
