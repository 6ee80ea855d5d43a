//! `terraform-provider-fakecloud`: a real Terraform provider (tfplugin6, via `tf-provider`)
//! for tests. Its "cloud" is a directory holding one JSON file per object, `<dir>/<id>.json`,
//! so a test can make a machine vanish behind Terraform's back by deleting a file, which the
//! built-in `terraform_data` cannot simulate.
//!
//! Knobs, read at every create so tests can flip them between terraform runs:
//! - `<dir>/delay-ms` file (else env `FAKECLOUD_DELAY_MS`): create sleeps that many ms first;
//! - `<dir>/boot-ms` file: create makes the object, then sleeps that many ms before it
//!   returns, as a real cloud creates a machine at once and reports it running later (a
//!   terraform killed meanwhile never records it);
//! - `<dir>/fail-create` file exists: create fails with a diagnostic (when it holds a name,
//!   only creates of objects of that name do).
//! - `<dir>/no-capacity`: a line `ZONE` or `ZONE SIZE` each; a create of an instance in that
//!   zone (of that size) fails with EC2's `InsufficientInstanceCapacity`.
//! - `<dir>/together` file holds `<type> N`: a create of that type appends a line to
//!   `<dir>/together-started`, then waits until N have (at most 2 minutes, then fails): a
//!   test sees that N creates ran at once by order alone, every one started before any
//!   finished, whatever the machine's load; one after the other, the first would never end.
//! - `<dir>/throttle-creates` file holds N > 0: this create fails as a throttled cloud API's
//!   does (`ThrottlingException: Rate exceeded`) and N goes down by one, so the first N
//!   creates fail and the next succeed, across terraform runs.
//! - `<dir>/lose-creates` file holds N > 0 and, after it, how the answer is lost: `reset`
//!   (the default), `timeout` or `503`: this create makes the object, then fails as a call
//!   whose answer never came back does (a connection reset on the way back, `context deadline
//!   exceeded`, a gateway's 503 after the backend acted), and N goes down by one. Terraform
//!   records nothing: the machine exists, in no state, as on a cloud's bad minute.
//!
//! - `<dir>/read-ms` file (else env `FAKECLOUD_READ_MS`): every read (a resource's refresh, a
//!   data source's listing) sleeps that many ms first, as a cloud API answers after a round trip.
//! - `<dir>/list-lag-ms` file: the data sources do not list an object written less than that
//!   many ms ago, as a cloud's list API lags behind its creates (eventual consistency).
//! - `<dir>/read-lag-ms` file: a resource's read (a refresh) answers "not found" for an object
//!   written less than that many ms ago, as EC2's describe by ID can answer
//!   `InvalidInstanceID.NotFound` right after a create (eventual consistency): terraform then
//!   drops it from its state, as the AWS provider does.
//! - `<dir>/list-drop` file: IDs, one per line, that the data sources never list (a listing
//!   that misses a machine); `<dir>/list-ghosts`: IDs they always list, whatever exists (a
//!   listing that keeps showing a deleted machine).
//! - `<dir>/throttle-lists` and `<dir>/throttle-reads` files hold N > 0: this listing (or
//!   resource read) fails as a throttled API's does (`RequestLimitExceeded: Request limit
//!   exceeded.`) and N goes down by one. `<dir>/throttle-ids`: IDs, one per line, whose every
//!   read is throttled.
//! - `<dir>/empty-fails` file exists: a data source that matches nothing fails (`no matching
//!   instances found`), as some real data sources do instead of returning nothing.
//! - `<dir>/calls` file exists: every call served that reaches the cloud appends one line to it,
//!   `<verb> <type> [<id>]` (`read`, `list`, `create`, `update`, `delete`, `import`; the ID of
//!   the object read, updated or deleted), so a test or a
//!   benchmark counts what a run cost the cloud. Appends of one short line are atomic, so
//!   several provider processes can count into one file.
//!
//! Data sources `fakecloud_instances` and `fakecloud_volumes` (as `aws_instances`): the IDs of
//! the objects whose tags include every one of `tags`; a value `*` matches any value of that
//! tag (present), as EC2's tag filters take wildcards.

// The workspace clippy.toml routes file writes through infrakit-tf's own fsio module; this
// standalone test binary cannot use it and has its own atomic `store` below.
#![allow(clippy::disallowed_methods)]

