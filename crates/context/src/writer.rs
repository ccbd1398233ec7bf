//! Group commit of stored packs: concurrent BuildPacks share one INSERT and one WAL flush, each
//! caller still answered only once its own pack is durable (GetPack can replay it at once).
use std::hash::{Hash, Hasher};

use chrono::{DateTime, Utc};
use memex_store::tenant::{self, Tenant};
use memex_store::{PackRow, Store};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::{ContextError, Result};

/// Writer tasks; packs are spread over them by session.
const SHARDS: usize = 2;
/// Most packs in one statement.
const MAX_BATCH: usize = 64;

struct Pending {
    namespace_id: Uuid,
    /// The writing caller's tenant: a pack written on its own is written as that.
    tenant: Tenant,
    row: PackRow,
    reply: oneshot::Sender<Result<DateTime<Utc>>>,
}

pub(crate) struct PackWriter {
    shards: Vec<mpsc::Sender<Pending>>,
    store: Store,
}

impl PackWriter {
    /// Starts the writer tasks on the current runtime.
    pub(crate) fn start(store: &Store) -> PackWriter {
        let shards = (0..SHARDS)
            .map(|_| {
                let (tx, rx) = mpsc::channel(1024);
                // Packs of every namespace share a statement, so the loop writes as `All`; each
                // pack is admitted only for its caller's tenant (`write`).
                tokio::spawn(tenant::scope(Tenant::All, write_loop(store.clone(), rx)));
                tx
            })
            .collect();
        PackWriter { shards, store: store.clone() }
    }

    pub(crate) async fn write(&self, namespace_id: Uuid, row: PackRow) -> Result<DateTime<Utc>> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        row.session_id.hash(&mut h);
        let shard = &self.shards[(h.finish() % self.shards.len() as u64) as usize];
        // The shared statement runs as `All`: the wall row-level security would put around this
        // caller's insert is put here instead, before its pack joins the others.
        let tenant = self.store.tenant();
        if !tenant.permits(namespace_id) {
            return Err(ContextError::Store(memex_store::StoreError::TenantMismatch(namespace_id)));
        }
        let (reply, answer) = oneshot::channel();
        let gone = || ContextError::Seam { seam: "pack writer", message: "the writer stopped (shutting down)".into() };
        shard.send(Pending { namespace_id, tenant, row, reply }).await.map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

async fn write_loop(store: Store, mut rx: mpsc::Receiver<Pending>) {
    loop {
        // Whatever is waiting, once at least one is: 0 only when the channel is closed.
        let mut batch = Vec::with_capacity(MAX_BATCH);
        if rx.recv_many(&mut batch, MAX_BATCH).await == 0 {
            break;
        }
        let rows: Vec<(Uuid, &PackRow)> = batch.iter().map(|p| (p.namespace_id, &p.row)).collect();
        match store.insert_packs(&rows).await {
            Ok(times) => {
                for (p, at) in batch.into_iter().zip(times) {
                    let _ = p.reply.send(Ok(at));
                }
            }
            Err(e) => {
                // Write each on its own so an error reaches only the pack it belongs to.
                tracing::warn!(error = %e, packs = batch.len(), "pack group insert failed; writing each pack on its own");
                for p in batch {
                    let r = tenant::scope(p.tenant, store.insert_pack(p.namespace_id, &p.row))
                        .await
                        .map_err(ContextError::from);
                    let _ = p.reply.send(r);
                }
            }
        }
    }
}
