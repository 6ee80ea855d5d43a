//! The one integration-test binary (STYLE 15): one module per area. Every test runs the real
//! `infrakit-tf` binary on a real temporary directory.

mod describe;
mod destroy_label;
mod errors;
mod generated;
mod lock;
mod provision;
mod readme;
mod support;
mod terraform;