use std::collections::{hash_map::RandomState, BTreeMap, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::io::ErrorKind;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tf_provider::schema::{Attribute, AttributeConstraint, AttributeType, Block, Schema};
use tf_provider::value::{Value, ValueEmpty};
use tf_provider::{serve, AttributePath, Diagnostics, DynamicResource, Provider, Resource};

/// Map elements are `Value`s too: at plan time one tag may be unknown while the others are known.
type Tags = Value<BTreeMap<String, Value<String>>>;

fn attr(attr_type: AttributeType, constraint: AttributeConstraint, doc: &str) -> Attribute {
    Attribute { attr_type, constraint, description: doc.into(), ..Default::default() }
}

fn string_map() -> AttributeType {
    AttributeType::Map(Box::new(AttributeType::String))
}

// ---------------------------------------------------------------------------------------------
// The cloud directory and its object files

/// The cloud directory. tf-provider builds the resources at startup, before terraform sends
/// the provider configuration, so they share this cell with the provider.
#[derive(Clone, Default)]
struct Cloud(Arc<Mutex<Option<PathBuf>>>);

impl Cloud {
    fn dir(&self, diags: &mut Diagnostics) -> Option<PathBuf> {
        let dir = self.0.lock().unwrap().clone();
        if dir.is_none() {
            diags.root_error_short("fakecloud: provider is not configured");
        }
        dir
    }
}

fn object_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.json"))
}

/// Reads `<dir>/<id>.json`. `Ok(None)` means the object does not exist (any more).
fn load<K: Kind>(dir: &Path, id: &str) -> Result<Option<K>, String> {
    // An import id is user input: never let it name a file outside the cloud directory.
    if id.is_empty() || id.starts_with('.') || id.contains(['/', '\\']) {
        return Ok(None);
    }
    let bytes = match std::fs::read(object_path(dir, id)) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("fakecloud: reading {id}: {e}")),
    };
    let mut json: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes).map_err(|e| format!("fakecloud: {id}.json: {e}"))?;
    match json.remove("type") {
        Some(serde_json::Value::String(t)) if t == K::TYPE => {}
        Some(serde_json::Value::String(t)) => return Err(format!("fakecloud: {id} is a {t}, not a {}", K::TYPE)),
        _ => return Err(format!("fakecloud: {id}.json has no \"type\"")),
    }
    let mut obj: K = serde_json::from_value(json.into()).map_err(|e| format!("fakecloud: {id}.json: {e}"))?;
    // The file name is the identity; a hand-written file may leave "id" out.
    *obj.id_mut() = Value::Value(id.to_owned());
    Ok(Some(obj))
}

/// The capacity error of a create of a machine of `rtype` (`planned`) in a zone, or of a size
/// in a zone, that the `no-capacity` knob lists (a line each: `ZONE` or `ZONE SIZE`), as EC2
/// says it.
fn no_capacity(dir: &Path, rtype: &str, planned: &impl Serialize) -> Option<String> {
    if rtype != "fakecloud_instance" {
        return None;
    }
    let text = std::fs::read_to_string(dir.join("no-capacity")).ok()?;
    let v = serde_json::to_value(planned).ok()?;
    let (zone, size) = (v["zone"].as_str().unwrap_or(""), v["size"].as_str().unwrap_or(""));
    text.lines().map(str::split_whitespace).find_map(|mut words| {
        let (z, s) = (words.next()?, words.next());
        (z == zone && s.is_none_or(|s| s == size)).then(|| {
            format!("InsufficientInstanceCapacity: fakecloud has no capacity for size `{size}` in zone `{zone}` now")
        })
    })
}

