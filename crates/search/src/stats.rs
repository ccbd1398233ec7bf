//! What the server's metrics read of this replica's text indexes: how far behind Postgres they
//! were when last looked at, and how many events they have taken in.
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use uuid::Uuid;

#[derive(Debug, Default)]
pub struct IndexStats {
    /// Per namespace: events committed in Postgres but not yet in the text index, as measured at
    /// the start of the last background catch-up of that namespace.
    behind: Mutex<HashMap<Uuid, u64>>,
    indexed: AtomicU64,
    commits: AtomicU64,
}

impl IndexStats {
    /// Events committed but not yet searchable on this replica, over every namespace.
    pub fn lag_events(&self) -> u64 {
        self.behind.lock().map(|b| b.values().sum()).unwrap_or(0)
    }

    /// Events indexed since the process started.
    pub fn indexed_events(&self) -> u64 {
        self.indexed.load(Ordering::Relaxed)
    }

    /// Commits of the text indexes since the process started (a query over a few sessions does
    /// not commit its catch-up: the background one commits, about once a `sync_interval_ms`).
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    pub(crate) fn add_commit(&self) {
        self.commits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_behind(&self, ns: Uuid, events: u64) {
        if let Ok(mut b) = self.behind.lock() {
            b.insert(ns, events);
        }
    }

    pub(crate) fn add_indexed(&self, events: u64) {
        self.indexed.fetch_add(events, Ordering::Relaxed);
    }
}
