//! The one integration-test binary (STYLE 15): one module per area.