/// Writes the object file atomically (temp file, then rename) so that a concurrent reader
/// never sees half a file. With `exclusive`, the final name is claimed with a hard link, which
/// fails if the file exists: two creators (even in two processes) can never share an id.
fn store<K: Kind>(dir: &Path, id: &str, obj: &K, exclusive: bool) -> std::io::Result<()> {
    let mut json = serde_json::to_value(obj)?;
    if let Some(fields) = json.as_object_mut() {
        fields.insert("type".into(), K::TYPE.into());
    }
    let mut text = serde_json::to_vec_pretty(&json)?;
    text.push(b'\n');
    // Dot-prefixed and not ending in `.json`, so nobody mistakes it for an object.
    let tmp = dir.join(format!(".{id}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, text)?;
    let target = object_path(dir, id);
    let result = if exclusive {
        std::fs::hard_link(&tmp, &target).and_then(|()| std::fs::remove_file(&tmp))
    } else {
        std::fs::rename(&tmp, &target)
    };
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Enough randomness for ids and IPs without a `rand` dependency: every `RandomState` gets
/// fresh keys (random per process, then incremented).
fn random_u32() -> u32 {
    let mut hasher = RandomState::new().build_hasher();
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    hasher.write_u128(now.as_nanos());
    hasher.finish() as u32
}

/// Whether this call is throttled (the count in the file `knob`: `throttle-creates`,
/// `throttle-lists`, `throttle-reads`), counting it: then how many more will be. One call of
/// this process at a time takes a count; nothing orders two provider processes.
fn throttled(dir: &Path, knob: &str) -> Option<u64> {
    static IN_PROCESS: Mutex<()> = Mutex::new(());
    let _guard = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let path = dir.join(knob);
    let n: u64 = std::fs::read_to_string(&path).ok()?.trim().parse().ok()?;
    if n == 0 {
        return None;
    }
    std::fs::write(&path, format!("{}\n", n - 1)).ok()?;
    Some(n - 1)
}

/// The `together` knob: when it names this type, counts this create as started, then waits
/// (asynchronously: the runtime has one thread and serves the others meanwhile) until as many
/// as it says have started. The bound only turns a run that creates one at a time into a
/// failure that says so, rather than a hang.
async fn together(dir: &Path, rtype: &str) -> Result<(), String> {
    use std::io::Write;
    let Ok(text) = std::fs::read_to_string(dir.join("together")) else { return Ok(()) };
    let bad = || format!("fakecloud: file together holds `{}`, not `<type> <count>`", text.trim());
    let (wanted, n) = text.trim().split_once(' ').ok_or_else(bad)?;
    let n: usize = n.parse().map_err(|_| bad())?;
    if wanted != rtype {
        return Ok(());
    }
    let started = dir.join("together-started");
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&started).map_err(|e| e.to_string())?;
    file.write_all(b"started\n").map_err(|e| e.to_string())?;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let k = std::fs::read_to_string(&started).map_or(0, |t| t.lines().count());
        if k >= n {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("fakecloud: only {k} of {n} creates of {rtype} started together (file together)"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether this create's answer is lost (`lose-creates`), counting it: then the error the
/// call fails with. One call of this process at a time takes a count, as for `throttled`;
/// nothing orders two provider processes.
fn lost(dir: &Path) -> Option<String> {
    static IN_PROCESS: Mutex<()> = Mutex::new(());
    let _guard = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let path = dir.join("lose-creates");
    let text = std::fs::read_to_string(&path).ok()?;
    let mut words = text.split_whitespace();
    let n: u64 = words.next()?.parse().ok()?;
    if n == 0 {
        return None;
    }
    let how = words.next().unwrap_or("reset");
    std::fs::write(&path, format!("{} {how}\n", n - 1)).ok()?;
    Some(match how {
        "timeout" => "waiting for the instance to become running: context deadline exceeded".to_string(),
        "503" => {
            "api error ServiceUnavailable: status code: 503, request id: fakecloud: Service Unavailable".to_string()
        }
        _ => "read tcp 127.0.0.1:40022->127.0.0.1:443: read: connection reset by peer".to_string(),
    })
}

/// The IDs listed in the file `name` of the cloud directory, one per line (none without it).
fn ids_in(dir: &Path, name: &str) -> Vec<String> {
    std::fs::read_to_string(dir.join(name))
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// What a throttled read or listing answers, as EC2 does.
fn throttle_error(diags: &mut Diagnostics, what: &str) {
    diags.root_error(
        format!("fakecloud: {what} failed"),
        "RequestLimitExceeded: Request limit exceeded. (status code: 503)".to_string(),
    );
}

/// Whether the object `id` was written less than `lag` ago (its file's modification time).
fn younger_than(dir: &Path, id: &str, lag: Duration) -> bool {
    !lag.is_zero()
        && std::fs::metadata(object_path(dir, id))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|w| w.elapsed().ok())
            .is_none_or(|age| age < lag)
}

/// The create delay: the `delay-ms` file wins over the env var, so a test can change it
/// between runs without restarting anything.
fn create_delay(dir: &Path) -> Result<Duration, String> {
    knob(dir, "delay-ms", Some("FAKECLOUD_DELAY_MS"))
}

/// The read delay (`read-ms`, else `FAKECLOUD_READ_MS`), slept before every read.
async fn read_delay(dir: &Path) -> Result<(), String> {
    let delay = knob(dir, "read-ms", Some("FAKECLOUD_READ_MS"))?;
    if !delay.is_zero() {
        // Async sleep: the runtime has one thread and must keep serving other calls.
        tokio::time::sleep(delay).await;
    }
    Ok(())
}

/// Counts one call served (`<dir>/calls`, when it exists): one line, appended.
fn count(dir: &Path, verb: &str, rtype: &str, id: &str) {
    use std::io::Write;
    let path = dir.join("calls");
    if let Ok(mut file) = std::fs::OpenOptions::new().append(true).open(&path) {
        let line = if id.is_empty() { format!("{verb} {rtype}\n") } else { format!("{verb} {rtype} {id}\n") };
        let _ = file.write_all(line.as_bytes());
    }
}

/// A delay in ms from the file `name` in the cloud directory, else the variable `var`.
fn knob(dir: &Path, name: &str, var: Option<&str>) -> Result<Duration, String> {
    let file = format!("file {name}");
    let (text, origin) = match std::fs::read_to_string(dir.join(name)) {
        Ok(text) => (text, file.as_str()),
        Err(_) => match var.map(std::env::var) {
            Some(Ok(text)) => (text, var.unwrap_or_default()),
            _ => return Ok(Duration::ZERO),
        },
    };
    // A typo must not silently turn a slow-create test into a fast one.
    let ms: u64 = text.trim().parse().map_err(|e| format!("fakecloud: {origin}: {text:?}: {e}"))?;
    Ok(Duration::from_millis(ms))
}

// ---------------------------------------------------------------------------------------------
// The two resource types: only their attributes and plan rules differ

trait Kind: Serialize + DeserializeOwned + Default + Send + Sync + 'static {
    const TYPE: &'static str;
    const ID_PREFIX: &'static str;
    fn attributes() -> HashMap<String, Attribute>;
    fn id_mut(&mut self) -> &mut Value<String>;
    fn tags(&self) -> &Tags;
    /// Completes a planned state (`prior` is `None` for a create) and returns the attributes
    /// whose change forces a replacement.
    fn plan(&mut self, config: &Self, prior: Option<&Self>) -> Vec<AttributePath>;
    /// Sets the computed attributes of a new object.
    fn born(&mut self, id: String);
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct Instance {
    id: Value<String>,
    ip: Value<String>,
    name: Value<String>,
    user_data: Value<String>,
    zone: Value<String>,
    size: Value<String>,
    tags: Tags,
}

impl Kind for Instance {
    const TYPE: &'static str = "fakecloud_instance";
    const ID_PREFIX: &'static str = "i-";

    fn attributes() -> HashMap<String, Attribute> {
        use AttributeConstraint::*;
        use AttributeType::String as Str;
        HashMap::from([
            ("id".into(), attr(Str, Computed, "Instance id, `i-` and 8 hex digits")),
            ("ip".into(), attr(Str, Computed, "Private IP, stable for the instance's life")),
            ("name".into(), attr(Str, Optional, "Name (updated in place)")),
            ("user_data".into(), attr(Str, Optional, "Boot script (changing it replaces the instance)")),
            ("zone".into(), attr(Str, Optional, "Zone (changing it replaces the instance)")),
            ("size".into(), attr(Str, Optional, "Size, such as `large` (changing it replaces the instance)")),
            ("tags".into(), attr(string_map(), Optional, "Tags (updated in place)")),
        ])
    }
    fn id_mut(&mut self) -> &mut Value<String> {
        &mut self.id
    }
    fn tags(&self) -> &Tags {
        &self.tags
    }
    fn plan(&mut self, _config: &Self, prior: Option<&Self>) -> Vec<AttributePath> {
        match prior {
            None => {
                self.id = Value::Unknown;
                self.ip = Value::Unknown;
                vec![]
            }
            // Like a real VM: user data is only read at boot; its zone and size are its own.
            Some(prior) => [
                ("user_data", &prior.user_data, &self.user_data),
                ("zone", &prior.zone, &self.zone),
                ("size", &prior.size, &self.size),
            ]
            .into_iter()
            .filter(|(_, before, now)| before != now)
            .map(|(name, _, _)| AttributePath::new(name))
            .collect(),
        }
    }
    fn born(&mut self, id: String) {
        let r = random_u32();
        self.ip = Value::Value(format!("10.0.{}.{}", (r >> 8) & 0xff, (r & 0xff) % 254 + 1));
        self.id = Value::Value(id);
    }
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct Volume {
    id: Value<String>,
    size: Value<i64>,
    zone: Value<String>,
    tags: Tags,
}

const DEFAULT_VOLUME_SIZE: i64 = 10;

impl Kind for Volume {
    const TYPE: &'static str = "fakecloud_volume";
    const ID_PREFIX: &'static str = "vol-";

    fn attributes() -> HashMap<String, Attribute> {
        use AttributeConstraint::*;
        HashMap::from([
            ("id".into(), attr(AttributeType::String, Computed, "Volume id, `vol-` and 8 hex digits")),
            // Optional+computed: tfplugin6 schemas carry no defaults, the plan fills it in.
            ("size".into(), attr(AttributeType::Number, OptionalComputed, "Size in GB (default 10, updated in place)")),
            ("zone".into(), attr(AttributeType::String, Optional, "Zone (changing it replaces the volume)")),
            ("tags".into(), attr(string_map(), Optional, "Tags (updated in place)")),
        ])
    }
    fn id_mut(&mut self) -> &mut Value<String> {
        &mut self.id
    }
    fn tags(&self) -> &Tags {
        &self.tags
    }
    fn plan(&mut self, config: &Self, prior: Option<&Self>) -> Vec<AttributePath> {
        // Terraform proposes the prior size when the config has none; removing `size` from
        // the config must go back to the default instead.
        if config.size.is_null() {
            self.size = Value::Value(DEFAULT_VOLUME_SIZE);
        }
        match prior {
            None => {
                self.id = Value::Unknown;
                vec![]
            }
            Some(prior) if prior.zone != self.zone => vec![AttributePath::new("zone")],
            Some(_) => vec![],
        }
    }
    fn born(&mut self, id: String) {
        self.id = Value::Value(id);
    }
}

// ---------------------------------------------------------------------------------------------
// The file semantics shared by both resource types

struct FileResource<K> {
    cloud: Cloud,
    kind: PhantomData<fn() -> K>,
}

impl<K: Kind> FileResource<K> {
    fn boxed(cloud: &Cloud) -> Box<dyn DynamicResource> {
        Box::new(Self { cloud: cloud.clone(), kind: PhantomData })
    }
}

fn known_id(diags: &mut Diagnostics, id: &mut Value<String>) -> Option<String> {
    match id {
        Value::Value(id) => Some(id.clone()),
        _ => {
            diags.root_error_short("fakecloud: object has no id");
            None
        }
    }
}

#[async_trait]
impl<K: Kind> Resource for FileResource<K> {
    type State<'a> = K;
    type PrivateState<'a> = ValueEmpty;
    type ProviderMetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        let block = Block { attributes: K::attributes(), description: K::TYPE.into(), ..Default::default() };
        Some(Schema { version: 0, block })
    }

    async fn read<'a>(
        &self,
        diags: &mut Diagnostics,
        mut state: K,
        private: ValueEmpty,
        _meta: ValueEmpty,
    ) -> Option<(K, ValueEmpty)> {
        let dir = self.cloud.dir(diags)?;
        let id = known_id(diags, state.id_mut())?;
        count(&dir, "read", K::TYPE, &id);
        if let Err(e) = read_delay(&dir).await {
            diags.root_error_short(e);
            return None;
        }
        if ids_in(&dir, "throttle-ids").contains(&id) || throttled(&dir, "throttle-reads").is_some() {
            throttle_error(diags, &format!("reading {id}"));
            return None;
        }
        match knob(&dir, "read-lag-ms", None) {
            // Not yet visible to a describe by ID: "not found", which terraform takes as gone.
            Ok(lag) if younger_than(&dir, &id, lag) => return None,
            Ok(_) => {}
            Err(e) => {
                diags.root_error_short(e);
                return None;
            }
        }
        match load::<K>(&dir, &id) {
            // The file is the truth: out-of-band edits show up as drift.
            Ok(Some(obj)) => Some((obj, private)),
            // No file: the machine vanished; `None` makes terraform drop it from state.
            Ok(None) => None,
            Err(e) => {
                diags.root_error_short(e);
                Some((state, private))
            }
        }
    }

    async fn plan_create<'a>(
        &self,
        _diags: &mut Diagnostics,
        mut proposed: K,
        config: K,
        _meta: ValueEmpty,
    ) -> Option<(K, ValueEmpty)> {
        proposed.plan(&config, None);
        Some((proposed, ValueEmpty::Null))
    }

    async fn plan_update<'a>(
        &self,
        _diags: &mut Diagnostics,
        prior: K,
        mut proposed: K,
        config: K,
        private: ValueEmpty,
        _meta: ValueEmpty,
    ) -> Option<(K, ValueEmpty, Vec<AttributePath>)> {
        let replace = proposed.plan(&config, Some(&prior));
        Some((proposed, private, replace))
    }

    async fn plan_destroy<'a>(
        &self,
        _diags: &mut Diagnostics,
        _prior: K,
        private: ValueEmpty,
        _meta: ValueEmpty,
    ) -> Option<ValueEmpty> {
        Some(private)
    }

    async fn create<'a>(
        &self,
        diags: &mut Diagnostics,
        mut planned: K,
        _config: K,
        private: ValueEmpty,
        _meta: ValueEmpty,
    ) -> Option<(K, ValueEmpty)> {
        let dir = self.cloud.dir(diags)?;
        count(&dir, "create", K::TYPE, "");
        if let Err(e) = together(&dir, K::TYPE).await {
            diags.root_error_short(e);
            return None;
        }
        match create_delay(&dir) {
            // Async sleep: the runtime has one thread and must keep serving other calls.
            Ok(delay) => tokio::time::sleep(delay).await,
            Err(e) => {
                diags.root_error_short(e);
                return None;
            }
        }
        if let Some(left) = throttled(&dir, "throttle-creates") {
            let detail = format!("ThrottlingException: Rate exceeded (status code: 400; {left} more throttled)");
            diags.root_error("fakecloud: creating the object failed", detail);
            return None;
        }
        let refuse = dir.join("fail-create");
        // Empty: every create fails; else only those of objects of that name (a spec that
        // cannot be applied, such as an image that does not exist).
        let named = |text: String| {
            let name = serde_json::to_value(&planned).ok().and_then(|v| v["name"].as_str().map(str::to_string));
            text.trim().is_empty() || name.as_deref() == Some(text.trim())
        };
        if let Some(detail) = no_capacity(&dir, K::TYPE, &planned) {
            diags.root_error("fakecloud: creating the object failed", detail);
            return None;
        }
        if std::fs::read_to_string(&refuse).is_ok_and(named) {
            let detail = format!("remove {} to allow creates again", refuse.display());
            diags.root_error("fakecloud: create refused (fail-create is set)", detail);
            return None;
        }
        loop {
            let id = format!("{}{:08x}", K::ID_PREFIX, random_u32());
            planned.born(id.clone());
            match store(&dir, &id, &planned, true) {
                Ok(()) => break,
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    diags.root_error_short(format!("fakecloud: writing {id}: {e}"));
                    return None;
                }
            }
        }
        // The machine exists; it is reported once it has booted.
        match knob(&dir, "boot-ms", None) {
            Ok(boot) => tokio::time::sleep(boot).await,
            Err(e) => {
                diags.root_error_short(e);
                return None;
            }
        }
        if let Some(error) = lost(&dir) {
            diags.root_error("fakecloud: creating the object failed", error);
            return None;
        }
        Some((planned, private))
    }

    async fn update<'a>(
        &self,
        diags: &mut Diagnostics,
        _prior: K,
        mut planned: K,
        _config: K,
        private: ValueEmpty,
        _meta: ValueEmpty,
    ) -> Option<(K, ValueEmpty)> {
        let dir = self.cloud.dir(diags)?;
        let id = known_id(diags, planned.id_mut())?;
        count(&dir, "update", K::TYPE, &id);
        // Updating a vanished machine fails, as in a real cloud (e.g. with -refresh=false).
        match load::<K>(&dir, &id) {
            Ok(Some(_)) => {}
            Ok(None) => {
                diags.root_error_short(format!("fakecloud: no object {id}"));
                return None;
            }
            Err(e) => {
                diags.root_error_short(e);
                return None;
            }
        }
        if let Err(e) = store(&dir, &id, &planned, false) {
            diags.root_error_short(format!("fakecloud: writing {id}: {e}"));
            return None;
        }
        Some((planned, private))
    }

    async fn destroy<'a>(
        &self,
        diags: &mut Diagnostics,
        mut prior: K,
        _private: ValueEmpty,
        _meta: ValueEmpty,
    ) -> Option<()> {
        let dir = self.cloud.dir(diags)?;
        let id = known_id(diags, prior.id_mut())?;
        count(&dir, "delete", K::TYPE, &id);
        match std::fs::remove_file(object_path(&dir, &id)) {
            // Already gone is what destroy wants anyway.
            Err(e) if e.kind() != ErrorKind::NotFound => {
                diags.root_error_short(format!("fakecloud: deleting {id}: {e}"));
                None
            }
            _ => Some(()),
        }
    }

    async fn import<'a>(&self, diags: &mut Diagnostics, id: String) -> Option<(K, ValueEmpty)> {
        let dir = self.cloud.dir(diags)?;
        count(&dir, "import", K::TYPE, &id);
        match load::<K>(&dir, &id) {
            Ok(Some(obj)) => Some((obj, ValueEmpty::Null)),
            Ok(None) => {
                diags.root_error_short(format!("fakecloud: no object {id}"));
                None
            }
            Err(e) => {
                diags.root_error_short(e);
                None
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The data sources: objects by tags

/// `fakecloud_instances` / `fakecloud_volumes`: `tags` in, `ids` out.
#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct ByTags {
    tags: Tags,
    ids: Value<Vec<Value<String>>>,
}

struct Lookup<K> {
    cloud: Cloud,
    kind: PhantomData<fn() -> K>,
}

impl<K: Kind> Lookup<K> {
    fn boxed(cloud: &Cloud) -> Box<dyn tf_provider::DynamicDataSource> {
        Box::new(Self { cloud: cloud.clone(), kind: PhantomData })
    }
}

#[async_trait]
impl<K: Kind> tf_provider::DataSource for Lookup<K> {
    type State<'a> = ByTags;
    type ProviderMetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        use AttributeConstraint::*;
        let attributes = HashMap::from([
            ("tags".into(), attr(string_map(), Required, "Every one of these tags (a value `*`: any value)")),
            ("ids".into(), attr(AttributeType::List(Box::new(AttributeType::String)), Computed, "IDs, sorted")),
        ]);
        let block = Block { attributes, description: format!("{}s by tags", K::TYPE).into(), ..Default::default() };
        Some(Schema { version: 0, block })
    }

    async fn read<'a>(&self, diags: &mut Diagnostics, mut config: ByTags, _meta: ValueEmpty) -> Option<ByTags> {
        let dir = self.cloud.dir(diags)?;
        count(&dir, "list", K::TYPE, "");
        if let Err(e) = read_delay(&dir).await {
            diags.root_error_short(e);
            return None;
        }
        if throttled(&dir, "throttle-lists").is_some() {
            throttle_error(diags, &format!("listing {}s", K::TYPE));
            return None;
        }
        let wanted: BTreeMap<String, String> = match &config.tags {
            Value::Value(tags) => {
                tags.iter().filter_map(|(k, v)| v.as_ref_option().map(|v| (k.clone(), v.clone()))).collect()
            }
            _ => BTreeMap::new(),
        };
        let lag = match knob(&dir, "list-lag-ms", None) {
            Ok(lag) => lag,
            Err(e) => {
                diags.root_error_short(e);
                return None;
            }
        };
        let dropped = ids_in(&dir, "list-drop");
        let mut ids: Vec<String> =
            ids_in(&dir, "list-ghosts").into_iter().filter(|id| id.starts_with(K::ID_PREFIX)).collect();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) => {
                diags.root_error_short(format!("fakecloud: listing {}: {e}", dir.display()));
                return None;
            }
        };
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".json").filter(|n| !n.starts_with('.')) else { continue };
            if younger_than(&dir, id, lag) || dropped.iter().any(|d| d == id) {
                continue;
            }
            // Objects of the other kind are not ours to list.
            let Ok(Some(obj)) = load::<K>(&dir, id) else { continue };
            let has = match obj.tags() {
                Value::Value(tags) => wanted.iter().all(|(k, v)| {
                    tags.get(k.as_str()).and_then(|t| t.as_ref_option()).is_some_and(|t| v == "*" || t == v)
                }),
                _ => wanted.is_empty(),
            };
            if has {
                ids.push(id.to_string());
            }
        }
        ids.sort();
        ids.dedup();
        if ids.is_empty() && dir.join("empty-fails").exists() {
            diags.root_error("fakecloud: no matching instances found", "try a different search".to_string());
            return None;
        }
        config.ids = Value::Value(ids.into_iter().map(Value::Value).collect());
        Some(config)
    }
}

