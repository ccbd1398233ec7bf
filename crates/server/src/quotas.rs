//! Quotas per namespace, enforced on every append (AppendEvents, StreamEvents, ImportTrace):
//! events per second (a token bucket per replica, one second deep) and stored bytes (the usage
//! Postgres records, plus what this replica appended since it last added to it). Past either,
//! `RESOURCE_EXHAUSTED` at once and nothing is written: with a retry hint for the rate, with the
//! figures for storage (waiting does not help; erasing or a larger quota does).
//!
//! Both are soft by design, to keep appends off a shared counter row: the rate is per replica
//! (N replicas let a namespace through N times over), and a namespace can overshoot its storage
//! by what the replicas append in about a second.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use memex_store::{Namespace, Quota, Store};
use tonic::Status;
use uuid::Uuid;

use crate::status::store_status;

/// How long a namespace's quota and recorded usage are trusted before they are read again.
const REFRESH: Duration = Duration::from_secs(5);
/// How often this replica adds what it appended to the recorded usage.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// Namespaces not appended to for this long are forgotten (read again when they come back).
const IDLE: Duration = Duration::from_secs(600);

struct Entry {
    quota: Quota,
    /// Usage as recorded in Postgres when last read or added to.
    recorded: u64,
    /// Appended here since, not yet added to the record.
    pending: u64,
    /// The rate's bucket: tokens (events) left, as of `filled`; may go below zero by one batch.
    tokens: f64,
    filled: Instant,
    loaded: Instant,
    used: Instant,
}

pub struct Quotas {
    store: Store,
    default: Quota,
    entries: Mutex<HashMap<Uuid, Entry>>,
}

fn lock<'a>(m: &'a Mutex<HashMap<Uuid, Entry>>) -> std::sync::MutexGuard<'a, HashMap<Uuid, Entry>> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Quotas {
    pub fn new(store: Store, config: &crate::Config) -> Quotas {
        let default = Quota {
            events_per_sec: Some(config.limits.namespace_events_per_sec).filter(|r| *r > 0),
            stored_bytes: Some(config.limits.namespace_stored_bytes).filter(|b| *b > 0),
        };
        Quotas { store, default, entries: Mutex::new(HashMap::new()) }
    }

    /// Lets an append of `events` events and `bytes` bytes into `ns` through, or refuses it.
    pub async fn admit(&self, ns: &Namespace, events: u64, bytes: u64) -> Result<(), Status> {
        let now = Instant::now();
        let stale = lock(&self.entries).get(&ns.id).is_none_or(|e| now.duration_since(e.loaded) >= REFRESH);
        if stale {
            let (own, recorded) = self.store.quota_and_usage(ns.id).await.map_err(|e| store_status(&e))?;
            let quota = Quota {
                events_per_sec: own.events_per_sec.or(self.default.events_per_sec),
                stored_bytes: own.stored_bytes.or(self.default.stored_bytes),
            };
            let mut entries = lock(&self.entries);
            let e = entries.entry(ns.id).or_insert_with(|| Entry {
                quota,
                recorded,
                pending: 0,
                tokens: quota.events_per_sec.map_or(0.0, f64::from),
                filled: now,
                loaded: now,
                used: now,
            });
            e.quota = quota;
            e.recorded = recorded;
            e.loaded = now;
        }
        let mut entries = lock(&self.entries);
        let Some(e) = entries.get_mut(&ns.id) else { return Ok(()) };
        e.used = now;
        if let Some(limit) = e.quota.stored_bytes {
            let stored = e.recorded + e.pending;
            if stored.saturating_add(bytes) > limit {
                return Err(Status::resource_exhausted(format!(
                    "namespace {:?} stores {stored} bytes of its quota of {limit}; this append of {bytes} bytes would pass it (erase data, or raise it: memex admin quota --stored-bytes)",
                    ns.name
                )));
            }
        }
        if let Some(rate) = e.quota.events_per_sec {
            let rate = f64::from(rate);
            e.tokens = (e.tokens + now.duration_since(e.filled).as_secs_f64() * rate).min(rate);
            e.filled = now;
            if e.tokens <= 0.0 {
                let wait = Duration::from_secs_f64((-e.tokens + 1.0) / rate);
                let status = Status::resource_exhausted(format!(
                    "namespace {:?} appends more than its {rate} events per second; retry after {} ms",
                    ns.name,
                    wait.as_millis()
                ));
                return Err(crate::admission::retry_after(status, wait));
            }
            // A batch larger than a second's worth goes through whole and leaves a debt.
            e.tokens -= events as f64;
        }
        Ok(())
    }

    /// Records an append that committed (not a replay).
    pub fn appended(&self, ns: Uuid, bytes: u64) {
        self.charge(ns, 0, bytes);
    }

    /// Records a write whose size was known only after it committed (an import: admitted for
    /// its trace's bytes, charged its events afterwards, which may leave the bucket in debt).
    pub fn charge(&self, ns: Uuid, events: u64, bytes: u64) {
        if let Some(e) = lock(&self.entries).get_mut(&ns) {
            e.pending += bytes;
            if e.quota.events_per_sec.is_some() {
                e.tokens -= events as f64;
            }
        }
    }

    /// Forgets what is known of `ns`, so the next append reads its quota and usage again (after
    /// an erasure recounted it).
    pub fn forget(&self, ns: Uuid) {
        lock(&self.entries).remove(&ns);
    }

    /// Adds what this replica appended to the recorded usage, every `FLUSH_EVERY`, until the
    /// store closes; forgets idle namespaces.
    pub async fn run(&self) {
        let mut tick = tokio::time::interval(FLUSH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if self.store.pool().is_closed() {
                return;
            }
            self.flush().await;
        }
    }

    pub async fn flush(&self) {
        let due: Vec<(Uuid, u64)> = {
            let mut entries = lock(&self.entries);
            entries.retain(|_, e| e.pending > 0 || e.used.elapsed() < IDLE);
            entries
                .iter_mut()
                .filter(|(_, e)| e.pending > 0)
                .map(|(id, e)| (*id, std::mem::take(&mut e.pending)))
                .collect()
        };
        for (id, bytes) in due {
            let add = self.store.add_usage(id, bytes);
            match memex_store::tenant::scope(memex_store::Tenant::Namespace(id), add).await {
                Ok(total) => {
                    if let Some(e) = lock(&self.entries).get_mut(&id) {
                        e.recorded = total;
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, namespace_id = %id, "cannot record usage; will retry");
                    if let Some(e) = lock(&self.entries).get_mut(&id) {
                        e.pending += bytes;
                    }
                }
            }
        }
    }
}

/// Bytes an append stores: event contents and artifact bodies.
pub fn batch_bytes(batch: &memex_event::PreparedBatch) -> u64 {
    batch.events.iter().map(|e| (e.content.len() + e.artifact.as_ref().map_or(0, |a| a.body.len())) as u64).sum()
}
