//! What the workspace records for later runs beside the files: when machines were created,
//! what the cloud answered (`cloud_record`), by the shared clock.

use anyhow::Result;

use super::Workspace;
use crate::cloud_record::CloudRecord;
use crate::fsio::Perms;
use crate::journal::FileOp;
use crate::names;
use crate::placement_record::PlacementRecord;
use crate::rollout_record::RolloutRecord;

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
        let mut record = self.cloud_record();
        record.note_created(&created, at, |t| profiles.settle(t));
        self.write_cloud_record(&record)?;
        crate::fsio::remove(&self.dir.path().join(crate::lock::running::CREATED)).map(drop)
    }

    /// The cloud record (`cloud_record`); one that cannot be read is a warning, and an empty
    /// record (every "not found" is then believed, as before there was one).
    pub(crate) fn cloud_record(&self) -> CloudRecord {
        self.dir.cloud_record().unwrap_or_else(|why| {
            self.ctx.printer.warn(&format!("{why}: it starts again"));
            CloudRecord::default()
        })
    }

    /// Writes the cloud record as the other records are written: all or nothing, in the store
    /// first when there is one. Nothing when its bytes are those the directory holds, or when
    /// it is empty and the directory has none.
    pub(crate) fn write_cloud_record(&mut self, record: &CloudRecord) -> Result<()> {
        self.write_record(names::CLOUD_RECORD, record.to_bytes(), *record == CloudRecord::default())
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

    /// The rollout record (`rollout_record`); one that cannot be read is a warning, and an
    /// empty record (a pause is lost; nothing is replaced twice: the members say what is).
    pub(crate) fn rollout_record(&self) -> RolloutRecord {
        self.dir.rollout_record().unwrap_or_else(|why| {
            self.ctx.printer.warn(&format!("{why}: it starts again"));
            RolloutRecord::default()
        })
    }

    /// Writes the rollout record as the other records are written (see
    /// [`Workspace::write_cloud_record`]).
    pub(crate) fn write_rollout_record(&mut self, record: &RolloutRecord) -> Result<()> {
        self.write_record(names::ROLLOUT_RECORD, record.to_bytes(), *record == RolloutRecord::default())
    }

    /// The placement record (`placement_record`); one that cannot be read is a warning, and an
    /// empty record (a zone without capacity is tried again sooner).
    pub(crate) fn placement_record(&self) -> PlacementRecord {
        self.dir.placement_record().unwrap_or_else(|why| {
            self.ctx.printer.warn(&format!("{why}: it starts again"));
            PlacementRecord::default()
        })
    }

    /// Writes the placement record as the other records are written.
    pub(crate) fn write_placement_record(&mut self, record: &PlacementRecord) -> Result<()> {
        self.write_record(names::PLACEMENT_RECORD, record.to_bytes(), *record == PlacementRecord::default())
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