// ---------------------------------------------------------------------------------------------
// The provider

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct Config {
    dir: Value<String>,
}

struct FakeCloud {
    cloud: Cloud,
}

#[async_trait]
impl Provider for FakeCloud {
    type Config<'a> = Config;
    type MetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        let dir =
            attr(AttributeType::String, AttributeConstraint::Optional, "Cloud directory (default: env FAKECLOUD_DIR)");
        let block = Block {
            attributes: HashMap::from([("dir".into(), dir)]),
            description: "fakecloud".into(),
            ..Default::default()
        };
        Some(Schema { version: 0, block })
    }

    async fn configure<'a>(&self, diags: &mut Diagnostics, _terraform_version: String, config: Config) -> Option<()> {
        let dir = match config.dir {
            Value::Value(dir) if !dir.is_empty() => dir,
            _ => match std::env::var("FAKECLOUD_DIR") {
                Ok(dir) if !dir.is_empty() => dir,
                _ => {
                    diags.error(
                        "fakecloud: no cloud directory",
                        "set `dir` in the provider block or the FAKECLOUD_DIR environment variable",
                        AttributePath::new("dir"),
                    );
                    return None;
                }
            },
        };
        // Tests point it at a fresh temp path; creating it saves them a step.
        if let Err(e) = std::fs::create_dir_all(&dir) {
            diags.root_error_short(format!("fakecloud: creating {dir}: {e}"));
            return None;
        }
        *self.cloud.0.lock().unwrap() = Some(PathBuf::from(dir));
        Some(())
    }

    fn get_resources(&self, _diags: &mut Diagnostics) -> Option<HashMap<String, Box<dyn DynamicResource>>> {
        // tf-provider prefixes these with the provider name: fakecloud_instance, fakecloud_volume.
        Some(HashMap::from([
            ("instance".to_owned(), FileResource::<Instance>::boxed(&self.cloud)),
            ("volume".to_owned(), FileResource::<Volume>::boxed(&self.cloud)),
        ]))
    }

    fn get_data_sources(
        &self,
        _diags: &mut Diagnostics,
    ) -> Option<HashMap<String, Box<dyn tf_provider::DynamicDataSource>>> {
        Some(HashMap::from([
            ("instances".to_owned(), Lookup::<Instance>::boxed(&self.cloud)),
            ("volumes".to_owned(), Lookup::<Volume>::boxed(&self.cloud)),
        ]))
    }
}

