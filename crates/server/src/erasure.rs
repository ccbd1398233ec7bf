//! Erasure, server side: `EraseSubject` runs it (memex-store in one transaction, memex-context's
//! scan of the stored packs), and every replica applies the erasure log to what only it holds —
//! its text index and its caches — as soon as the `memex_erasure` notification arrives, and at
//! start from where it left off (`erasures-applied` in its index directory), so a replica that
//! was down meanwhile still drops what it indexed before.
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use memex_store::{Erasure, ErasurePlan};
use uuid::Uuid;

use crate::state::AppState;

/// Applies the erasure log to this replica.
pub struct Eraser {
    state: Arc<AppState>,
    /// The last erasure applied here.
    applied: AtomicU64,
    /// Serialises applying (the listener and an erasure made here may both try).
    lock: tokio::sync::Mutex<()>,
    file: Option<PathBuf>,
    wake: tokio::sync::Notify,
}

impl Eraser {
    pub fn new(state: Arc<AppState>) -> Arc<Eraser> {
        let file = state.search.as_ref().map(|s| s.config().dir().join("erasures-applied"));
        let applied = file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        Arc::new(Eraser {
            state,
            applied: AtomicU64::new(applied),
            lock: Default::default(),
            file,
            wake: Default::default(),
        })
    }

    /// Erases the sessions of a subject and applies it here at once.
    pub async fn erase(&self, namespace_id: Uuid, plan: ErasurePlan) -> Result<Erasure, memex_store::StoreError> {
        let scan = self.state.context.erasure_scan(&plan.sessions);
        let erasure = self.state.store.erase_sessions(namespace_id, &plan, Some(scan)).await?;
        if !erasure.dry_run {
            tracing::warn!(
                erasure = %erasure.id, namespace = %namespace_id, sessions = erasure.sessions.len(),
                events = erasure.counts.events, by = %plan.requested_by, "erased"
            );
            self.apply().await;
            // What the namespace stores went down: count it again, for its storage quota.
            match self.state.store.recount_usage(namespace_id).await {
                Ok(_) => self.state.quotas.forget(namespace_id),
                Err(e) => {
                    tracing::warn!(error = %e, namespace = %namespace_id, "cannot recount usage after an erasure")
                }
            }
        }
        Ok(erasure)
    }

    /// Applies every erasure after the last one applied here; on failure, retried at the next
    /// notification or (re)connection. As `Tenant::All`, whoever calls it: the log is every
    /// namespace's, and so are this replica's index and caches.
    pub async fn apply(&self) {
        memex_store::tenant::scope(memex_store::Tenant::All, self.apply_log()).await
    }

    async fn apply_log(&self) {
        let _one = self.lock.lock().await;
        let from = self.applied.load(Ordering::SeqCst);
        let log = match self.state.store.erasures_after(from).await {
            Ok(log) => log,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the erasure log; retrying at the next notice");
                return;
            }
        };
        if log.is_empty() {
            return;
        }
        // Caches first: from here on nothing is answered from what was read before.
        self.state.views.forget_all();
        self.state.context.forget_all();
        for entry in log {
            if let Some(search) = self.state.search.as_ref().filter(|_| !entry.sessions.is_empty())
                && let Err(e) = search.forget_sessions(entry.namespace_id, &entry.sessions).await
            {
                tracing::warn!(error = %e, seq = entry.seq, "cannot drop erased sessions from the index; retrying later");
                return;
            }
            self.applied.store(entry.seq, Ordering::SeqCst);
            if let Some(f) = &self.file
                && let Err(e) = std::fs::write(f, entry.seq.to_string())
            {
                tracing::warn!(error = %e, file = %f.display(), "cannot record the erasures applied");
            }
        }
    }

    /// Listens for erasures until the store closes, applying each (and, at every (re)connection,
    /// whatever was missed). One future, no task of its own: aborting it leaves nothing behind
    /// that holds the state (and with it the index directory's lock).
    pub async fn run(self: Arc<Self>) {
        let listen = self.state.store.listen("memex_erasure", |_| self.wake.notify_one());
        let apply = async {
            loop {
                self.wake.notified().await;
                self.apply().await;
            }
        };
        tokio::select! {
            () = listen => {}
            () = apply => {}
        }
    }
}
