//! The retention job: every `retention.interval_secs`, for each namespace with a policy, stored
//! packs past `retain_packs_days` are dropped (with the chunks no other pack names), and sessions
//! whose last event is past `retain_events_days` are erased through EraseSubject's path (audited
//! as "retention policy"). Work is taken in slices, so a large backlog takes several runs.
use std::sync::Arc;
use std::time::Duration;

use memex_store::ErasurePlan;
use memex_store::tenant::{self, Tenant};

use crate::erasure::Eraser;
use crate::state::AppState;

const SLICE: i64 = 500;

/// Runs one pass over every policy; returns (packs dropped, sessions erased). The caller is
/// `Tenant::All` (the policies are every namespace's).
pub async fn run_once(state: &AppState, eraser: &Eraser) -> Result<(u64, u64), memex_store::StoreError> {
    let (mut packs, mut sessions) = (0, 0);
    for (ns, policy) in state.store.retention_policies().await? {
        // Each namespace's slice is that namespace's work: held to its rows.
        let (p, s) = tenant::scope(Tenant::Namespace(ns), run_policy(state, eraser, ns, policy)).await?;
        packs += p;
        sessions += s;
    }
    Ok((packs, sessions))
}

async fn run_policy(
    state: &AppState,
    eraser: &Eraser,
    ns: uuid::Uuid,
    policy: memex_store::Retention,
) -> Result<(u64, u64), memex_store::StoreError> {
    let (mut packs, mut sessions) = (0, 0);
    if let Some(days) = policy.packs_days {
        let expired = state.store.expired_packs(ns, days, SLICE).await?;
        if !expired.is_empty() {
            let scan = state.context.expiry_scan(&expired);
            let reason = format!("packs older than {days} days (the namespace's retention)");
            let (dropped, chunks) = state.store.drop_packs(ns, &expired, scan, &reason).await?;
            // Here at once (every replica also on the log's notice): the chunks this process
            // knew to be stored may be gone.
            eraser.apply().await;
            tracing::info!(namespace = %ns, packs = dropped, chunks, days, "retention: packs dropped");
            packs += dropped;
        }
    }
    if let Some(days) = policy.events_days {
        let stale = state.store.stale_sessions(ns, days, SLICE).await?;
        if !stale.is_empty() {
            let plan = ErasurePlan {
                id: uuid::Uuid::now_v7(),
                sessions: stale,
                requested_by: "retention policy".into(),
                reason: format!("events older than {days} days (the namespace's retention)"),
                dry_run: false,
            };
            sessions += eraser.erase(ns, plan).await?.counts.sessions;
        }
    }
    Ok((packs, sessions))
}

/// Runs the job every `every` until the task is aborted.
pub async fn run(state: Arc<AppState>, eraser: Arc<Eraser>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        if let Err(e) = run_once(&state, &eraser).await {
            tracing::warn!(error = %e, "retention run failed; trying again at the next");
        }
    }
}