/// Sets `TCP_NODELAY` on the connection terraform opens to us, as Go (every real provider) does
/// on every TCP connection. tf-provider serves gRPC over TCP and leaves Nagle's algorithm on:
/// then a reply written in two pieces waits for the peer's delayed ACK, 40 ms a time, and a plan
/// of a thousand resources spends most of its time waiting. The listener is not ours to
/// configure, so a thread sets the option on every TCP socket of this process while terraform
/// connects (the first seconds).
fn no_delay() {
    std::thread::spawn(|| {
        for _ in 0..200 {
            if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
                for fd in fds.filter_map(Result::ok).filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()) {
                    let on: libc::c_int = 1;
                    // SAFETY: setsockopt on a descriptor of this process; on one that is not a
                    // TCP socket it fails (ENOTSOCK, ENOPROTOOPT) and changes nothing.
                    unsafe {
                        libc::setsockopt(
                            fd,
                            libc::IPPROTO_TCP,
                            libc::TCP_NODELAY,
                            std::ptr::addr_of!(on).cast(),
                            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                        )
                    };
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
}

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // Ctrl-C in a terminal reaches the whole process group; terraform stops its plugins over
    // gRPC, and a plugin killed by the signal makes terraform report "Plugin did not respond".
    // SAFETY: sets a signal disposition to SIG_IGN; no other thread exists yet.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
    // A plugin whose terraform was killed has nobody to serve: go with it, as a well-behaved
    // plugin does, rather than linger, orphaned. (Not PR_SET_PDEATHSIG: it fires when the
    // *thread* that started us ends, and terraform may start plugins from any of its threads.)
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(200));
        if unsafe { libc::getppid() } != parent {
            std::process::exit(0);
        }
    });
    no_delay();
    // tf-provider appends a captured backtrace to every diagnostic when RUST_BACKTRACE is set
    // (common in test environments), burying the message. Panics still honour RUST_BACKTRACE.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
    // One thread is plenty: creates sleep asynchronously and file I/O is tiny.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(serve("fakecloud", FakeCloud { cloud: Cloud::default() }))?;
    Ok(())
}
