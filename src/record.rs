//! The records infrakit-tf keeps beside the configuration (health, refresh, cloud, rollout,
//! placement): each one JSON document under its own file name, in the store too with several
//! hosts, read and written the same way. A record that cannot be read is reported and started
//! afresh by its reader: each says what that costs (`parse`'s callers).

use serde::de::DeserializeOwned;
use serde::Serialize;

/// One record: its file, its name in messages, its bytes.
pub trait Record: Serialize + DeserializeOwned + Default + PartialEq {
    /// Its file name in the directory (`names::*_RECORD`).
    const FILE: &'static str;
    /// What messages call it: `the health record`.
    const WHAT: &'static str;

    /// Reads the record's bytes; why not, when they are not a valid record.
    fn parse(bytes: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("{} is not valid: {e}", Self::WHAT))
    }

    /// Its bytes: pretty JSON (its maps sorted), a trailing newline; the same record, the same
    /// bytes.
    fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("a record of strings and numbers serialises");
        bytes.push(b'\n');
        bytes
    }
}
