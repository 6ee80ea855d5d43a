//! What the workspace records for later runs beside the files: when machines were created,
//! what the cloud answered (`cloud_record`), by the shared clock.

use anyhow::Result;

use super::Workspace;
use crate::cloud_record::CloudRecord;
use crate::fsio::Perms;
use crate::journal::FileOp;
use crate::record::Record;

impl Workspace<'_> {
    /// Records when the machines that applies created were made (`cloud_record`), from what
    /// they noted as they ended (`lock::running::CREATED`, this run's or a killed one's),
    /// stamped now (by the shared clock: no earlier than they were made): a read that calls
    /// one gone before its settle time has passed is not believed.
    pub(super) fn note_created(&mut self) -> Result<()> {
        let created = crate::lock::running::created(self.dir.path());
        if created.is_empty() {
            return Ok(());
        }
        self.created.extend(created.iter().map(|(address, _)| address.clone()));
        let at = self.now_ms()?;
        let profiles = self.ctx.profiles()?;
        let mut record: CloudRecord = self.record();
        record.note_created(&created, at, |t| profiles.settle(t));
        self.save(&record)?;
        crate::fsio::remove(&self.dir.path().join(crate::lock::running::CREATED)).map(drop)
    }

    /// A record (`record::Record`); one that cannot be read is a warning, and an empty record:
    /// the cloud record's every "not found" is then believed, as before there was one; the
    /// rollout record's pause is lost (nothing is replaced twice: the members say what is);
    /// the placement record's zone without capacity is tried again sooner.
    pub(crate) fn record<R: Record>(&self) -> R {
        self.dir.record().unwrap_or_else(|why| {
            self.ctx.printer.warn(&format!("{why}: it starts again"));
            R::default()
        })
    }

    /// Writes a record as every record is written: all or nothing, in the store first when
    /// there is one (so that any host goes on from it). Nothing when its bytes are those the
    /// directory holds, or when it is empty and the directory has none.
    pub(crate) fn save<R: Record>(&mut self, record: &R) -> Result<()> {
        self.write_record(R::FILE, record.to_bytes(), *record == R::default())
    }

    /// Writes a record's `bytes` as `name`, all or nothing, in the store first when there is
    /// one. Nothing when they are the bytes the directory holds, or when the record is
    /// `empty` and the directory has none.
    fn write_record(&mut self, name: &str, bytes: Vec<u8>, empty: bool) -> Result<()> {
        let unchanged = match self.dir.bytes(name) {
            Ok(old) => old == bytes,
            Err(_) => empty,
        };
        if unchanged {
            return Ok(());
        }
        self.change(&[FileOp { name: name.to_string(), after: Some((bytes, Perms::Public)) }])
    }

    /// The clock that times the evidence and the machines' creations: the store's when there
    /// is one (every host reads the same), else this host's. In milliseconds since the epoch.
    pub(crate) fn now_ms(&mut self) -> Result<u64> {
        match self.role.store() {
            Some(store) => store.now_ms(),
            None => Ok(crate::process::now_ms()),
        }
    }
}
